"""Per-queue numbers for the admin dashboard and ``manage.py pgqueue_status``.

Everything here stays fast on a table with millions of finished rows:

* Small tables (under ``EXACT_TABLE_BYTES`` on disk) are counted exactly with one scan.
* On big tables, pending, running and dead jobs are counted through their partial indexes, up to
  ``COUNT_CAP`` rows each; past the cap the number is the planner's estimate. Completed jobs have
  no per-queue index (that is the point of keeping the hot indexes small), so their count is the
  planner's estimate from the table statistics (``ANALYZE``): never a ``COUNT(*)`` over history.
* Throughput reads the ``finished_at`` partial index over the last hour, at most ``WINDOW_CAP``
  rows; past that the oldest minutes of the hour are left out and the numbers say so.

Each count says whether it is exact (:class:`~django_pgqueue.stats.counts.Count`). This module
collects the numbers and holds the limits above; the rest of the package:

* :mod:`~django_pgqueue.stats.counts`: what a count is, and planner estimates;
* :mod:`~django_pgqueue.stats.report`: the report's data (per queue, per minute);
* :mod:`~django_pgqueue.stats.workers`: the workers seen lately.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import QuerySet

from django_pgqueue import registry
from django_pgqueue.conf import settings
from django_pgqueue.sql import TABLE, Cursor
from django_pgqueue.stats.counts import Count, estimate_rows, over_cap, plan_rows
from django_pgqueue.stats.report import LastHour, Minute, QueueReport, QueueStats
from django_pgqueue.stats.workers import WorkerInfo, recent_workers

__all__ = [
    "COUNT_CAP",
    "EXACT_TABLE_BYTES",
    "WINDOW_CAP",
    "Count",
    "Minute",
    "QueueReport",
    "QueueStats",
    "WorkerInfo",
    "capped_count",
    "estimate_rows",
    "job_names",
    "queue_names",
    "queue_report",
    "table_bytes",
]

# Each limit is read when a function runs, so it can be lowered at run time (the tests do).

#: Partial-index counts are exact up to this many rows; above it they are estimates.
COUNT_CAP = 10_000
#: Most rows of the last hour's finished jobs read for throughput and the chart.
WINDOW_CAP = 100_000
#: Tables smaller than this are counted exactly in one sequential scan.
EXACT_TABLE_BYTES = 16 * 1024 * 1024


def capped_count(queryset: QuerySet[Any], cap: int | None = None) -> Count:
    """``queryset.count()`` that reads at most ``cap + 1`` rows; an estimate above ``cap``
    (default: ``COUNT_CAP``)."""
    if cap is None:
        cap = COUNT_CAP
    counted = queryset.order_by().values("pk")[: cap + 1].count()
    if counted <= cap:
        return Count(counted)
    return over_cap(estimate_rows(queryset), cap)


def table_bytes(using: str | None = None) -> int:
    with connections[using or settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s::regclass)", [TABLE])
        return int(cursor.fetchone()[0])


def _small_table(db: str) -> bool:
    return table_bytes(db) < EXACT_TABLE_BYTES


# ----- the statements -----------------------------------------------------------------------

_EXACT_COUNTS = f"""
SELECT queue,
    count(*) FILTER (WHERE status = 'pending' AND run_after <= statement_timestamp()),
    count(*) FILTER (WHERE status = 'pending' AND run_after > statement_timestamp()),
    count(*) FILTER (WHERE status = 'running'),
    count(*) FILTER (WHERE status = 'completed'),
    count(*) FILTER (WHERE status = 'dead'),
    min(run_after) FILTER (WHERE status = 'pending' AND run_after <= statement_timestamp())
FROM {TABLE}
GROUP BY queue
"""

# Each count reads at most %(cap)s index entries of one partial index.
_CAPPED = "(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT %(cap)s) s)"
_RUNNABLE = "status = 'pending' AND queue = {q} AND run_after <= statement_timestamp()"
_SCHEDULED = "status = 'pending' AND queue = {q} AND run_after > statement_timestamp()"
_RUNNING = "status = 'running' AND queue = {q}"
_DEAD = "status = 'dead' AND queue = {q}"
_COMPLETED = "status = 'completed' AND queue = {q}"

# The oldest runnable job of a queue: one probe of the claim index per priority (-100..100)
# instead of reading every pending row of the queue.
_OLDEST_RUNNABLE = f"""(
    SELECT min(m.run_after) FROM generate_series(-100, 100) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT run_after FROM {TABLE}
        WHERE status = 'pending' AND queue = q.name AND priority = p.priority
        ORDER BY run_after LIMIT 1
    ) m
    WHERE m.run_after <= statement_timestamp()
)"""

_CAPPED_COUNTS = f"""
SELECT q.name,
    {_CAPPED.format(table=TABLE, where=_RUNNABLE.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=_SCHEDULED.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=_RUNNING.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=_DEAD.format(q="q.name"))},
    {_OLDEST_RUNNABLE}
