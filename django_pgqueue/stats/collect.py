"""Reading the report: which statements of :mod:`django_pgqueue.operations.stats` to run on
this table (exact on small tables, capped and estimated on big ones), and the numbers they
give, per queue."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from django_pgqueue import registry
from django_pgqueue.conf import settings
from django_pgqueue.operations import Database, DjangoDatabase
from django_pgqueue.operations import stats as queries
from django_pgqueue.sql import stats as sql
from django_pgqueue.states import Event, JobStatus, WorkerState
from django_pgqueue.stats import limits
from django_pgqueue.stats.counts import Count, CountKind, over_cap
from django_pgqueue.stats.report import LastHour, QueueReport, QueueSnapshot, QueueStats
from django_pgqueue.stats.workers import WorkerInfo, recent_workers


def table_bytes(using: str | None = None) -> int:
    return queries.table_bytes(DjangoDatabase(using or settings.DATABASE))


def _small_table(db: Database) -> bool:
    return queries.table_bytes(db) < limits.EXACT_TABLE_BYTES


def queue_report(using: str | None = None) -> QueueReport:
    """Collect the numbers shown by the dashboard and ``pgqueue_status``."""
    started = time.perf_counter()
    alias = using or settings.DATABASE
    db = DjangoDatabase(alias)
    retention = timedelta(seconds=settings.RETENTION)
    dead_retention_s = settings.DEAD_RETENTION
    dead_retention = None if dead_retention_s is None else timedelta(seconds=dead_retention_s)
    with transaction.atomic(using=alias):
        now = queries.begin_report(db)
        workers = recent_workers(alias, now)
        rows = queries.last_hour(db, limits.WINDOW_CAP, settings.VISIBILITY_TIMEOUT)
        hour = LastHour.from_rows(rows, cap=limits.WINDOW_CAP)
        exact, queues = _queue_stats(db, now, _known_queues(workers) | set(hour.queues))
    for stats in queues:
        stats.completed_last_minute = hour.count(stats.queue, Event.COMPLETED, last_minute=True)
        stats.completed_last_hour = hour.count(stats.queue, Event.COMPLETED)
        stats.failed_last_hour = hour.count(stats.queue, Event.FAILED)
        live = [w for w in workers if w.state == WorkerState.RUNNING and w.serves(stats.queue)]
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


def queue_snapshot(using: str | None = None) -> QueueSnapshot:
    """The report's counts per queue and its workers, without the last hour (what the metrics
    view serves at each scrape): the same bounded statements, in one transaction."""
    started = time.perf_counter()
    alias = using or settings.DATABASE
    db = DjangoDatabase(alias)
    with transaction.atomic(using=alias):
        now = queries.begin_report(db)
        workers = recent_workers(alias, now)
        exact, queues = _queue_stats(db, now, _known_queues(workers))
    return QueueSnapshot(now, queues, workers, exact, time.perf_counter() - started)


def _queue_stats(db: Database, now: datetime, known: set[str]) -> tuple[bool, list[QueueStats]]:
    """Each queue's counts: exact on a small table, capped and estimated on a big one (whether
    they are exact, and the numbers)."""
    if _small_table(db):
        return True, _exact_stats(db, now, known)
    running = _Running.read(db)
    queues = sorted(known | queries.indexed_queues(db) | set(running.counts))
    return False, _capped_stats(db, now, queues, running)


@dataclass(frozen=True)
class _Running:
    """Running jobs per queue, those whose lock is fresh (taken or renewed within the
    visibility timeout): exact, or lower bounds once ``limits.COUNT_CAP`` of them in all were
    read."""

    counts: dict[str, int]
    kind: CountKind

    @classmethod
    def read(cls, db: Database) -> _Running:
        cap = limits.COUNT_CAP
        counts = queries.running_counts(db, settings.VISIBILITY_TIMEOUT, cap + 1)
        return cls(counts, "at_least" if sum(counts.values()) > cap else "exact")

    def of(self, queue: str) -> Count:
        return Count(self.counts.get(queue, 0), self.kind)


def queue_names(using: str | None = None) -> list[str]:
    """Queue names for the admin's filter, without a ``DISTINCT`` over a big table."""

    def indexed(db: Database) -> set[str]:
        return queries.indexed_queues(db) | set(_Running.read(db).counts)

    return sorted(_known_queues([]) | _column_values(using, "queue", indexed))


def job_names(using: str | None = None) -> list[str]:
    """Job names for the admin's filter: registered ones, and those in the table (small tables)
    or in its statistics (big tables)."""
    names = set(registry.names())
    return sorted(
        names | _column_values(using, "name", lambda db: queries.common_values(db, "name"))
    )


def _column_values(
    using: str | None, column: str, on_a_big_table: Callable[[Database], Iterable[str]]
) -> set[str]:
    """The distinct values of ``column`` on a small table; ``on_a_big_table(db)`` on a big one
    (which must not read the whole table)."""
    db = DjangoDatabase(using or settings.DATABASE)
    if _small_table(db):
        return set(queries.distinct_values(db, column))
    return set(on_a_big_table(db))


def _known_queues(workers: Iterable[WorkerInfo]) -> set[str]:
    """Queues worth a row even when empty: the default, those of registered jobs and workers."""
    queues = {settings.DEFAULT_QUEUE}
    for name in registry.names():
        queues.add(registry.spec_for(name).resolved_queue)
    for worker in workers:
        if worker.state == WorkerState.RUNNING:
            queues.update(worker.queues)
    return queues


def _exact_stats(db: Database, now: datetime, known: set[str]) -> list[QueueStats]:
    found = {}
    for row in queries.exact_counts(db, settings.VISIBILITY_TIMEOUT):
        queue, runnable, scheduled, running, completed, dead, waiting, oldest = row
        stats = QueueStats.empty(queue)
        stats.waiting = Count(waiting)
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


#: The condition each capped count reads, to estimate it once it goes past the cap.
_CAPPED_WHERE = {
    "runnable": sql.RUNNABLE,
    "scheduled": sql.SCHEDULED,
    JobStatus.DEAD.value: sql.DEAD,
    JobStatus.WAITING.value: sql.WAITING,
}


def _capped_stats(
    db: Database, now: datetime, queues: list[str], running: _Running
) -> list[QueueStats]:
    cap = limits.COUNT_CAP
    result = []
    for queue, *values, oldest in queries.capped_counts(db, queues, cap + 1):
        stats = QueueStats.empty(queue)
        stats.running = running.of(queue)
        counted: dict[str, Any] = dict(zip(_CAPPED_WHERE, values, strict=True))
        for name, value in counted.items():
            if value <= cap:
                setattr(stats, name, Count(value))
            else:
                estimate = queries.estimate(db, _CAPPED_WHERE[name], queue)
                setattr(stats, name, over_cap(estimate, cap))
        stats.completed = Count(queries.estimate(db, sql.COMPLETED, queue), "estimate")
        stats.oldest_runnable_age = _age(now, oldest)
        result.append(stats)
    return sorted(result, key=lambda s: s.queue)


def _age(now: datetime, since: datetime | None) -> timedelta | None:
    return None if since is None else max(now - since, timedelta(0))
