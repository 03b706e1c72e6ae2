"""The job admin: the job list (columns, filters, search, actions) and the read-only job page
with its buttons. Its parts are mixed in from the modules next to this one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from django_pgqueue.admin.actions import JobActions
from django_pgqueue.admin.changelist import EstimatedCountPaginator, JobChangeList
from django_pgqueue.admin.columns import JobColumns
from django_pgqueue.admin.dashboard import QueueDashboard
from django_pgqueue.admin.filters import NameFilter, QueueFilter, StatusFilter
from django_pgqueue.admin.inputs import checked_urls, filter_parameters, parse_id
from django_pgqueue.admin.queues import QueueControls
from django_pgqueue.admin.schedule import ScheduleFilter
from django_pgqueue.admin.search import MAX_SEARCH_TERMS, search_jobs, search_terms
from django_pgqueue.admin.workflow import BatchFilter, WorkflowColumns, in_workflow
from django_pgqueue.models import Job
from django_pgqueue.states import JobStatus


class JobAdmin(JobColumns, WorkflowColumns, QueueDashboard, QueueControls, JobActions):
    # What identifies a job and what went wrong, fitting a laptop's width with both sidebars
    # open (tests/test_admin_layout_browser.py): the job with its last error under its name,
    # its status (with when it runs, if later), its queue (with its priority, if any), its
    # attempts, and when it was created and finished, each time on one short line.
    list_display = (
        "id",
        "name_column",
        "status_column",
        "queue_column",
        "attempts_column",
        "when_column",
    )
    list_display_links = ("id", "name_column")
    list_filter = (
        StatusFilter,
        QueueFilter,
        NameFilter,
        ScheduleFilter,
        BatchFilter,
        ("created_at", admin.DateFieldListFilter),
        ("finished_at", admin.DateFieldListFilter),
    )
    # get_search_results does the searching; a non-empty list turns the search box on.
    search_fields = ("name",)
    search_help_text = (
        "Job id, name, unique or concurrency key, error text, or a value in the arguments; "
        f"every word must match (up to {MAX_SEARCH_TERMS} words)."
    )
    list_per_page = 100
    list_max_show_all = 1000
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    ordering = ("-id",)

    fieldsets = (
        (None, {"fields": ("id", "name", "queue", "status_detail", "priority", "schedule")}),
        ("Progress", {"fields": ("progress_column", "cancel_requested_detail")}),
        ("Last error", {"fields": ("last_error_column",)}),
        ("Arguments", {"fields": ("args_json", "kwargs_json")}),
        (
            "Timing",
            {
                "fields": (
                    "created_detail",
                    "run_after_detail",
                    "started_detail",
                    "finished_detail",
                    "queued_for_column",
                    "ran_for_column",
                )
            },
        ),
        (
            "Attempts and lock",
            {"fields": ("attempts_column", "interruptions", "locked_by", "locked_detail")},
        ),
        ("Keys", {"fields": ("unique_key", "concurrency_key")}),
        ("Workflow", {"fields": ("parents_column", "dependents_column", "batch_column")}),
        ("Result", {"fields": ("result_json",)}),
        ("Error history", {"fields": ("errors_column",)}),
    )
    # Everything is read-only: no job column is ever edited by hand.
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        """The last error in red while it matters (dead, retrying, running again, cancelled
        after a failure); a job that completed shows its earlier failures only as a collapsed
        history. The history is always collapsed; progress shows once a job reported some, the
        result once it completed."""
        if obj is None:
            return self.fieldsets
        failed = len(obj.errors or [])
        fieldsets = []
        for title, options in self.fieldsets:
            if title == "Last error" and (not obj.last_error or obj.status == JobStatus.COMPLETED):
                continue
            if title == "Progress" and obj.progress is None and not obj.cancel_requested_at:
                continue
            if title == "Result" and obj.status != JobStatus.COMPLETED:
                continue
            if title == "Workflow" and not in_workflow(obj):
                continue
            if title == "Error history":
                if not failed:
                    continue
                title = (
                    f"Failed attempts before it completed ({failed})"
                    if obj.status == JobStatus.COMPLETED
                    else f"Failed attempts ({failed})"
                )
                options = {**options, "classes": ("collapse",)}
            fieldsets.append((title, options))
        return fieldsets

    class Media:
        css = {"all": ("django_pgqueue/admin.css",)}

    # ----- the job list ---------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        ignored = len(search_terms(search_term)) - MAX_SEARCH_TERMS
        if ignored > 0:
            self.message_user(
                request,
                f"Searched for the first {MAX_SEARCH_TERMS} words only; "
                f"{ignored:,} more were ignored.",
                messages.WARNING,
            )
        return search_jobs(queryset, search_term), False

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list filters' own parameters: no ``?name__regex=`` from a URL (400)."""
        return lookup in filter_parameters(self.get_list_filter(request))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            self.check_action_permissions(request)
        elif StatusFilter.ALIAS in request.GET:
            return HttpResponseRedirect(StatusFilter.unaliased(request))
        context = {"dashboard_url": self.admin_url("dashboard"), "title": "Jobs"}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    # ----- the extra pages and the job page's buttons ---------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        urls = [
            path("dashboard/", wrap(self.dashboard_view), name=f"{info}_dashboard"),
            path(
                "dashboard/retry-dead/",
                wrap(self.retry_dead_view),
                name=f"{info}_retry_dead",
            ),
            path(
                "dashboard/queue/",
                wrap(require_POST(self.queue_control_view)),
                name=f"{info}_queue_control",
            ),
            path(
                "<path:object_id>/operate/<str:operation>/",
                wrap(require_POST(self.operate_view)),
                name=f"{info}_operate",
            ),
        ]
        return checked_urls([*urls, *super().get_urls()])

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {"can_operate": self.can_operate(request)}
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )

    OPERATIONS: dict[str, str] = {
        "retry": "retry_jobs",
        "run-now": "run_jobs_now",
        "cancel": "cancel_jobs",
    }

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """The buttons of the job's page: one job, the same code as the list actions."""
        action = self.OPERATIONS.get(operation)
        if action is None:
            raise Http404(f"No operation {operation!r}.")
        if not self.can_operate(request):
            raise PermissionDenied
        pk = parse_id(object_id)
        if pk is None:
            raise Http404(f"No job {object_id[:30]!r}.")
        job = get_object_or_404(self.get_queryset(request), pk=pk)
        getattr(self, action)(request, self.get_queryset(request).filter(pk=job.pk))
        return HttpResponseRedirect(self.admin_url("change", job.pk))
