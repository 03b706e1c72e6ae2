"""How values read on the admin's pages: durations, local times, statuses and JSON."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_pgqueue.states import JobStatus


def compact_duration(value: timedelta | None) -> str:
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


def period_in_words(value: timedelta) -> str:
    """A retention period in words: ``7 days``, ``36 hours``, ``90 minutes``."""
    seconds = int(value.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}" + ("" if n == 1 else "s")
    return f"{seconds} seconds"


# One way to write a time everywhere in the admin: ``2026-11-22 13:03:18``, local, with the zone
# (on the job page, in the error history and the dashboard: ``2026-11-22 13:03:18.410 UTC``; in
# the job list the zone is in the column's header and today's date is left out).


def zone_name() -> str:
    """The current time zone's abbreviation (``UTC``, ``CET``...), as the times show it."""
    return timezone.localtime(timezone.now()).strftime("%Z") or timezone.get_current_timezone_name()


def local_time(value: datetime | None, today: date) -> SafeString | str:
    """A list cell: ``14:03:27`` today, ``2026-11-20 14:03:27`` another day (the zone is in the
    column header); the exact time with the zone on hover."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    clock = f"{local:%H:%M:%S}"
    if local.date() == today:
        return format_html(
            '<time datetime="{}" title="{}">{}</time>', local.isoformat(), exact_time(value), clock
        )
    return format_html(
        '<time datetime="{}" title="{}"><span class="pgqueue-date">{}</span> {}</time>',
        local.isoformat(),
        exact_time(value),
        f"{local:%Y-%m-%d}",
        clock,
    )


def exact_time(value: datetime | str | None) -> str:
    """``2026-11-22 13:03:18.410 UTC``: local, to the millisecond, with the zone. Also takes the
    ISO text stored in a job's ``errors`` entries (shown as it is if it isn't a time)."""
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        if timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, timezone.get_current_timezone())
        value = parsed
    local = timezone.localtime(value)
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d} {local:%Z}"


def status_badge(status: str) -> SafeString:
    label = JobStatus(status).label if status in JobStatus.values else status
    return format_html('<span class="pgqueue-status pgqueue-status-{}">{}</span>', status, label)


def job_status_badge(status: str, attempts: int, run_after: datetime | None) -> SafeString:
    """The status, with the two kinds of pending job that are not runnable yet told apart:
    ``Scheduled`` (its ``run_after`` is later) and ``Awaiting retry`` (it failed, and its next
    attempt is later)."""
    if status == JobStatus.PENDING and run_after is not None and run_after > timezone.now():
        kind, label = ("retrying", "Awaiting retry") if attempts else ("scheduled", "Scheduled")
        return format_html(
            '<span class="pgqueue-status pgqueue-status-{}" title="pending: runs at {}">{}</span>',
            kind,
            exact_time(run_after),
            label,
        )
    return status_badge(status)


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="pgqueue-pre">{}</pre>', text)
