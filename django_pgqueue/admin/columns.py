"""How a job shows: the job list's columns and the job page's read-only fields."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import format_lazy

from django_pgqueue.admin.formatting import (
    abandoned_badge,
    compact_duration,
    exact_time,
    job_status_badge,
    json_text,
    local_time,
    pretty_json,
    zone_name,
)
from django_pgqueue.models import Job
from django_pgqueue.states import ABANDONABLE, JobStatus
from django_pgqueue.stats.workers import still_running

#: The attribute of a listed job naming the live worker still running its abandoned attempt (None:
#: none); set on a page's jobs by :func:`mark_still_running`.
STILL_RUNNING_IN = "pgqueue_still_running_in"
MISSING = object()


def mark_still_running(jobs: list[Job]) -> None:
    """Look up, in one query, which of ``jobs`` a live worker still runs an abandoned attempt of."""
    candidates = [job.pk for job in jobs if job.status in ABANDONABLE]
    running = still_running(None, candidates, timezone.now()) if candidates else {}
    for job in jobs:
        setattr(job, STILL_RUNNING_IN, running.get(job.pk))


#: Characters of the last error shown in the changelist (it wraps under the job's name).
SHORT_ERROR = 160


def breakable(text: str, separators: str) -> SafeString:
    """``text``, HTML-escaped, that may wrap after each of ``separators`` (a long dotted job
    name, an underscored function name) instead of widening its column."""
    pieces = re.split(f"(?<=[{re.escape(separators)}])", text)
    return format_html_join(SafeString("<wbr>"), "{}", ((piece,) for piece in pieces if piece))


def _exact_time_field(field: str, label: str) -> Callable[[Any, Job], str]:
    """A job page field: the local time to the millisecond, with the zone."""

    @admin.display(description=label)
    def show(self: Any, obj: Job) -> str:
        return exact_time(getattr(obj, field))

    return show


class JobColumns:
    """The display methods named in ``JobAdmin.list_display`` and ``readonly_fields``."""

    @admin.display(description="job (last error)", ordering="name")
    def name_column(self, obj: Job) -> SafeString:
        # Long dotted names wrap after the module, the function name in bold; under it, the
        # last error, so it shows however narrow the window. A long name wraps after a dot or
        # an underscore, never wider than the column.
        module, dot, function = obj.name.rpartition(".")
        return format_html(
            '<span class="pgqueue-module">{}{}</span><wbr><strong>{}</strong>{}',
            breakable(module, "."),
            dot,
            breakable(function, "_"),
            self.error_line(obj),
        )

    @staticmethod
    def error_line(obj: Job) -> SafeString | str:
        """The last line of the last error, red while it matters (dead, retrying, running
        again); for a job that completed after failures, a quiet count of them."""
        lines = [line for line in (obj.last_error or "").strip().splitlines() if line.strip()]
        if not lines:
            return ""
        if obj.status == JobStatus.COMPLETED:
            failed = len(obj.errors or []) or 1
            return format_html(
                '<div class="pgqueue-error-note">completed after {} failed attempt{}</div>',
                failed,
                "" if failed == 1 else "s",
            )
        last = lines[-1].strip()
        short = last if len(last) <= SHORT_ERROR else last[: SHORT_ERROR - 1] + "…"
        css = "pgqueue-error-note" if obj.status == JobStatus.CANCELLED else "pgqueue-error"
        return format_html('<div class="{}">{}</div>', css, short)

    @admin.display(
        description=format_lazy("created → finished ({})", lazy(zone_name, str)()),
        ordering="created_at",
    )
    def when_column(self, obj: Job) -> SafeString | str:
        """When it was created; under it, when it finished, if it did (one column: the list
        has no room for two at a laptop's width)."""
        today = timezone.localdate()
        created = local_time(obj.created_at, today)
        if obj.finished_at is None:
            return created
        return format_html(
            '{}<div class="pgqueue-quiet pgqueue-nowrap">→ {}</div>',
            created,
            local_time(obj.finished_at, today),
        )

    created_detail = _exact_time_field("created_at", "created at")
    run_after_detail = _exact_time_field("run_after", "run after")
    started_detail = _exact_time_field("started_at", "started at (last attempt)")
    finished_detail = _exact_time_field("finished_at", "finished at")
    locked_detail = _exact_time_field("locked_at", "locked at (last heartbeat)")
    cancel_requested_detail = _exact_time_field(
        "cancel_requested_at", "cancel requested at (it ends cancelled)"
    )

    @admin.display(description="status", ordering="status")
    def status_column(self, obj: Job) -> SafeString:
        """The status; under it, when a pending job runs if that is later (the list has no
        *run after* column: it says nothing of the other jobs)."""
        badge = self.status_detail(obj)
        if obj.status != JobStatus.PENDING or obj.run_after <= timezone.now():
            return badge
        return format_html(
            '{}<div class="pgqueue-quiet pgqueue-nowrap">at {}</div>',
            badge,
            local_time(obj.run_after, timezone.localdate()),
        )

    @admin.display(description="status")
    def status_detail(self, obj: Job) -> SafeString:
        if obj.status in ABANDONABLE:
            # The job list looked its page up at once (mark_still_running); the job page asks.
            worker = getattr(obj, STILL_RUNNING_IN, MISSING)
            if worker is MISSING:
                worker = still_running(None, [obj.pk], timezone.now()).get(obj.pk)
            if isinstance(worker, str):
                return abandoned_badge(obj.status, worker)
        return job_status_badge(obj.status, obj.attempts, obj.run_after)

    @admin.display(description="queue", ordering="queue")
    def queue_column(self, obj: Job) -> SafeString:
        """The queue; under it, the job's priority if it has one (most jobs don't)."""
        if not obj.priority:
            return format_html("{}", breakable(obj.queue, "-_."))
        return format_html(
            '{}<div class="pgqueue-quiet pgqueue-nowrap">priority {}</div>',
            breakable(obj.queue, "-_."),
            obj.priority,
        )

    @admin.display(description="attempts")
    def attempts_column(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="progress")
    def progress_column(self, obj: Job) -> SafeString | str:
        """What the job last reported with ``current_job().set_progress(done, total, message)``."""
        progress = obj.progress
        if not isinstance(progress, dict):
            return "-" if progress is None else pretty_json(progress)
        done, total = progress.get("done"), progress.get("total")
        message = json_text(progress.get("message") or "")
        if isinstance(done, int | float) and isinstance(total, int | float) and total > 0:
            percent = max(0.0, min(100.0, 100.0 * done / total))
            return format_html(
                '<progress class="pgqueue-progress" max="100" value="{}"></progress> '
                "{} / {} ({}%) {}",
                f"{percent:.1f}",
                f"{done:g}",
                f"{total:g}",
                f"{percent:.0f}",
                message,
            )
        return format_html("{} {}", f"{done:g}" if isinstance(done, int | float) else "", message)

    @admin.display(description="args")
    def args_json(self, obj: Job) -> SafeString:
        return pretty_json(obj.args)

    @admin.display(description="kwargs")
    def kwargs_json(self, obj: Job) -> SafeString:
        return pretty_json(obj.kwargs)

    @admin.display(description="result")
    def result_json(self, obj: Job) -> SafeString | str:
        if obj.result is None and obj.status != JobStatus.COMPLETED:
            return "-"
        return pretty_json(obj.result)

    @admin.display(description="queued for")
    def queued_for_column(self, obj: Job) -> str:
        return compact_duration(obj.queued_for)

    @admin.display(description="ran for")
    def ran_for_column(self, obj: Job) -> str:
        return compact_duration(obj.ran_for)

    @admin.display(description="traceback")
    def last_error_column(self, obj: Job) -> SafeString | str:
        if not obj.last_error:
            return "-"
        return format_html('<pre class="pgqueue-pre pgqueue-traceback">{}</pre>', obj.last_error)

    @admin.display(description="failed attempts, newest first")
    def errors_column(self, obj: Job) -> SafeString | str:
        if not isinstance(obj.errors, list):  # undecodable, or not what a worker writes
            return pretty_json(obj.errors)
        entries = [e for e in obj.errors if isinstance(e, dict)]
        if not entries:
            return "-"
        return format_html_join(
            "",
            '<details class="pgqueue-attempt"><summary>Attempt {} at {} on {}: {}</summary>'
            '<pre class="pgqueue-pre pgqueue-traceback">{}</pre></details>',
            (
                (
                    json_text(e.get("attempt", "?")),
                    exact_time(json_text(e.get("at") or "")),
                    json_text(e.get("worker_id", "?")),
                    json_text(e.get("exception_class", "?")),
                    json_text(e.get("traceback", "")),
                )
                for e in reversed(entries)
            ),
        )
