"""The job table's storage parameters (``0010_job_serial_scans``).

``parallel_workers = 0``: no statement reads ``pgqueue_job`` with parallel workers. The queue
itself reads the table by index only (the worker's connection does not even consider another
plan); a sequential scan of it is a report, an export, someone's ``count(*)``. As a parallel
query each such scan runs in up to ``1 + max_parallel_workers_per_gather`` processes, and
where the server's CPUs are few, the queue's own backends wait for a CPU among them: four
readers scanning the table in a loop on 2 CPUs kept twelve processes busy, and the queue's
start latency p95 was 66 ms instead of 28 over ten minutes (docs/performance.md, "Reports on
the job table run in one process").
In one process each, the same reports take longer but leave the queue its share.

``ALTER TABLE pgqueue_job RESET (parallel_workers)`` gives the planner its choice back; the
queue does not depend on it.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE

SERIAL_SCANS = f"ALTER TABLE {TABLE} SET (parallel_workers = 0)"
PARALLEL_SCANS = f"ALTER TABLE {TABLE} RESET (parallel_workers)"
