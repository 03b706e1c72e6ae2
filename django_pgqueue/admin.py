"""The Django admin for the job queue: the job changelist and detail, actions, the dashboard.

Jobs are read-only here: operators change them only through the queue's own state changes
(``retry``, ``run_now``, ``cancel``) and delete. Every page stays fast on a table with millions
of finished jobs: counts are capped or estimated (:mod:`django_pgqueue.stats`), filters never
ask the table for its distinct values, and facet counts are off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import smart_split, unescape_string_literal
from django.views.decorators.http import require_POST

from django_pgqueue import stats
from django_pgqueue.conf import settings
from django_pgqueue.models import Job
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.managers import JobQuerySet

#: Ids listed per reason in an action's message.
MESSAGE_IDS = 10
#: Most jobs one delete action removes (bigger clean-ups belong to retention pruning).
DELETE_CAP = 10_000
#: Jobs listed on the delete confirmation page.
DELETE_PREVIEW = 20
#: Characters of the last error shown in the changelist.
SHORT_ERROR = 80


def _jobs(queryset: QuerySet[Job]) -> JobQuerySet:
    return cast("JobQuerySet", queryset)


def _ago(value: timedelta | None) -> str:
    """A compact duration: ``850ms``, ``42s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    if value is None:
        return "-"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def _period(value: timedelta) -> str:
    """A retention period in words: ``7 days``, ``36 hours``, ``90 minutes``."""
    seconds = int(value.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}" + ("" if n == 1 else "s")
    return f"{seconds} seconds"


