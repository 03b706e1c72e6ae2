"""Per-queue numbers for the admin dashboard and ``manage.py pgqueue_status``.

Everything here stays fast on a table with millions of finished rows:

* Small tables (under ``EXACT_TABLE_BYTES`` on disk) are counted exactly with one scan.
* On big tables, pending, running and dead jobs are counted through their partial indexes, up to
  ``COUNT_CAP`` rows each; past the cap the number is the planner's estimate. Completed jobs have
  no per-queue index (that is the point of keeping the hot indexes small), so their count is the
  planner's estimate from the table statistics (``ANALYZE``): never a ``COUNT(*)`` over history.
* Throughput reads the ``finished_at`` partial index over the last hour, at most ``WINDOW_CAP``
  rows; past that the oldest minutes of the hour are left out and the numbers say so.

Each count says whether it is exact (:class:`Count`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from django.db import connections, transaction
from django.db.models import QuerySet

from django_pgqueue import registry
from django_pgqueue.conf import settings
from django_pgqueue.sql import TABLE, Cursor

#: Partial-index counts are exact up to this many rows; above it they are estimates.
COUNT_CAP = 10_000
#: Most rows of the last hour's finished jobs read for throughput and the chart.
WINDOW_CAP = 100_000
#: Tables smaller than this are counted exactly in one sequential scan.
EXACT_TABLE_BYTES = 16 * 1024 * 1024
#: Workers seen within this window are listed.
WORKER_WINDOW = timedelta(hours=1)
#: Minutes in the throughput chart.
MINUTES = 60

CountKind = Literal["exact", "at_least", "estimate"]


@dataclass(frozen=True)
class Count:
    """A row count: ``exact``, a lower bound (``at_least``) or a planner ``estimate``."""

    value: int
    kind: CountKind = "exact"

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def __str__(self) -> str:
        if self.kind == "at_least":
            return f"{self.value:,}+"
        if self.kind == "estimate":
            return f"~{_round(self.value):,}"
        return f"{self.value:,}"

    @property
    def note(self) -> str:
        """Why the number is not exact (empty when it is)."""
        if self.kind == "at_least":
            return f"Counted up to {self.value:,} rows and stopped there."
        if self.kind == "estimate":
            return "PostgreSQL's estimate from the table statistics (as of the last ANALYZE)."
        return ""


def _round(value: int) -> int:
    """Two significant digits: an estimate of 1,234,567 rows reads as ~1,200,000."""
    if value < 100:
        return value
    digits = len(str(value)) - 2
    return round(value, -digits)


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: str
    hostname: str
    pid: int
    queues: list[str]
    threads: int
    started_at: datetime
    last_seen_at: datetime
    jobs_done: int
    stopped_at: datetime | None
    #: ``running``, ``stopped`` or ``lost`` (no heartbeat for longer than the visibility timeout).
    state: str

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


@dataclass
class QueueStats:
    queue: str
    runnable: Count
    scheduled: Count
    running: Count
    completed: Count
    dead: Count
    #: How long the oldest runnable job has waited since its ``run_after`` (None: none waits).
    oldest_runnable_age: timedelta | None
    completed_last_minute: Count
    completed_last_hour: Count
    failed_last_hour: Count
    #: Live workers serving this queue, and their threads.
    workers: int = 0
    threads: int = 0

    @property
    def pending(self) -> Count:
        return _add(self.runnable, self.scheduled)

    def as_dict(self) -> dict[str, Any]:
        counts = {
            "runnable": self.runnable,
            "scheduled": self.scheduled,
            "running": self.running,
            "completed": self.completed,
            "dead": self.dead,
            "completed_last_minute": self.completed_last_minute,
            "completed_last_hour": self.completed_last_hour,
            "failed_last_hour": self.failed_last_hour,
        }
        age = self.oldest_runnable_age
        return {
            "queue": self.queue,
            **{name: c.value for name, c in counts.items()},
            "oldest_runnable_age_seconds": None if age is None else round(age.total_seconds(), 3),
            "workers": self.workers,
            "threads": self.threads,
            "approximate": {name: c.kind for name, c in counts.items() if not c.exact},
        }


@dataclass(frozen=True)
class Minute:
    """One minute of the chart: ``start`` to ``start + 1 minute``."""

    start: datetime
    completed: int
    failed: int
    #: False when the window cap cut this minute off (its numbers are then too low).
    complete: bool = True


@dataclass
class QueueReport:
    generated_at: datetime
    queues: list[QueueStats]
    workers: list[WorkerInfo]
    #: The last hour, oldest minute first.
    minutes: list[Minute]
    #: True when every count is exact (small table).
    exact: bool
    #: More than ``WINDOW_CAP`` jobs finished in the last hour: only the newest were read.
    window_capped: bool
    retention: timedelta
    dead_retention: timedelta | None
    duration: float = 0.0
    notes: list[str] = field(default_factory=list)

    def queue(self, name: str) -> QueueStats:
        for stats in self.queues:
            if stats.queue == name:
                return stats
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at.isoformat(),
            "exact": self.exact,
            "window_capped": self.window_capped,
            "retention_seconds": self.retention.total_seconds(),
            "dead_retention_seconds": (
                None if self.dead_retention is None else self.dead_retention.total_seconds()
            ),
            "queues": [q.as_dict() for q in self.queues],
            "workers": [
                {
                    "worker_id": w.worker_id,
                    "hostname": w.hostname,
                    "pid": w.pid,
                    "queues": w.queues,
                    "threads": w.threads,
                    "state": w.state,
                    "started_at": w.started_at.isoformat(),
                    "last_seen_at": w.last_seen_at.isoformat(),
                    "jobs_done": w.jobs_done,
                }
                for w in self.workers
            ],
            "last_hour": [
                {"start": m.start.isoformat(), "completed": m.completed, "failed": m.failed}
                for m in self.minutes
            ],
        }


def _add(a: Count, b: Count) -> Count:
    kinds = {a.kind, b.kind}
    kind: CountKind = (
        "estimate" if "estimate" in kinds else "at_least" if "at_least" in kinds else "exact"
    )
    return Count(a.value + b.value, kind)


# ----- generic helpers (also used by the admin's paginator) --------------------------------


def _plan_rows(cursor: Cursor, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
    cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
    plan = cursor.fetchone()[0]
    if isinstance(plan, str | bytes):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def estimate_rows(queryset: QuerySet[Any]) -> int:
    """The planner's row estimate for ``queryset`` (no rows are read)."""
    sql, params = queryset.order_by().query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        return _plan_rows(cursor, sql, params)


