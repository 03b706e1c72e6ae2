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


def local_time(value: datetime | None, today: date) -> SafeString | str:
    """A compact local time: ``14:03:27`` today, ``2026-11-20 14:03`` another day."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    text = f"{local:%H:%M:%S}" if local.date() == today else f"{local:%Y-%m-%d %H:%M}"
    return format_html('<time datetime="{}" title="{}">{}</time>', local.isoformat(), local, text)


def exact_local_time(value: datetime | None) -> str:
    """The local time to the millisecond, with the zone."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    return f"{local:%Y-%m-%d %H:%M:%S}.{local.microsecond // 1000:03d} {local:%Z}"


def status_badge(status: str) -> SafeString:
    label = JobStatus(status).label if status in JobStatus.values else status
    return format_html('<span class="pgqueue-status pgqueue-status-{}">{}</span>', status, label)


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="pgqueue-pre">{}</pre>', text)