def _when(value: datetime | None, today: date) -> SafeString | str:
    """A compact local time: ``14:03:27`` today, ``2026-11-20 14:03`` another day."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    text = f"{local:%H:%M:%S}" if local.date() == today else f"{local:%Y-%m-%d %H:%M}"
    return format_html('<time datetime="{}" title="{}">{}</time>', local.isoformat(), local, text)


def _exact_time(field: str, label: str) -> Callable[[Any, Job], str]:
    """A detail-page field: the local time to the millisecond, with the zone."""

    @admin.display(description=label)
    def show(self: Any, obj: Job) -> str:
        value = getattr(obj, field)
        if value is None:
            return "-"
        local = timezone.localtime(value)
        return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d} {local:%Z}"

    return show


def status_badge(status: str) -> SafeString:
    label = JobStatus(status).label if status in JobStatus.values else status
    return format_html('<span class="pgqueue-status pgqueue-status-{}">{}</span>', status, label)


def _pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="pgqueue-pre">{}</pre>', text)


# ----- the changelist's count ---------------------------------------------------------------


if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator


class EstimatedCountPaginator(_Paginator):
    """Counts at most ``stats.COUNT_CAP`` rows; above that, the planner's estimate.

    The admin counts the (filtered) changelist on every page view; on a table with millions of
    finished jobs an exact ``COUNT(*)`` would cost more than the rest of the page. A result that
    fits on one page is counted by reading that page (one query, not two: a search that matches
    a few rows of a big table scans it once).
    """

    first_page: list[Any] | None = None

    @cached_property
    def counted(self) -> stats.Count:
        object_list = self.object_list
        if not isinstance(object_list, QuerySet):
            return stats.Count(len(object_list))
        rows = list(object_list[: self.per_page + 1])
        if len(rows) <= self.per_page:
            self.first_page = rows
            return stats.Count(len(rows))
        return stats.capped_count(object_list)

    @cached_property
    def count(self) -> int:
        return self.counted.value

    @property
    def count_is_exact(self) -> bool:
        return self.counted.exact


class JobChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        # The list never shows these (possibly large) columns.
        qs = super().get_queryset(request, exclude_parameters)
        return qs.defer("errors", "result", "args", "kwargs")

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        first_page = getattr(self.paginator, "first_page", None)
        if first_page is not None and not self.multi_page:
            self.result_list = first_page  # already read while counting


# ----- filters: their choices come from indexes, statistics and the registry ------------------


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    CHOICES: dict[str, tuple[str, Callable[[JobQuerySet], JobQuerySet]]] = {
        "pending": ("Pending (all)", lambda qs: qs.pending()),
        "runnable": ("Pending: runnable now", lambda qs: qs.runnable()),
        "scheduled": ("Pending: scheduled", lambda qs: qs.scheduled()),
        "failed": ("Pending: failed, awaiting retry", lambda qs: qs.failed()),
        "running": ("Running", lambda qs: qs.running()),
        "completed": ("Completed", lambda qs: qs.completed()),
        "dead": ("Dead", lambda qs: qs.dead()),
        "cancelled": ("Cancelled", lambda qs: qs.cancelled()),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, (label, _) in self.CHOICES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        choice = self.CHOICES.get(self.value() or "")
        return None if choice is None else choice[1](_jobs(queryset))


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queues = stats.queue_names()
        value = self.value()
        if value and value not in queues:
            queues.append(value)
        return [(q, q) for q in sorted(queues)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(queue=value) if value else None


class NameFilter(admin.SimpleListFilter):
    title = "job name"
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = stats.job_names()
        value = self.value()
        if value and value not in names:
            names.append(value)
        return [(n, n) for n in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(name=value) if value else None


# ----- search --------------------------------------------------------------------------------

_KWARGS_VALUE = (
    "(\"kwargs\" <> '{}'::jsonb AND "
    "jsonb_path_exists(\"kwargs\", '$.* ? (@ == $v)', jsonb_build_object('v', %s::jsonb)))"
)


def _json_values(term: str) -> list[Any]:
    """The argument values a search term stands for: the string, and a JSON scalar it spells."""
    values: list[Any] = [term]
    try:
        parsed = json.loads(term)
    except ValueError:
        return values
    if isinstance(parsed, str | int | float | bool) and parsed not in values:
        values.append(parsed)
    return values


def search_match(term: str, known_names: Iterable[str]) -> Q:
    lowered = term.lower()
    match = (
        Q(name__in=[n for n in known_names if lowered in n.lower()])
        | Q(name__contains=term)
        | Q(unique_key__icontains=term)
        | Q(concurrency_key__icontains=term)
        | (~Q(last_error="") & Q(last_error__icontains=term))
    )
    for value in _json_values(term):
        match |= Q(args__contains=[value])
        match |= Q(RawSQL(_KWARGS_VALUE, [json.dumps(value)], output_field=BooleanField()))
    number = term.removeprefix("#")
    if number.isdigit() and len(number) < 19:
        match |= Q(pk=int(number))
    return match


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


def _locked_ids(queryset: QuerySet[Job]) -> list[int]:
    """Lock the rows (inside the caller's transaction) so no worker claims them meanwhile."""
    return list(queryset.order_by().select_for_update(of=("self",)).values_list("pk", flat=True))


# ----- the dashboard's chart --------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    x: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str
    complete: bool


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int
    completed: int
    failed: int
    bar_width: float

    capped: bool = False

    @property
    def middle(self) -> float:
        return self.width / 2

    @property
    def summary(self) -> str:
        plus = "+" if self.capped else ""
        return (
            f"{self.completed:,}{plus} completed, "
            f"{self.failed:,}{plus} failed attempt{'' if self.failed == 1 else 's'}"
        )

    @property
    def scale_label(self) -> str:
        return f"{self.peak:,} per minute"


CHART_WIDTH = 960
CHART_HEIGHT = 120


def throughput_chart(minutes: list[stats.Minute], capped: bool = False) -> Chart:
    """Stacked bars (completed, failed) per minute, as coordinates for an inline SVG."""
    peak = max((m.completed + m.failed for m in minutes), default=0)
    scale = (CHART_HEIGHT - 4) / peak if peak else 0.0
    slot = CHART_WIDTH / max(len(minutes), 1)
    bars = []
    for i, m in enumerate(minutes):
        done_h = m.completed * scale
        fail_h = m.failed * scale
        if m.failed and fail_h < 2:
            fail_h = 2.0
        if m.completed and done_h < 1:
            done_h = 1.0
        local = timezone.localtime(m.start)
        bars.append(
            Bar(
                x=round(i * slot + 1, 2),
                completed_y=round(CHART_HEIGHT - done_h, 2),
                completed_height=round(done_h, 2),
                failed_y=round(CHART_HEIGHT - done_h - fail_h, 2),
                failed_height=round(fail_h, 2),
                title=f"{local:%H:%M}: {m.completed:,} completed, {m.failed:,} failed attempts"
                + ("" if m.complete else " (partly counted)"),
                complete=m.complete,
            )
        )
    return Chart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        bars=bars,
        peak=peak,
        completed=sum(m.completed for m in minutes),
        failed=sum(m.failed for m in minutes),
        bar_width=round(max(slot - 2, 1), 2),
        capped=capped,
    )


