"""Code declarations -> ``pgqueue_schedule`` rows, at worker start and after ``migrate``.

* A new declaration adds a schedule (``source = "code"``), enabled, next run at its first tick.
* A changed declaration updates the schedule, unless the admin edited it: then only the
  code's values (``Schedule.code``) change, and the admin shows "edited: differs from code".
* A schedule no longer declared is disabled (and enabled again if it comes back).
* ``enabled`` is not the code's: pausing a schedule in the admin survives every sync.

Syncs take a transaction-level advisory lock, so workers starting together take turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.fields import default_zone
from django_pgqueue.models import Schedule
from django_pgqueue.printable import get_logger
from django_pgqueue.schedules.declaration import Declaration, declared
from django_pgqueue.schedules.models import Source

logger = get_logger("django_pgqueue.schedules")


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    #: Code changed, but the admin's edits were kept.
    kept_edits: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: Declared names taken by an admin-made schedule: not synced.
    conflicts: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.kept_edits or self.removed)


def sync(using: str | None = None, declarations: Sequence[Declaration] | None = None) -> SyncReport:
    """Make the table match the code's declarations (default: every registered ``@job`` with
    ``cron=``/``every=``). Returns what changed."""
    alias = using or settings.DATABASE
    wanted = {d.name: d for d in (declared() if declarations is None else declarations)}
    report = SyncReport()
    with transaction.atomic(using=alias):
        operations.lock_schedule_sync(operations.DjangoDatabase(alias))
        rows = Schedule.objects.using(alias).select_for_update()
        existing = {s.name: s for s in rows.filter(name__in=list(wanted))}
        for name, declaration in wanted.items():
            row = existing.get(name)
            if row is None:
                _create(alias, declaration)
                report.created.append(name)
            elif row.source != Source.CODE:
                report.conflicts.append(name)
                logger.warning(
                    "Schedule %r is declared by @job but the name is taken by a schedule made "
                    "in the admin; the code's schedule is not synced (rename or delete it)",
                    name,
                )
            else:
                _update(row, declaration, report)
        gone = rows.filter(source=Source.CODE).exclude(name__in=list(wanted))
        for row in gone:
            if not row.removed_from_code:
                _remove(row)
                report.removed.append(row.name)
    if report.changed:
        logger.info(
            "Schedules synced: %d added, %d updated, %d kept their admin edits, %d disabled "
            "(no longer declared)",
            len(report.created),
            len(report.updated),
            len(report.kept_edits),
            len(report.removed),
        )
    return report


def _code(declaration: Declaration, zone: str) -> dict[str, Any]:
    return {
        "values": declaration.values(zone),
        # No cron_timezone: the zone is TIME_ZONE's at creation, kept when TIME_ZONE changes.
        "zone_from_setting": declaration.timezone is None,
    }


def _create(alias: str, declaration: Declaration) -> None:
    schedule = Schedule(name=declaration.name, source=Source.CODE, enabled=True)
    schedule.code = _code(declaration, default_zone())
    schedule.apply_code()
    schedule.save(using=alias)


def _update(row: Schedule, declaration: Declaration, report: SyncReport) -> None:
    previous = row.code or {}
    zone = default_zone()
    if declaration.timezone is None and previous.get("zone_from_setting"):
        zone = previous["values"]["timezone"]  # never shifted by a change of TIME_ZONE
        if zone != default_zone():
            logger.info(
                "Schedule %r keeps its time zone %s (TIME_ZONE is now %s); set "
                "cron_timezone= or edit it in the admin to move it",
                row.name,
                zone,
                default_zone(),
            )
    declared_before = previous.get("values")
    edited = declared_before is not None and row.values() != declared_before
    before = (row.values(), row.code, row.enabled, row.next_run_at)
    row.code = _code(declaration, zone)
    if previous.get("removed") and previous.get("disabled_by_sync"):
        row.enabled = True  # disabled by the sync that saw it gone: back with its declaration
        row.next_run_at = None  # the first tick from now (save() computes it)
    if edited:
        if declared_before != row.code["values"]:
            report.kept_edits.append(row.name)
    else:
        row.apply_code()
    if (row.values(), row.code, row.enabled, row.next_run_at) != before:
        row.save()
        if not edited:
            report.updated.append(row.name)


def _remove(row: Schedule) -> None:
    row.code = {**(row.code or {}), "removed": True, "disabled_by_sync": row.enabled}
    row.enabled = False
    row.save()
