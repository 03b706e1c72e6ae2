"""The actions: retry, run now, cancel and delete selected jobs, and retry a queue's dead jobs.

Each changes only the jobs it applies to and says which it changed and which it skipped, and
why. The job page's buttons and the dashboard's "retry all dead jobs" run the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import timezone

from django_pgqueue import operations, stats
from django_pgqueue.admin.base import JobAdminBase, as_jobs
from django_pgqueue.conf import settings
from django_pgqueue.models import Job
from django_pgqueue.operations import RETRYABLE_Q
from django_pgqueue.states import ACTIVE, FINISHED, JobStatus

#: Ids listed per reason in an action's message.
MESSAGE_IDS = 10
#: Most jobs one delete action removes (bigger clean-ups belong to retention pruning).
DELETE_CAP = 10_000
#: Jobs listed on a confirmation page (delete, retry all dead jobs of a queue).
CONFIRMATION_PREVIEW = 20


# ----- what an action changed and skipped ----------------------------------------------------


@dataclass(frozen=True)
class Skip:
    reason: str
    condition: Q


def _id_list(ids: Iterable[int], total: int) -> str:
    shown = [f"#{i}" for i in ids]
    text = ", ".join(shown)
    if total > len(shown):
        text += f" and {total - len(shown)} more"
    return text


def _plural(n: int, word: str = "job") -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _done_message(verb: str, ids: list[int], after: str = "") -> str:
    """``Retried 2 jobs, now pending and runnable: #154, #155.``"""
    return f"{verb} {_plural(len(ids))}{after}: {_id_list(ids[:MESSAGE_IDS], len(ids))}."


def _skipped_message(rest: QuerySet[Job], skips: Iterable[Skip]) -> str | None:
    """Why the jobs of ``rest`` (selected, unchanged) were skipped, one clause per reason."""
    parts = []
    total = 0
    for skip in skips:
        matching = rest.filter(skip.condition).order_by("pk")
        count = matching.count()
        if count:
            ids = matching.values_list("pk", flat=True)[:MESSAGE_IDS]
            parts.append(f"{_id_list(ids, count)} ({skip.reason})")
            total += count
    if not parts:
        return None
    return f"Skipped {_plural(total)}: " + "; ".join(parts) + "."


def _change_locked(queryset: QuerySet[Job], change: Callable[[QuerySet[Job]], object]) -> list[int]:
    """Lock the rows of ``queryset`` (so no worker claims them meanwhile) and ``change`` them,
    in one transaction. Their ids, sorted."""
    with transaction.atomic(using=settings.DATABASE):
        locked = queryset.order_by().select_for_update(of=("self",)).values_list("pk", flat=True)
        ids = sorted(locked)
        change(Job.objects.using(settings.DATABASE).filter(pk__in=ids))
    return ids


# ----- the actions --------------------------------------------------------------------------