def capped_count(queryset: QuerySet[Any], cap: int | None = None) -> Count:
    """``queryset.count()`` that reads at most ``cap + 1`` rows; an estimate above ``cap``
    (default: ``COUNT_CAP``)."""
    if cap is None:
        cap = COUNT_CAP
    counted = queryset.order_by().values("pk")[: cap + 1].count()
    if counted <= cap:
        return Count(counted)
    return _over_cap(estimate_rows(queryset), cap)


def _over_cap(estimate: int, cap: int) -> Count:
    # Statistics may lag behind the table: never show less than what was counted.
    if estimate > cap:
        return Count(estimate, "estimate")
    return Count(cap, "at_least")


def table_bytes(using: str | None = None) -> int:
    with connections[using or settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s::regclass)", [TABLE])
        return int(cursor.fetchone()[0])


# ----- the report ---------------------------------------------------------------------------

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
        workers = _workers(db, now)
        hour = _last_hour(cursor, now)
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


def _known_queues(workers: Iterable[WorkerInfo]) -> set[str]:
    """Queues worth a row even when empty: the default, those of registered jobs and workers."""
    queues = {settings.DEFAULT_QUEUE}
    for name in registry.names():
        options = getattr(registry.get(name), "options", None)
        queue = getattr(options, "queue", None)
        if isinstance(queue, str):
            queues.add(queue)
    for worker in workers:
        if worker.state == "running":
            queues.update(worker.queues)
    return queues


def _indexed_queues(cursor: Cursor) -> set[str]:
    queues: set[str] = set()
    for status in ("pending", "dead"):
        cursor.execute(_LOOSE_QUEUES.format(status=status))
        queues.update(row[0] for row in cursor.fetchall())
    cursor.execute(_RUNNING_QUEUES)
    queues.update(row[0] for row in cursor.fetchall())
    # Queues common enough to appear in the statistics (those with only finished jobs).
    queues.update(_common_values(cursor, "queue"))
    return queues


def _common_values(cursor: Cursor, column: str) -> list[str]:
    cursor.execute(_COMMON_VALUES, [TABLE, column])
    row = cursor.fetchone()
    return list(row[0]) if row is not None and row[0] else []


def _small_table(db: str) -> bool:
    return table_bytes(db) < EXACT_TABLE_BYTES


def queue_names(using: str | None = None) -> list[str]:
    """Queue names for the admin's filter, without a ``DISTINCT`` over a big table."""
    db = using or settings.DATABASE
    queues = _known_queues([])
    with connections[db].cursor() as cursor:
        if _small_table(db):
            cursor.execute(_DISTINCT.format(column="queue"))
            queues.update(row[0] for row in cursor.fetchall())
        else:
            queues |= _indexed_queues(cursor)
    return sorted(queues)


def job_names(using: str | None = None) -> list[str]:
    """Job names for the admin's filter: registered ones, and those in the table (small tables)
    or in its statistics (big tables)."""
    db = using or settings.DATABASE
    names = set(registry.names())
    with connections[db].cursor() as cursor:
        if _small_table(db):
            cursor.execute(_DISTINCT.format(column="name"))
            names.update(row[0] for row in cursor.fetchall())
        else:
            names.update(_common_values(cursor, "name"))
    return sorted(names)


def _empty(queue: str) -> QueueStats:
    zero = Count(0)
    return QueueStats(queue, zero, zero, zero, zero, zero, None, zero, zero, zero)


