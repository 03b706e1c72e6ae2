"""What :mod:`django_pgqueue.testing` needs on top of the worker's operations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django_pgqueue.operations.db import Database
from django_pgqueue.sql import testing as sql


def make_due(
    db: Database, queues: Sequence[str] | None, *, wall_clock: datetime, scheduled: bool
) -> int:
    """Make pending jobs runnable now for the claim: retries whatever their backoff, jobs whose
    ``run_after`` has passed on ``wall_clock``, and with ``scheduled`` every pending job.
    Returns how many rows changed."""
    params = {"wall_clock": wall_clock, "scheduled": scheduled, "queues": list(queues or ())}
    with db.cursor() as cursor:
        cursor.execute(sql.MAKE_DUE_NAMED_QUEUES if queues else sql.MAKE_DUE_ALL_QUEUES, params)
        return cursor.rowcount


def settle_edges(db: Database) -> None:
    """In a transaction that will not commit before the jobs run (a test's): the edges of the
    jobs enqueued after others apply now, and from now on as they are inserted
    (``sql.SETTLE_EDGES``). Only inside a transaction."""
    with db.cursor() as cursor:
        cursor.execute(sql.SETTLE_EDGES)
