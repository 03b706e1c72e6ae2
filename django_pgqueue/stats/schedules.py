"""The periodic schedules as ``pgqueue_status`` shows them (the table is small: read whole)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_pgqueue.conf import settings


@dataclass(frozen=True)
class ScheduleStatus:
    name: str
    job: str
    when: str
    enabled: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    #: "admin", "code", "code, edited" or "code, removed".
    source: str
    #: Why it is broken (its job is not registered...), or None.
    broken: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "job": self.job,
            "when": self.when,
            "enabled": self.enabled,
            "next_run_at": None if self.next_run_at is None else self.next_run_at.isoformat(),
            "last_run_at": None if self.last_run_at is None else self.last_run_at.isoformat(),
            "source": self.source,
            "broken": self.broken,
        }


def schedule_report() -> list[ScheduleStatus]:
    from django_pgqueue.models import Schedule

    rows = []
    for schedule in Schedule.objects.using(settings.DATABASE).order_by("name"):
        source = schedule.source
        if schedule.removed_from_code:
            source += ", removed"
        elif schedule.edited:
            source += ", edited"
        rows.append(
            ScheduleStatus(
                name=schedule.name,
                job=schedule.job,
                when=schedule.describe(),
                enabled=schedule.enabled,
                next_run_at=schedule.next_run_at,
                last_run_at=schedule.last_run_at,
                source=source,
                broken=schedule.problem(),
            )
        )
    return rows
