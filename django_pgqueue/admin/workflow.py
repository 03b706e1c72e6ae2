"""Workflows in the admin (docs/workflows.md): a job's parents, dependents and batch on its page;
the job list's batch filter; the batches' pages, with their progress, counts, callbacks and the
"Retry failed members" button."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from django_pgqueue import operations
from django_pgqueue.admin.inputs import checked_urls, filter_parameters, parse_id
from django_pgqueue.conf import settings
from django_pgqueue.models import Batch, Job
from django_pgqueue.states import FAILED, FINISHED, JobStatus

if TYPE_CHECKING:
    _BatchAdmin = admin.ModelAdmin[Batch]
else:
    _BatchAdmin = admin.ModelAdmin

#: Batches the job list's filter offers (the newest); any other is chosen by its URL.
RECENT_BATCHES = 20


def job_url(job_id: int) -> str:
    return reverse("admin:django_pgqueue_job_change", args=[job_id])


def members_url(batch_id: int, status: str | None = None) -> str:
    query = f"?batch={batch_id}" + (f"&status={status}" if status else "")
    return reverse("admin:django_pgqueue_job_changelist") + query


def _jobs(pairs: list[tuple[int, str | None]]) -> SafeString:
    if not pairs:
        return mark_safe("-")
    return format_html_join(
        ", ",
        '<a href="{}">#{}</a> ({})',
        (
            (job_url(i), i, status) if status is not None else ("#", i, "deleted")
            for i, status in pairs
        ),
    )


class BatchFilter(admin.SimpleListFilter):
    """The job list's filter by batch (``?batch=<id>``): the newest batches, and the one in
    the URL (from the small batch table, never from the job table)."""

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        batches = list(Batch.objects.using(settings.DATABASE).order_by("-id")[:RECENT_BATCHES])
        found = [(str(b.pk), str(b)) for b in batches]
        value = self.value()
        if value and value not in {k for k, _ in found}:
            found.append((value, f"batch #{value}"))
        return found

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = parse_id(self.value() or "")
        return None if value is None else queryset.filter(batch_id=value)


class WorkflowColumns:
    """A job's place in a workflow, on its page (``JobAdmin``)."""

    @admin.display(description="Waits for")
    def parents_column(self, obj: Job) -> SafeString:
        db = operations.DjangoDatabase(settings.DATABASE)
        parents = operations.parents(db, obj.pk)
        left = "" if obj.parents_left is None else f" ({obj.parents_left} not completed yet)"
        return format_html("{}{}", _jobs(parents), left)

    @admin.display(description="Dependents")
    def dependents_column(self, obj: Job) -> SafeString:
        db = operations.DjangoDatabase(settings.DATABASE)
        return _jobs(list(operations.dependents(db, obj.pk)))

    @admin.display(description="Batch")
    def batch_column(self, obj: Job) -> SafeString:
        batch_id = obj.batch_id or obj.callback_of_id
        if batch_id is None:
            return mark_safe("-")
        role = "member of" if obj.batch_id else "callback of"
        url = reverse("admin:django_pgqueue_batch_change", args=[batch_id])
        return format_html('{} <a href="{}">batch #{}</a>', role, url, batch_id)


def in_workflow(obj: Job) -> bool:
    return (
        obj.parents_left is not None
        or obj.dependents
        or obj.batch_id is not None
        or obj.callback_of_id is not None
    )


