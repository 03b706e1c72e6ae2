"""Queue control: pausing, resuming and limiting queues (rows of ``pgqueue_queue``).

Each change sends ``NOTIFY pgqueue_control, 'queues'`` with it; workers read every queue's
settings (:func:`queue_controls`) when told, and about once a second without LISTEN.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django_pgqueue import rules
from django_pgqueue.operations.db import Database
from django_pgqueue.sql import Cursor
from django_pgqueue.sql import control as control_sql
from django_pgqueue.sql import limits as limits_sql
from django_pgqueue.sql import parked as parked_sql
from django_pgqueue.sql import queues as sql

#: The payload of the NOTIFY a queue change sends.
QUEUES_CHANGED = "queues"


@dataclass(frozen=True)
class QueueControl:
    name: str
    paused: bool
    concurrency_limit: int | None
    rate_limit: str | None


@contextmanager
def _changing(db: Database, name: str) -> Iterator[Cursor]:
    with db.atomic(), db.cursor() as cursor:
        yield cursor
        cursor.execute(sql.DROP_IF_DEFAULT, [name])
        cursor.execute(control_sql.NOTIFY_CONTROL, [QUEUES_CHANGED])


def set_paused(db: Database, name: str, paused: bool) -> None:
    """Pause (or resume) the queue ``name``; the workers hear of it when this commits.

    Its pending jobs' ready rows move out of the ring (or back) in the same transaction: one
    row per job, so pausing a backlog of 100,000 jobs takes a moment once, instead of every
    claim stepping over them while the queue is paused."""
    with _changing(db, name) as cursor:
        cursor.execute(sql.SET_PAUSED, [name, paused])
        cursor.execute(parked_sql.PARK_QUEUE if paused else parked_sql.UNPARK_QUEUE, [name])


def set_limits(
    db: Database, name: str, concurrency_limit: int | None, rate_limit: str | None
) -> None:
    """Set (``None``: remove) the limits of the queue ``name`` (checked by the caller)."""
    with _changing(db, name) as cursor:
        cursor.execute(sql.SET_LIMITS, [name, concurrency_limit, rate_limit])
        window = limits_sql.queue_window(name)
        if rate_limit is None:
            cursor.execute(limits_sql.DROP_WINDOW, [window])
        else:
            starts, period = rules.parse_rate(rate_limit)
            cursor.execute(limits_sql.DEFINE_WINDOW, [window, starts, period])


def queue_controls(db: Database) -> list[QueueControl]:
    """Every queue that has settings (the others run, unlimited)."""
    with db.cursor() as cursor:
        cursor.execute(sql.CONTROLS)
        return [QueueControl(*row) for row in cursor.fetchall()]