def _exact_stats(cursor: Cursor, now: datetime, known: set[str]) -> list[QueueStats]:
    cursor.execute(_EXACT_COUNTS)
    found = {}
    for queue, runnable, scheduled, running, completed, dead, oldest in cursor.fetchall():
        stats = _empty(queue)
        stats.runnable = Count(runnable)
        stats.scheduled = Count(scheduled)
        stats.running = Count(running)
        stats.completed = Count(completed)
        stats.dead = Count(dead)
        stats.oldest_runnable_age = _age(now, oldest)
        found[queue] = stats
    for queue in known - set(found):
        found[queue] = _empty(queue)
    return [found[q] for q in sorted(found)]


def _capped_stats(cursor: Cursor, now: datetime, queues: list[str]) -> list[QueueStats]:
    cap = COUNT_CAP
    cursor.execute(_CAPPED_COUNTS, {"queues": queues, "cap": cap + 1})
    result = []
    for queue, runnable, scheduled, running, dead, oldest in cursor.fetchall():
        stats = _empty(queue)
        counted = {"runnable": runnable, "scheduled": scheduled, "running": running, "dead": dead}
        where = {"runnable": _RUNNABLE, "scheduled": _SCHEDULED, "running": _RUNNING, "dead": _DEAD}
        for name, value in counted.items():
            if value <= cap:
                setattr(stats, name, Count(value))
            else:
                estimate = _plan_rows(cursor, _select_where(where[name]), [queue])
                setattr(stats, name, _over_cap(estimate, cap))
        estimate = _plan_rows(cursor, _select_where(_COMPLETED), [queue])
        stats.completed = Count(estimate, "estimate")
        stats.oldest_runnable_age = _age(now, oldest)
        result.append(stats)
    return sorted(result, key=lambda s: s.queue)


def _select_where(where: str) -> str:
    return f"SELECT 1 FROM {TABLE} WHERE " + where.format(q="%s")


def _age(now: datetime, since: datetime | None) -> timedelta | None:
    return None if since is None else max(now - since, timedelta(0))


@dataclass
class _LastHour:
    #: (queue, kind, minute) -> count; minute 0 is the last minute.
    counts: dict[tuple[str, str, int], int]
    capped: bool
    #: With the cap hit: the oldest minute (as ``minute``) whose finished jobs were all read.
    complete_minutes: int = MINUTES

    @property
    def queues(self) -> set[str]:
        return {queue for queue, _, _ in self.counts}

    def count(self, queue: str, kind: str, *, last_minute: bool = False) -> Count:
        total = sum(
            n
            for (q, k, minute), n in self.counts.items()
            if q == queue and k == kind and (minute == 0 or not last_minute)
        )
        if self.capped and not (last_minute and self.complete_minutes > 0):
            return Count(total, "at_least")
        return Count(total)

    def minutes(self, now: datetime) -> list[Minute]:
        completed = [0] * MINUTES
        failed = [0] * MINUTES
        for (_, kind, minute), n in self.counts.items():
            if 0 <= minute < MINUTES:
                (completed if kind == "completed" else failed)[minute] += n
        return [
            Minute(
                start=now - timedelta(minutes=m + 1),
                completed=completed[m],
                failed=failed[m],
                complete=not self.capped or m < self.complete_minutes,
            )
            for m in reversed(range(MINUTES))
        ]


def _last_hour(cursor: Cursor, now: datetime) -> _LastHour:
    cursor.execute(_LAST_HOUR, {"cap": WINDOW_CAP})
    counts: dict[tuple[str, str, int], int] = {}
    scanned = 0
    oldest_minute = MINUTES
    for queue, kind, minute, n in cursor.fetchall():
        if kind == "scanned":
            scanned, oldest_minute = n, minute
        else:
            counts[(queue, kind, minute)] = n
    capped = scanned >= WINDOW_CAP
    # The minute holding the oldest row read may be partly cut off; newer ones are whole.
    return _LastHour(counts, capped, oldest_minute if capped else MINUTES)


def _workers(db: str, now: datetime) -> list[WorkerInfo]:
    from django_pgqueue.models import Worker

    lost_after = timedelta(seconds=settings.VISIBILITY_TIMEOUT)
    workers = []
    for w in Worker.objects.using(db).filter(last_seen_at__gte=now - WORKER_WINDOW):
        if w.stopped_at is not None:
            state = "stopped"
        elif now - w.last_seen_at > lost_after:
            state = "lost"
        else:
            state = "running"
        workers.append(
            WorkerInfo(
                worker_id=w.worker_id,
                hostname=w.hostname,
                pid=w.pid,
                queues=[str(q) for q in (w.queues or [])],
                threads=w.threads,
                started_at=w.started_at,
                last_seen_at=w.last_seen_at,
                jobs_done=w.jobs_done,
                stopped_at=w.stopped_at,
                state=state,
            )
        )
    workers.sort(key=lambda w: (w.state != "running", w.worker_id))
    return workers