FROM unnest(%(queues)s::text[]) AS q(name)
"""

# Distinct queues among pending and dead jobs: a loose scan of the partial index that leads with
# ``queue`` (one index probe per queue).
_LOOSE_QUEUES = f"""
WITH RECURSIVE t(queue) AS (
    (SELECT queue FROM {TABLE} WHERE status = '{{status}}' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {TABLE} j WHERE j.status = '{{status}}' AND j.queue > t.queue
            ORDER BY j.queue LIMIT 1)
    FROM t WHERE t.queue IS NOT NULL
)
SELECT queue FROM t WHERE queue IS NOT NULL
"""
_RUNNING_QUEUES = f"SELECT DISTINCT queue FROM {TABLE} WHERE status = 'running'"
_COMMON_VALUES = """
SELECT most_common_vals::text::text[] FROM pg_stats
WHERE schemaname = current_schema() AND tablename = %s AND attname = %s
"""
_DISTINCT = f"SELECT DISTINCT {{column}} FROM {TABLE}"

# The last hour: completions per queue and minute, and failed attempts (from each job's error
# history: jobs that finished in the hour, and pending or running jobs that failed in it).
# Minute 0 is the last minute (and holds events stamped a little ahead of the database's clock).
# The row of kind 'scanned' says how many finished rows were read and the minute of the oldest
# (to detect the cap).
_LAST_HOUR = f"""
WITH finished AS MATERIALIZED (
    SELECT queue, status = 'completed' AS completed, finished_at,
           CASE WHEN errors = '[]'::jsonb THEN NULL ELSE errors END AS errors
    FROM {TABLE}
    WHERE status IN ('completed', 'dead', 'cancelled')
      AND finished_at > statement_timestamp() - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
), failing AS MATERIALIZED (
    (SELECT queue, errors FROM {TABLE}
     WHERE status = 'pending' AND errors <> '[]'
       AND run_after > statement_timestamp() - interval '1 hour'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, errors FROM {TABLE} WHERE status = 'running' AND errors <> '[]' LIMIT %(cap)s)
), failures AS (
    SELECT f.queue, (e ->> 'at')::timestamptz AS at
    FROM (SELECT queue, errors FROM finished WHERE errors IS NOT NULL
          UNION ALL
          SELECT queue, errors FROM failing) f
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE jsonb_typeof(f.errors) WHEN 'array' THEN f.errors ELSE '[]' END) e
    WHERE e ->> 'at' ~ '^\\d{{4}}-\\d\\d-\\d\\d'
), events AS (
    SELECT queue, finished_at AS at, 'completed' AS kind FROM finished WHERE completed
    UNION ALL
    SELECT queue, at, 'failed' FROM failures WHERE at > statement_timestamp() - interval '1 hour'
), clock AS (
    SELECT date_part('epoch', statement_timestamp()) AS now
)
SELECT queue, kind, greatest(floor((clock.now - date_part('epoch', at)) / 60)::int, 0), count(*)
FROM events, clock
GROUP BY 1, 2, 3
UNION ALL
SELECT NULL, 'scanned', floor((clock.now - date_part('epoch', min(finished_at))) / 60)::int,
       count(*)
FROM finished, clock
GROUP BY clock.now
"""


def queue_report(using: str | None = None) -> QueueReport:
    """Collect the numbers shown by the dashboard and ``pgqueue_status``."""
    started = time.perf_counter()
    db = using or settings.DATABASE
    retention = timedelta(seconds=settings.RETENTION)
    dead_retention_s = settings.DEAD_RETENTION
    dead_retention = None if dead_retention_s is None else timedelta(seconds=dead_retention_s)
    with transaction.atomic(using=db), connections[db].cursor() as cursor:
        # These statements are cheap by design; compiling them would cost more than running them.
        cursor.execute("SET LOCAL jit = off")
        cursor.execute("SELECT statement_timestamp()")
        now: datetime = cursor.fetchone()[0]
        workers = recent_workers(db, now)
        hour = _last_hour(cursor)
        exact = _small_table(db)
        known = _known_queues(workers) | set(hour.queues)
        if exact:
            queues = _exact_stats(cursor, now, known)
        else:
            known |= _indexed_queues(cursor)
            queues = _capped_stats(cursor, now, sorted(known))
    for stats in queues:
        stats.completed_last_minute = hour.count(stats.queue, "completed", last_minute=True)
        stats.completed_last_hour = hour.count(stats.queue, "completed")
        stats.failed_last_hour = hour.count(stats.queue, "failed")
        live = [w for w in workers if w.state == "running" and w.serves(stats.queue)]
        stats.workers = len(live)
        stats.threads = sum(w.threads for w in live)
    report = QueueReport(
        generated_at=now,
        queues=queues,
        workers=workers,
        minutes=hour.minutes(now),
        exact=exact,
        window_capped=hour.capped,
        retention=retention,
        dead_retention=dead_retention,
    )
    report.duration = time.perf_counter() - started
    return report


def queue_names(using: str | None = None) -> list[str]:
    """Queue names for the admin's filter, without a ``DISTINCT`` over a big table."""
    return sorted(_known_queues([]) | _column_values(using, "queue", _indexed_queues))


