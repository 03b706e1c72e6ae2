"""Periodic schedules: firing due ticks (the worker), "run now" (the admin), the sync's lock.

:func:`fire_schedules` is the exactly-once part: in one transaction it locks the due schedules
with ``FOR UPDATE SKIP LOCKED``, inserts their ticks' jobs and advances ``next_run_at``. A
second worker skips the locked rows and, once the first commits, no longer sees them as due;
a crash before the commit rolls back both the jobs and the advance, so a tick is never lost
nor doubled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_pgqueue import registry
from django_pgqueue.operations.db import Database
from django_pgqueue.operations.enqueue import register_limits
from django_pgqueue.printable import get_logger, log_time
from django_pgqueue.sql import Cursor
from django_pgqueue.sql import schedules as sql
from django_pgqueue.states import ACTIVE

if TYPE_CHECKING:
    from django_pgqueue.models import Job, Schedule

logger = get_logger("django_pgqueue.worker")

#: Most schedules one firing takes; more due at once are fired by the next one, at once.
FIRE_BATCH = 100


@dataclass
class Fired:
    """What one :func:`fire_schedules` did, and when to look again."""

    #: The database's clock when it looked.
    now: datetime
    #: The earliest ``next_run_at`` of an enabled schedule afterwards (None: nothing enabled).
    next_due: datetime | None
    schedules: int = 0
    enqueued: int = 0


def fire_schedules(db: Database, now: datetime | None = None, limit: int = FIRE_BATCH) -> Fired:
    """Enqueue the jobs of every due tick of enabled schedules, once across all workers.

    ``now`` is the database's clock unless given (tests pass a fake one). When nothing is due
    this is one cheap statement.
    """
    from django_pgqueue.schedules.timing import CATCH_UP_LIMIT, Timing

    with db.cursor() as cursor:
        cursor.execute(sql.NOW_AND_NEXT_DUE)
        clock, next_due = cursor.fetchone()
    now = now or clock
    if next_due is None or next_due > now:
        return Fired(now=now, next_due=next_due)
    fired = Fired(now=now, next_due=None)
    with db.transaction(), db.cursor() as cursor:
        cursor.execute(sql.LOCK_DUE, [now, limit])
        for row in cursor.fetchall():
            schedule_id, name, job, cron, every, zone, _queue, _priority, catch_up, start = row
            try:
                timing = Timing(cron, every, zone)
                ticks, skipped = timing.due(start, now, CATCH_UP_LIMIT if catch_up else 1)
                next_run_at = timing.next_after(now)
            except ValueError as exc:
                logger.error(
                    "Schedule %r cannot fire: %s. It is unscheduled until it is fixed in the "
                    "admin.",
                    name,
                    exc,
                )
                cursor.execute(sql.UNSCHEDULE, [schedule_id])
                continue
            ids = _insert_ticks(cursor, schedule_id, job, ticks)
            cursor.execute(sql.ADVANCE, [next_run_at, ticks[-1] if ticks else None, schedule_id])
            fired.schedules += 1
            fired.enqueued += len(ids)
            _log_fired(name, job, ticks, ids, skipped, catch_up)
    with db.cursor() as cursor:
        cursor.execute(sql.NOW_AND_NEXT_DUE)
        _, fired.next_due = cursor.fetchone()
    return fired


def _insert_ticks(cursor: Cursor, schedule_id: int, job: str, ticks: list[Any]) -> list[int]:
    spec = registry.spec_for(job)
    if spec.limited:
        register_limits(cursor, spec)
    cursor.execute(
        sql.INSERT_TICKS,
        [
            spec.resolved_queue,
            spec.priority,
            spec.resolved_max_attempts,
            spec.unique_key,
            spec.concurrency_key,
            spec.resolved_concurrency_limit,
            spec.resolved_rate_key,
            spec.is_async,
            ticks,
            schedule_id,
        ],
    )
    return [r[0] for r in cursor.fetchall()]


def _log_fired(
    name: str, job: str, ticks: list[datetime], ids: list[int], skipped: int, catch_up: bool
) -> None:
    extra = {"schedule": name, "job_ids": ids}
    if job not in registry.names():
        logger.warning(
            "Schedule %r: job %r is not registered in this worker; enqueued anyway (it fails "
            "as an unknown job unless another worker knows it)",
            name,
            job,
            extra=extra,
        )
    if ids:
        logger.info(
            "Schedule %r enqueued %s #%s for %s",
            name,
            job,
            ", #".join(map(str, ids)),
            ", ".join(map(log_time, ticks)),
            extra=extra,
        )
    if len(ids) < len(ticks):
        logger.info(
            "Schedule %r: %d of %d ticks not enqueued: job %r with its unique key still active",
            name,
            len(ticks) - len(ids),
            len(ticks),
            job,
            extra=extra,
        )
    if skipped:
        logger.warning(
            "Schedule %r missed %s%d earlier ticks while no worker fired it; %s",
            name,
            "at least " if skipped > 1000 else "",
            skipped,
            "enqueued the latest 100 (catch_up)" if catch_up else "enqueued the latest only",
            extra=extra,
        )


def run_schedule_now(db: Database, schedule: Schedule) -> Job:
    """Enqueue one run of ``schedule`` now, without moving it (the admin's "Run now")."""
    from django_pgqueue.models import Job

    with db.cursor() as cursor:
        ids = _insert_ticks(cursor, schedule.pk, schedule.job, [None])
    if not ids:
        spec = registry.spec_for(schedule.job)
        existing = (
            Job.objects.using(db.alias)
            .filter(
                queue=schedule.queue or spec.resolved_queue,
                unique_key=spec.unique_key,
                status__in=ACTIVE,
            )
            .first()
        )
        if existing is not None:
            existing.deduplicated = True
            return existing
        raise RuntimeError(f"Could not enqueue a run of schedule {schedule.name!r}")
    return Job.objects.using(db.alias).get(pk=ids[0])


def lock_schedule_sync(db: Database) -> None:
    """Wait for any other sync of code declarations; the lock lasts until the transaction ends."""
    with db.cursor() as cursor:
        cursor.execute(sql.SYNC_LOCK)
