"""What the code declares: one schedule per ``@job(cron=...)`` / ``@job(every=...)``.

The schedule is named after its job. Its values are what :func:`sync
<django_pgqueue.schedules.sync.sync>` writes to the row (and keeps in ``Schedule.code``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django_pgqueue import registry
from django_pgqueue.spec import JobSpec


@dataclass(frozen=True)
class Declaration:
    job: str
    cron: str = ""
    every: float | None = None
    #: None: the zone is ``TIME_ZONE`` as it was when the schedule was first synced.
    timezone: str | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    catch_up: bool = False

    @property
    def name(self) -> str:
        return self.job

    def values(self, zone: str) -> dict[str, Any]:
        """The row's values (``schedules.models.CODE_FIELDS``), in ``zone`` unless it names
        its own. Code schedules use the job's own queue and priority."""
        return {
            "job": self.job,
            "cron": self.cron,
            "every": self.every,
            "timezone": self.timezone or zone,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "queue": None,
            "priority": None,
            "catch_up": self.catch_up,
        }


def from_spec(spec: JobSpec) -> Declaration | None:
    if not spec.periodic:
        return None
    return Declaration(
        job=spec.name,
        cron=spec.cron or "",
        every=spec.every,
        timezone=spec.cron_timezone,
        args=list(spec.schedule_args),
        kwargs=dict(spec.schedule_kwargs),
        catch_up=spec.catch_up,
    )


def declared() -> list[Declaration]:
    """Every schedule the registered jobs declare."""
    found = (from_spec(registry.get(name).spec) for name in registry.names())
    return [d for d in found if d is not None]