# ----- the job admin ------------------------------------------------------------------------


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


@admin.register(Job)
class JobAdmin(_ModelAdmin):
    list_display = (
        "id",
        "name_column",
        "queue",
        "status_column",
        "priority",
        "attempts_column",
        "run_after_column",
        "created_column",
        "finished_column",
        "error_column",
    )
    list_display_links = ("id", "name_column")
    list_filter = (
        StatusFilter,
        QueueFilter,
        NameFilter,
        ("created_at", admin.DateFieldListFilter),
        ("finished_at", admin.DateFieldListFilter),
    )
    # get_search_results does the searching; a non-empty list turns the search box on.
    search_fields = ("name",)
    search_help_text = (
        "Job id, name, unique or concurrency key, error text, or a value in the arguments."
    )
    list_per_page = 100
    list_max_show_all = 1000
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    ordering = ("-id",)
    actions = ("retry_jobs", "run_jobs_now", "cancel_jobs", "delete_selected")
    actions_selection_counter = True

    fieldsets = (
        (None, {"fields": ("id", "name", "queue", "status_column", "priority")}),
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
        ("Attempts and lock", {"fields": ("attempts_column", "locked_by", "locked_detail")}),
        ("Keys", {"fields": ("unique_key", "concurrency_key")}),
        ("Result", {"fields": ("result_json",)}),
        ("Error history", {"fields": ("errors_column",)}),
    )
    # Everything is read-only: no job column is ever edited by hand.
    readonly_fields = (
        "id",
        "name",
        "queue",
        "status_column",
        "priority",
        "last_error_column",
        "args_json",
        "kwargs_json",
        "created_detail",
        "run_after_detail",
        "started_detail",
        "finished_detail",
        "queued_for_column",
        "ran_for_column",
        "attempts_column",
        "locked_by",
        "locked_detail",
        "unique_key",
        "concurrency_key",
        "result_json",
        "errors_column",
    )

    class Media:
        css = {"all": ("django_pgqueue/admin.css",)}

    # ----- queryset, permissions -----------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).using(settings.DATABASE)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code, not typed in

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # ``change_job`` allows the actions; no job is ever edited through a form.
        if obj is not None:
            return False
        return super().has_change_permission(request)

    def can_operate(self, request: HttpRequest) -> bool:
        """Whether the user may retry, run now and cancel jobs (``change_job``)."""
        return super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None and obj.status == JobStatus.RUNNING:
            return False  # a worker holds it
        return super().has_delete_permission(request, obj)

    # ----- columns --------------------------------------------------------------------------

    @admin.display(description="name", ordering="name")
    def name_column(self, obj: Job) -> SafeString:
        # Let long dotted names wrap after the module, the function name in bold.
        module, dot, function = obj.name.rpartition(".")
        return format_html(
            '<span class="pgqueue-module">{}{}</span><wbr><strong>{}</strong>',
            module,
            dot,
            function,
        )

    @admin.display(description="run after", ordering="run_after")
    def run_after_column(self, obj: Job) -> SafeString | str:
        return _when(obj.run_after, timezone.localdate())

    @admin.display(description="created", ordering="created_at")
    def created_column(self, obj: Job) -> SafeString | str:
        return _when(obj.created_at, timezone.localdate())

    @admin.display(description="finished", ordering="finished_at")
    def finished_column(self, obj: Job) -> SafeString | str:
        return _when(obj.finished_at, timezone.localdate())

    created_detail = _exact_time("created_at", "created at")
    run_after_detail = _exact_time("run_after", "run after")
    started_detail = _exact_time("started_at", "started at (last attempt)")
    finished_detail = _exact_time("finished_at", "finished at")
    locked_detail = _exact_time("locked_at", "locked at (last heartbeat)")

    @admin.display(description="status", ordering="status")
    def status_column(self, obj: Job) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description="attempts")
    def attempts_column(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="error")
    def error_column(self, obj: Job) -> SafeString | str:
        lines = [line for line in obj.last_error.strip().splitlines() if line.strip()]
        if not lines:
            return ""
        last = lines[-1].strip()
        short = last if len(last) <= SHORT_ERROR else last[: SHORT_ERROR - 1] + "…"
        return format_html('<span class="pgqueue-error">{}</span>', short)

    @admin.display(description="args")
    def args_json(self, obj: Job) -> SafeString:
        return _pretty_json(obj.args)

    @admin.display(description="kwargs")
    def kwargs_json(self, obj: Job) -> SafeString:
        return _pretty_json(obj.kwargs)

    @admin.display(description="result")
    def result_json(self, obj: Job) -> SafeString | str:
        if obj.result is None and obj.status != JobStatus.COMPLETED:
            return "-"
        return _pretty_json(obj.result)

    @admin.display(description="queued for")
    def queued_for_column(self, obj: Job) -> str:
        return _ago(obj.queued_for)

    @admin.display(description="ran for")
    def ran_for_column(self, obj: Job) -> str:
        return _ago(obj.ran_for)

    @admin.display(description="traceback")
    def last_error_column(self, obj: Job) -> SafeString | str:
        if not obj.last_error:
            return "-"
        return format_html('<pre class="pgqueue-pre pgqueue-traceback">{}</pre>', obj.last_error)

    @admin.display(description="attempts that failed")
    def errors_column(self, obj: Job) -> SafeString | str:
        entries = [e for e in (obj.errors or []) if isinstance(e, dict)]
        if not entries:
            return "-"
        return format_html_join(
            "",
            '<details class="pgqueue-attempt"><summary>Attempt {} at {} on {}: {}</summary>'
            '<pre class="pgqueue-pre pgqueue-traceback">{}</pre></details>',
            (
                (
                    e.get("attempt", "?"),
                    e.get("at", "?"),
                    e.get("worker_id", "?"),
                    e.get("exception_class", "?"),
                    e.get("traceback", ""),
                )
                for e in reversed(entries)
            ),
        )

    # ----- search ---------------------------------------------------------------------------

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Every term must match one of: the id, the name, a key, the error text or an argument.

        Built to cost one sequential scan without trigram indexes: names are matched against the
        known job names (case-insensitively) or as a case-sensitive substring, and arguments by
        exact value (``42`` finds ``add(42, 1)`` and ``send_welcome(user_id=42)``).
        """
        names: list[str] | None = None
        for bit in smart_split(search_term):
            if bit.startswith(('"', "'")) and bit[0] == bit[-1] and len(bit) > 1:
                bit = unescape_string_literal(bit)
            term = bit.strip()
            if not term:
                continue
            if names is None:
                names = stats.job_names(queryset.db)
            queryset = queryset.filter(search_match(term, names))
        return queryset, False

    # ----- actions --------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            for name in request.POST.getlist("action"):
                self._check_action_permission(request, name)
        context = {"dashboard_url": reverse(self._url_name("dashboard")), "title": "Jobs"}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def _check_action_permission(self, request: HttpRequest, name: str) -> None:
        """A POSTed action the user may not run is refused with 403, not silently ignored."""
        func = getattr(type(self), name, None) if name in (self.actions or ()) else None
        required = getattr(func, "allowed_permissions", ())
        for permission in required:
            if not getattr(self, f"has_{permission}_permission")(request):
                raise PermissionDenied

    def _changed(
        self, request: HttpRequest, verb: str, ids: list[int], after: str, message: str
    ) -> None:
        """Say which jobs changed (and log each change, as the admin does for its forms)."""
        if ids:
            self.message_user(
                request,
                f"{verb} {_plural(len(ids))}{after}: {_id_list(ids[:MESSAGE_IDS], len(ids))}.",
                messages.SUCCESS,
            )
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
        ids = sorted(_jobs(queryset).retry())
        self._changed(request, "Retried", ids, ", now pending and runnable", "Retried.")
        retryable = Q(status__in=["dead", "cancelled"]) | Q(status="pending", attempts__gt=0)
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [
                Skip("running: a worker has it", Q(status="running")),
                Skip("completed", Q(status="completed")),
                Skip("pending and never failed", Q(status="pending", attempts=0)),
                Skip("another active job holds its unique key", retryable),
            ],
        )

    @admin.action(
        description="Run selected scheduled jobs now",
        permissions=["change"],
    )
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        now = timezone.now()
        with transaction.atomic(using=settings.DATABASE):
            ids = _locked_ids(queryset.filter(status="pending", run_after__gt=now))
            _jobs(Job.objects.using(settings.DATABASE).filter(pk__in=ids)).run_now()
        ids.sort()
        self._changed(request, "Made", ids, " runnable now", "Run now.")
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [
                Skip("already runnable", Q(status="pending", run_after__lte=now)),
                Skip("running", Q(status="running")),
                Skip("finished", Q(status__in=["completed", "dead", "cancelled"])),
            ],
        )

    @admin.action(description="Cancel selected pending jobs", permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        with transaction.atomic(using=settings.DATABASE):
            ids = _locked_ids(queryset.filter(status="pending"))
            _jobs(Job.objects.using(settings.DATABASE).filter(pk__in=ids)).cancel()
        ids.sort()
        self._changed(request, "Cancelled", ids, "", "Cancelled.")
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [
                Skip("running: a worker has it and cannot be interrupted", Q(status="running")),
                Skip("already finished", Q(status__in=["completed", "dead", "cancelled"])),
            ],
        )

    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> TemplateResponse | None:
        """Like the admin's own delete, with a confirmation, but never deletes running jobs."""
        deletable = queryset.exclude(status="running")
        count = stats.capped_count(deletable, cap=DELETE_CAP)
        if not count.exact:
            self.message_user(
                request,
                f"More than {DELETE_CAP:,} jobs selected: nothing deleted. Narrow the filter, "
                "or let retention pruning remove old jobs.",
                messages.ERROR,
            )
            return None
        running = queryset.filter(status="running")
        if request.POST.get("post") != "yes":
            return TemplateResponse(
                request,
                "django_pgqueue/admin/delete_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": "Delete jobs?",
                    "opts": self.opts,
                    "count": count.value,
                    "preview": list(deletable.order_by("-pk")[:DELETE_PREVIEW]),
                    "more": max(count.value - DELETE_PREVIEW, 0),
                    "running": list(running.order_by("pk").values_list("pk", flat=True)[:50]),
                    "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                    "select_across": request.POST.get("select_across", "0"),
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                    "media": self.media,
                },
            )
        with transaction.atomic(using=settings.DATABASE):
            ids = sorted(_locked_ids(deletable))
            doomed = Job.objects.using(settings.DATABASE).filter(pk__in=ids)
            self.log_deletions(request, doomed.only("id", "name", "status"))
            doomed.delete()
        if ids:
            self.message_user(
                request,
                f"Deleted {_plural(len(ids))}: {_id_list(ids[:MESSAGE_IDS], len(ids))}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, "No job deleted.", messages.WARNING)
        self._skipped(
            request,
            queryset.exclude(pk__in=ids),
            [Skip("running: a worker has it", Q(status="running"))],
        )
        return None

    # ----- extra pages ----------------------------------------------------------------------

    def _url_name(self, name: str) -> str:
        return f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}"

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
                "<path:object_id>/operate/<str:operation>/",
                wrap(require_POST(self.operate_view)),
                name=f"{info}_operate",
            ),
        ]
        return [*urls, *super().get_urls()]

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
        job = get_object_or_404(self.get_queryset(request), pk=object_id)
        getattr(self, action)(request, self.get_queryset(request).filter(pk=job.pk))
        return HttpResponseRedirect(reverse(self._url_name("change"), args=[job.pk]))

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        report = stats.queue_report()
        return TemplateResponse(
            request,
            "django_pgqueue/admin/dashboard.html",
            {
                **self.admin_site.each_context(request),
                "title": "Queue dashboard",
                "opts": self.opts,
                "report": report,
                "rows": [self._dashboard_row(q) for q in report.queues],
                "workers": [
                    {
                        "info": w,
                        "seen_ago": _ago(report.generated_at - w.last_seen_at),
                        "jobs_done": f"{w.jobs_done:,}",
                    }
                    for w in report.workers
                ],
                "chart": throughput_chart(report.minutes, report.window_capped),
                "can_operate": self.can_operate(request),
                "changelist_url": reverse(self._url_name("changelist")),
                "retry_dead_url": reverse(self._url_name("retry_dead")),
                "retention": _period(report.retention),
                "dead_retention": (
                    "forever" if report.dead_retention is None else _period(report.dead_retention)
                ),
                "duration_ms": round(report.duration * 1000, 1),
                "count_cap": f"{stats.COUNT_CAP:,}",
                "window_cap": f"{stats.WINDOW_CAP:,}",
                "media": self.media,
            },
        )

    def _dashboard_row(self, queue: stats.QueueStats) -> dict[str, Any]:
        return {
            "stats": queue,
            "oldest": _ago(queue.oldest_runnable_age),
            "dead_count": queue.dead.value,
        }

    def retry_dead_view(self, request: HttpRequest) -> HttpResponse:
        """GET: confirm retrying every dead job of a queue; POST: do it."""
        if not self.can_operate(request):
            raise PermissionDenied
        queue = request.POST.get("queue") if request.method == "POST" else request.GET.get("queue")
        if not queue:
            self.message_user(request, "No queue given.", messages.ERROR)
            return HttpResponseRedirect(reverse(self._url_name("dashboard")))
        dead = _jobs(self.get_queryset(request)).dead().in_queue(queue)
        if request.method != "POST":
            return TemplateResponse(
                request,
                "django_pgqueue/admin/retry_dead_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"Retry all dead jobs in queue “{queue}”?",
                    "opts": self.opts,
                    "queue": queue,
                    "count": stats.capped_count(dead),
                    "preview": list(dead.order_by("-pk")[:DELETE_PREVIEW]),
                    "dashboard_url": reverse(self._url_name("dashboard")),
                    "media": self.media,
                },
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
            [Skip("another active job holds its unique key", Q(status="dead"))],
        )
        return HttpResponseRedirect(reverse(self._url_name("dashboard")))


def _install_index_link() -> None:
    """Link the dashboard from the admin index, unless the project has its own index template.

    ``django_pgqueue/admin/index.html`` extends ``admin/index.html``; a project with its own
    ``index_template`` can ``{% include "django_pgqueue/admin/dashboard_link.html" %}``.
    """
    if admin.site.index_template is None:
        admin.site.index_template = "django_pgqueue/admin/index.html"


_install_index_link()