def job_names(using: str | None = None) -> list[str]:
    """Job names for the admin's filter: registered ones, and those in the table (small tables)
    or in its statistics (big tables)."""
    names = set(registry.names())
    return sorted(names | _column_values(using, "name", lambda c: _common_values(c, "name")))


def _column_values(
    using: str | None, column: str, on_a_big_table: Callable[[Cursor], Iterable[str]]
) -> set[str]:
    """The distinct values of ``column`` on a small table; ``on_a_big_table(cursor)`` on a big one
    (which must not read the whole table)."""
    db = using or settings.DATABASE
    with connections[db].cursor() as cursor:
        if _small_table(db):
            cursor.execute(_DISTINCT.format(column=column))
            return set(_first_column(cursor))
        return set(on_a_big_table(cursor))


def _first_column(cursor: Cursor) -> list[Any]:
    return [row[0] for row in cursor.fetchall()]


def _known_queues(workers: Iterable[WorkerInfo]) -> set[str]:
    """Queues worth a row even when empty: the default, those of registered jobs and workers."""
    queues = {settings.DEFAULT_QUEUE}
    for name in registry.names():
        queues.add(registry.spec_for(name).resolved_queue)
    for worker in workers:
        if worker.state == "running":
            queues.update(worker.queues)
    return queues


def _indexed_queues(cursor: Cursor) -> set[str]:
    queues: set[str] = set()
    for status in ("pending", "dead"):
        cursor.execute(_LOOSE_QUEUES.format(status=status))
        queues.update(_first_column(cursor))
    cursor.execute(_RUNNING_QUEUES)
    queues.update(_first_column(cursor))
    # Queues common enough to appear in the statistics (those with only finished jobs).
    queues.update(_common_values(cursor, "queue"))
    return queues


def _common_values(cursor: Cursor, column: str) -> list[str]:
    cursor.execute(_COMMON_VALUES, [TABLE, column])
    row = cursor.fetchone()
    return list(row[0]) if row is not None and row[0] else []


def _exact_stats(cursor: Cursor, now: datetime, known: set[str]) -> list[QueueStats]:
    cursor.execute(_EXACT_COUNTS)
    found = {}
    for queue, runnable, scheduled, running, completed, dead, oldest in cursor.fetchall():
        stats = QueueStats.empty(queue)
        stats.runnable = Count(runnable)
        stats.scheduled = Count(scheduled)
        stats.running = Count(running)
        stats.completed = Count(completed)
        stats.dead = Count(dead)
        stats.oldest_runnable_age = _age(now, oldest)
        found[queue] = stats
    for queue in known - set(found):
        found[queue] = QueueStats.empty(queue)
    return [found[q] for q in sorted(found)]


def _capped_stats(cursor: Cursor, now: datetime, queues: list[str]) -> list[QueueStats]:
    cap = COUNT_CAP
    cursor.execute(_CAPPED_COUNTS, {"queues": queues, "cap": cap + 1})
    where = {"runnable": _RUNNABLE, "scheduled": _SCHEDULED, "running": _RUNNING, "dead": _DEAD}
    result = []
    for queue, runnable, scheduled, running, dead, oldest in cursor.fetchall():
        stats = QueueStats.empty(queue)
        counted = {"runnable": runnable, "scheduled": scheduled, "running": running, "dead": dead}
        for name, value in counted.items():
            if value <= cap:
                setattr(stats, name, Count(value))
            else:
                estimate = plan_rows(cursor, _select_where(where[name]), [queue])
                setattr(stats, name, over_cap(estimate, cap))
        estimate = plan_rows(cursor, _select_where(_COMPLETED), [queue])
        stats.completed = Count(estimate, "estimate")
        stats.oldest_runnable_age = _age(now, oldest)
        result.append(stats)
    return sorted(result, key=lambda s: s.queue)


def _select_where(where: str) -> str:
    return f"SELECT 1 FROM {TABLE} WHERE " + where.format(q="%s")


def _last_hour(cursor: Cursor) -> LastHour:
    cursor.execute(_LAST_HOUR, {"cap": WINDOW_CAP})
    return LastHour.from_rows(cursor.fetchall(), cap=WINDOW_CAP)


def _age(now: datetime, since: datetime | None) -> timedelta | None:
    return None if since is None else max(now - since, timedelta(0))
