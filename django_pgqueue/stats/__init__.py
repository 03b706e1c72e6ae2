"""Per-queue numbers for the admin dashboard and ``manage.py pgqueue_status``.

Everything here stays fast on a table with millions of finished rows:

* Small tables (under ``limits.EXACT_TABLE_BYTES`` on disk) are counted exactly with one scan.
* On big tables, pending jobs are counted from their ready rows (``pgqueue_ready``), dead and
  waiting ones through their partial indexes, up to ``limits.COUNT_CAP`` rows each; past the
  cap the number is the planner's estimate. Running jobs are those whose lock is fresh (taken
  or renewed within ``PGQUEUE_VISIBILITY_TIMEOUT``; on small tables too), counted up to
  ``limits.COUNT_CAP`` in all, then lower bounds. None of these reads an index that keeps an
  entry for every job run while a transaction pins the xmin horizon.
  Completed jobs have no per-queue index (that is the point of keeping the hot indexes small),
  so their count is the planner's estimate from the table statistics (``ANALYZE``): never a
  ``COUNT(*)`` over history.
* Throughput reads the ``finished_at`` partial index over the last hour, at most
  ``limits.WINDOW_CAP`` rows; past that the oldest minutes of the hour are left out and the
  numbers say so.

Each count says whether it is exact (:class:`~django_pgqueue.stats.counts.Count`). The
statements are in :mod:`django_pgqueue.sql.stats`, run by :mod:`django_pgqueue.operations.stats`.
This package re-exports its API; its modules:

* :mod:`~django_pgqueue.stats.collect`: which statements to run, and the report built from them;
* :mod:`~django_pgqueue.stats.limits`: the limits above;
* :mod:`~django_pgqueue.stats.counts`: what a count is, capped counts and planner estimates;
* :mod:`~django_pgqueue.stats.report`: the report's data (per queue, per minute);
* :mod:`~django_pgqueue.stats.workers`: the workers seen lately;
* :mod:`~django_pgqueue.stats.exposition`: the snapshot as Prometheus metrics (the web app's
  metrics view).
"""

from __future__ import annotations

from django_pgqueue.stats import limits
from django_pgqueue.stats.collect import (
    job_names,
    queue_names,
    queue_report,
    queue_snapshot,
    table_bytes,
)
from django_pgqueue.stats.counts import Count, capped_count, estimate_rows
from django_pgqueue.stats.report import Minute, QueueReport, QueueSnapshot, QueueStats
from django_pgqueue.stats.workers import WorkerInfo

__all__ = [
    "Count",
    "Minute",
    "QueueReport",
    "QueueSnapshot",
    "QueueStats",
    "WorkerInfo",
    "capped_count",
    "estimate_rows",
    "job_names",
    "limits",
    "queue_names",
    "queue_report",
    "queue_snapshot",
    "table_bytes",
]