class BatchAdmin(_BatchAdmin):
    """A batch's page: its progress, its members by status (each a link to the job list), its
    callbacks and when they were enqueued; "Retry failed members" re-opens it."""

    list_display = ("id", "description", "progress_column", "created_at", "finished_at")
    list_display_links = ("id", "description")
    list_per_page = 100
    show_full_result_count = False
    fieldsets = (
        (None, {"fields": ("id", "description", "state_column", "progress_column")}),
        ("Members", {"fields": ("counts_column",)}),
        ("Callbacks", {"fields": ("callbacks_column",)}),
        ("Timing", {"fields": ("created_at", "sealed_at", "finished_at")}),
    )
    readonly_fields = (
        "id",
        "description",
        "state_column",
        "progress_column",
        "counts_column",
        "callbacks_column",
        "created_at",
        "sealed_at",
        "finished_at",
    )
    change_form_template = "admin/django_pgqueue/batch/change_form.html"

    class Media:
        css = {"all": ("django_pgqueue/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        return super().get_queryset(request).using(settings.DATABASE)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by batch() in code

    def has_change_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return obj is None and super().has_change_permission(request)

    def can_retry(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_pgqueue.change_job")

    @admin.display(description="State")
    def state_column(self, obj: Batch) -> str:
        if obj.sealed_at is None:
            return "open (its block has not closed, or its transaction not committed)"
        if obj.finished_at is None:
            return "in progress"
        return "finished, " + ("with failures" if obj.failed_buckets else "all completed")

    @admin.display(description="Progress")
    def progress_column(self, obj: Batch) -> SafeString:
        counts = obj.counts()
        total = sum(counts.values())
        ended = sum(counts[s] for s in FINISHED)
        failed = sum(counts[s] for s in FAILED)
        return format_html(
            '<progress value="{}" max="{}"></progress> {} of {} ended{}',
            ended,
            max(total, 1),
            ended,
            total,
            f", {failed} failed" if failed else "",
        )

    @admin.display(description="By status")
    def counts_column(self, obj: Batch) -> SafeString:
        counts = obj.counts()
        return format_html(
            '{} · <a href="{}">all</a>',
            format_html_join(
                " · ",
                '<a href="{}">{} {}</a>',
                ((members_url(obj.pk, status), n, status) for status, n in counts.items() if n),
            ),
            members_url(obj.pk),
        )

    @admin.display(description="Callbacks")
    def callbacks_column(self, obj: Batch) -> SafeString:
        rows = []
        for name in ("on_success", "on_failure", "on_complete"):
            sig = getattr(obj, name)
            if not sig:
                continue
            fired = [f for f in obj.fired or [] if f.get("callback") == name]
            rows.append(
                (
                    name,
                    sig.get("name"),
                    format_html_join(
                        ", ",
                        '<a href="{}">#{}</a> at {}',
                        ((job_url(f["job"]), f["job"], f.get("at", "")) for f in fired),
                    )
                    or "not enqueued yet",
                )
            )
        if not rows:
            return mark_safe("-")
        return format_html_join(mark_safe("<br>"), "{}: {}: {}", rows)

    # ----- "Retry failed members" -------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        urls = [
            path(
                "<path:object_id>/retry-failed/",
                wrap(require_POST(self.retry_failed_view)),
                name="django_pgqueue_batch_retry_failed",
            )
        ]
        return checked_urls([*urls, *super().get_urls()])

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list filters' own parameters (none): no ``?id__regex=`` from a URL (400)."""
        return lookup in filter_parameters(self.get_list_filter(request))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {"can_retry": self.can_retry(request)}
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    def retry_failed_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Retry the batch's dead and cancelled members: it re-opens, and its callbacks are
        enqueued again once they have ended."""
        if not self.can_retry(request):
            raise PermissionDenied
        pk = parse_id(object_id)
        if pk is None:
            raise Http404(f"No batch {object_id[:30]!r}.")
        batch = get_object_or_404(self.get_queryset(request), pk=pk)
        members = Job.objects.using(settings.DATABASE).filter(
            batch_id=batch.pk, status__in=[JobStatus(s) for s in FAILED]
        )
        retried = operations.retry(members)
        self.message_user(
            request,
            f"Retried {len(retried)} failed members: the batch is open again, and its "
            "callbacks are enqueued again once they have ended."
            if retried
            else "No failed member to retry.",
            messages.SUCCESS if retried else messages.INFO,
        )
        return HttpResponseRedirect(reverse("admin:django_pgqueue_batch_change", args=[batch.pk]))
