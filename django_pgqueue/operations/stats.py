"""The numbers of the dashboard and ``pgqueue_status``, read with :mod:`django_pgqueue.sql.stats`.

Each function runs one or a few bounded statements; :mod:`django_pgqueue.stats` decides which
to run (exact counts on small tables, capped counts and estimates on big ones) and builds the
report from their rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_pgqueue.operations.db import Database
from django_pgqueue.sql import TABLE
from django_pgqueue.sql import stats as sql


def table_bytes(db: Database) -> int:
    """The job table's size on disk."""
    with db.cursor() as cursor:
        cursor.execute(sql.TABLE_BYTES, [TABLE])
        return int(cursor.fetchone()[0])


def begin_report(db: Database) -> datetime:
    """Inside the report's transaction: JIT off for it, and the statements' clock."""
    with db.cursor() as cursor:
        cursor.execute(sql.NO_JIT)
        cursor.execute(sql.STATEMENT_TIMESTAMP)
        now: datetime = cursor.fetchone()[0]
        return now


def exact_counts(db: Database, fresh: float) -> list[tuple[Any, ...]]:
    """Per queue: runnable, scheduled, running (a lock younger than ``fresh`` seconds),
    completed, dead, waiting, oldest runnable run_after."""
    return _rows(db, sql.EXACT_COUNTS, {"fresh": fresh})


def capped_counts(db: Database, queues: Sequence[str], limit: int) -> list[tuple[Any, ...]]:
    """Per queue: runnable, scheduled, dead, waiting (each counted up to ``limit``), oldest
    runnable run_after."""
    return _rows(db, sql.CAPPED_COUNTS, {"queues": list(queues), "cap": limit})


def running_counts(db: Database, fresh: float, limit: int) -> dict[str, int]:
    """Running jobs per queue whose lock is younger than ``fresh`` seconds, reading at most
    ``limit`` of them in all."""
    return dict(_rows(db, sql.RUNNING_COUNTS, {"fresh": fresh, "cap": limit}))


def estimate(db: Database, where: str, queue: str) -> int:
    """The planner's estimate of one queue's rows matching ``where`` (a ``sql.stats``
    condition); no rows are read."""
    return plan_rows(db, sql.select_where(where), [queue])


def plan_rows(db: Database, statement: str, params: Sequence[Any] | dict[str, Any]) -> int:
    """The planner's row estimate for a statement (no rows are read)."""
    with db.cursor() as cursor:
        cursor.execute(sql.EXPLAIN_JSON + statement, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str | bytes):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def indexed_queues(db: Database) -> set[str]:
    """Queues found through the indexes (of the ready rows, of dead jobs) and in the job
    table's statistics (queues with only finished jobs): never a scan of the history. The
    queues of running jobs come with their counts (:func:`running_counts`)."""
    queues: set[str] = set()
    for statement in sql.LOOSE_QUEUES:
        queues.update(row[0] for row in _rows(db, statement))
    queues.update(common_values(db, "queue"))
    return queues


def common_values(db: Database, column: str) -> list[str]:
    """The most common values of a column, from ``pg_stats`` (as of the last ANALYZE)."""
    with db.cursor() as cursor:
        cursor.execute(sql.COMMON_VALUES, [TABLE, column])
        row = cursor.fetchone()
    return list(row[0]) if row is not None and row[0] else []


def distinct_values(db: Database, column: str) -> list[Any]:
    """Every distinct value of ``queue`` or ``name`` (reads the whole table: small ones only)."""
    return [row[0] for row in _rows(db, sql.DISTINCT[column])]


def last_hour(db: Database, limit: int, fresh: float) -> list[tuple[Any, ...]]:
    """(queue, kind, minute, count) of the last hour, reading at most ``limit`` finished rows
    (and running ones whose lock is younger than ``fresh`` seconds)."""
    return _rows(db, sql.LAST_HOUR, {"cap": limit, "fresh": fresh})


def _rows(
    db: Database, statement: str, params: Sequence[Any] | dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    with db.cursor() as cursor:
        cursor.execute(statement, params)
        return [tuple(row) for row in cursor.fetchall()]