class JobActions(JobAdminBase):
    """The list actions, and the dashboard's retry of every dead job of a queue."""

    actions = ("retry_jobs", "run_jobs_now", "cancel_jobs", "delete_selected")
    actions_selection_counter = True

    def check_action_permissions(self, request: HttpRequest) -> None:
        """A POSTed action the user may not run is refused with 403, not silently ignored."""
        for name in request.POST.getlist("action"):
            func = getattr(type(self), name, None) if name in (self.actions or ()) else None
            for permission in getattr(func, "allowed_permissions", ()):
                if not getattr(self, f"has_{permission}_permission")(request):
                    raise PermissionDenied

    def _changed(
        self, request: HttpRequest, verb: str, ids: list[int], after: str, message: str
    ) -> None:
        """Say which jobs changed (and log each change, as the admin does for its forms)."""
        if ids:
            self.message_user(request, _done_message(verb, ids, after), messages.SUCCESS)
            LogEntry.objects.log_actions(
                user_id=cast("int", request.user.pk),
                queryset=Job.objects.using(settings.DATABASE)
                .filter(pk__in=ids)
                .only("id", "name", "status"),
                action_flag=CHANGE,
                change_message=message,
            )
        else:
            self.message_user(request, "No job changed.", messages.WARNING)

    def _skipped(self, request: HttpRequest, rest: QuerySet[Job], skips: Iterable[Skip]) -> None:
        text = _skipped_message(rest, skips)
        if text:
            self.message_user(request, text, messages.WARNING)

    @admin.action(
        description="Retry selected dead or failed jobs (attempts reset, runnable now)",
        permissions=["change"],
    )
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = sorted(as_jobs(queryset).retry())
        self._changed(request, "Retried", ids, ", now pending and runnable", "Retried.")
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [
                Skip("running: a worker has it", Q(status=JobStatus.RUNNING)),
                Skip(JobStatus.COMPLETED.value, Q(status=JobStatus.COMPLETED)),
                Skip("pending and never failed", Q(status=JobStatus.PENDING, attempts=0)),
                Skip("its unique key is in use by another active job", RETRYABLE_Q),
            ],
        )

    @admin.action(
        description="Run selected scheduled jobs now",
        permissions=["change"],
    )
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        scheduled = queryset.filter(status=JobStatus.PENDING, run_after__gt=now)
        ids = _change_locked(scheduled, lambda jobs: as_jobs(jobs).run_now())
        self._changed(request, "Made", ids, " runnable now", "Run now.")
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [
                Skip("already runnable", Q(status=JobStatus.PENDING, run_after__lte=now)),
                Skip(JobStatus.RUNNING.value, Q(status=JobStatus.RUNNING)),
                Skip("finished", Q(status__in=FINISHED)),
            ],
        )

    @admin.action(
        description="Cancel selected jobs (pending at once, running asked to stop)",
        permissions=["change"],
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        changed = operations.cancel(as_jobs(queryset.filter(status__in=ACTIVE)))
        running = set(
            Job.objects.using(settings.DATABASE)
            .filter(pk__in=changed, status=JobStatus.RUNNING)
            .values_list("pk", flat=True)
        )
        cancelled = [i for i in changed if i not in running]
        asked = [i for i in changed if i in running]
        if cancelled:
            self._changed(request, "Cancelled", cancelled, "", "Cancelled.")
        if asked:
            self._changed(
                request,
                "Asked",
                asked,
                " to stop (each ends cancelled when it returns)",
                "Cancellation requested.",
            )
        if not changed:
            self._changed(request, "Cancelled", [], "", "")
        self._skipped(
            request,
            queryset.exclude(pk__in=changed),
            [
                Skip("running, already asked to stop", Q(status=JobStatus.RUNNING)),
                Skip("already finished", Q(status__in=FINISHED)),
            ],
        )

    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> TemplateResponse | None:
        """Like the admin's own delete, with a confirmation, but never deletes running jobs."""
        deletable = queryset.exclude(status=JobStatus.RUNNING)
        count = stats.capped_count(deletable, cap=DELETE_CAP)
        if not count.exact:
            self.message_user(
                request,
                f"More than {DELETE_CAP:,} jobs selected: nothing deleted. Narrow the filter, "
                "or let retention pruning remove old jobs.",
                messages.ERROR,
            )
            return None
        running = queryset.filter(status=JobStatus.RUNNING)
        if request.POST.get("post") != "yes":
            return self.render_page(
                request,
                "django_pgqueue/admin/delete_confirmation.html",
                "Delete jobs?",
                trail=[self.changelist_crumb()],
                here="Delete jobs",
                count=count.value,
                preview=list(deletable.order_by("-pk")[:CONFIRMATION_PREVIEW]),
                more=max(count.value - CONFIRMATION_PREVIEW, 0),
                running=list(running.order_by("pk").values_list("pk", flat=True)[:50]),
                selected=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                select_across=request.POST.get("select_across", "0"),
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
            )

        def delete(doomed: QuerySet[Job]) -> None:
            self.log_deletions(request, doomed.only("id", "name", "status"))
            doomed.delete()

        ids = _change_locked(deletable, delete)
        if ids:
            self.message_user(request, _done_message("Deleted", ids), messages.SUCCESS)
        else:
            self.message_user(request, "No job deleted.", messages.WARNING)
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [Skip("running: a worker has it", Q(status=JobStatus.RUNNING))],
        )
        return None

    def retry_dead_view(self, request: HttpRequest) -> HttpResponse:
        """GET: confirm retrying every dead job of a queue; POST: do it."""
        if not self.can_operate(request):
            raise PermissionDenied
        queue = request.POST.get("queue") if request.method == "POST" else request.GET.get("queue")
        if not queue:
            self.message_user(request, "No queue given.", messages.ERROR)
            return HttpResponseRedirect(self.admin_url("dashboard"))
        dead = as_jobs(self.get_queryset(request)).dead().in_queue(queue)
        if request.method != "POST":
            return self.render_page(
                request,
                "django_pgqueue/admin/retry_dead_confirmation.html",
                f"Retry all dead jobs in queue “{queue}”?",
                trail=[("Queue dashboard", self.admin_url("dashboard"))],
                here="Retry dead jobs",
                queue=queue,
                count=stats.capped_count(dead),
                preview=list(dead.order_by("-pk")[:CONFIRMATION_PREVIEW]),
                dashboard_url=self.admin_url("dashboard"),
            )
        ids = sorted(Job.objects.db_manager(settings.DATABASE).retry_dead(queue))
        self._changed(
            request,
            "Retried",
            ids,
            f" (every dead job of queue “{queue}”), now pending and runnable",
            f"Retried (every dead job of queue {queue}).",
        )
        self._skipped(
            request,
            dead.exclude(pk__in=ids),
            [Skip("its unique key is in use by another active job", Q(status=JobStatus.DEAD))],
        )
        return HttpResponseRedirect(self.admin_url("dashboard"))
