"""How values read on the admin's pages: durations, local times, statuses and JSON."""

from __future__ import annotations

import json
import reprlib
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_pgqueue.fields import UndecodableJSON
from django_pgqueue.states import JobStatus
from django_pgqueue.stats.workers import still_running_label


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
# (on the job page, in the error history and the dashboard: ``2026-11-22 13:03:18.410 UTC``). The
# lists are narrower: one short line (``13:03:18`` today, ``11-22 13:03`` this year), the zone in
# the column's header or the row, the exact time on hover.


def zone_name() -> str:
    """The current time zone's abbreviation (``UTC``, ``CET``...), as the times show it."""
    return timezone.localtime(timezone.now()).strftime("%Z") or timezone.get_current_timezone_name()


def local_time(value: datetime | None, today: date, zone: tzinfo | None = None) -> SafeString | str:
    """A list cell, short enough to stay on one line in a narrow column: ``14:03:27`` today,
    ``11-20 14:03`` another day of this year, ``2025-11-20`` another year (the zone is in the
    column header); the exact time with the zone on hover. ``zone``: the current one if None."""
    if value is None:
        return "-"
    local = timezone.localtime(value, zone)
    if local.date() == today:
        text = f"{local:%H:%M:%S}"
    elif local.year == today.year:
        text = f"{local:%m-%d %H:%M}"
    else:
        text = f"{local:%Y-%m-%d}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', local.isoformat(), exact_time(value, zone), text
    )


def exact_time(value: datetime | str | None, zone: tzinfo | None = None) -> str:
    """``2026-11-22 13:03:18.410 UTC``: local (in ``zone`` if given), to the millisecond, with the
    zone. Also takes the ISO text stored in a job's ``errors`` entries (shown as it is if it
    isn't a time)."""
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
    local = timezone.localtime(value, zone)
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d} {local:%Z}"


def status_badge(status: str) -> SafeString:
    label = JobStatus(status).label if status in JobStatus.values else status
    return format_html('<span class="pgqueue-status pgqueue-status-{}">{}</span>', status, label)


def abandoned_badge(status: str, worker_id: str) -> SafeString:
    """A finished job whose abandoned attempt still runs in ``worker_id``'s thread."""
    label = JobStatus(status).label if status in JobStatus.values else status
    return format_html(
        '<span class="pgqueue-status pgqueue-status-{}" title="{}">{}</span>',
        status,
        "its row is finished, but the worker gave up on its thread, which still runs the job",
        still_running_label(label, worker_id),
    )


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


#: Characters of one JSON value shown on the job page; the rest is cut, and the page says so.
SHOW_MAX = 100_000
#: Deeper than this, a JSON value is shown without indentation.
PRETTY_DEPTH = 50


def pretty_json(value: Any) -> SafeString:
    """A JSON value, indented, HTML-escaped and cut at :data:`SHOW_MAX` characters.

    A value Python's json cannot decode (:class:`UndecodableJSON`: nested deeper than its
    recursion limit, or a number of thousands of digits) is shown as PostgreSQL stored it.
    """
    notes = []
    if isinstance(value, UndecodableJSON):
        text = str(value)
        notes.append(
            "Shown as stored: Python's json cannot decode this value (nested too deeply, or "
            "a number too long), so the worker fails this job as a poison job."
        )
    else:
        # Indenting costs two spaces per level on every line: quadratic in the depth.
        indent: int | None = 2
        if _deeper_than(value, PRETTY_DEPTH):
            indent = None
            notes.append(f"Nested more than {PRETTY_DEPTH} levels: shown without indentation.")
        try:
            text = json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False, default=str)
        except (RecursionError, ValueError):
            text = _SHORT_REPR.repr(value)
            notes.append(
                f"Nested too deeply to show in full: shown down to {_SHORT_REPR.maxlevel} levels."
            )
    if len(text) > SHOW_MAX:
        notes.append(f"The first {SHOW_MAX:,} of {len(text):,} characters are shown.")
        text = text[:SHOW_MAX]
    return format_html(
        '<pre class="pgqueue-pre">{}</pre>{}',
        text,
        format_html_join("", '<p class="help">{}</p>', ((note,) for note in notes)),
    )


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON text; as a shortened ``repr`` if it is nested too deeply for that."""
    if isinstance(value, str):
        return value if indent is None else json.dumps(value, ensure_ascii=False)
    try:
        return json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return _SHORT_REPR.repr(value)


_SHORT_REPR = reprlib.Repr(maxlevel=50, maxlist=50, maxdict=50, maxstring=200, maxother=200)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and dicts in ``value`` nest more than ``limit`` levels (no recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False
