"""Reports on the job table scan it in one process, not as parallel queries: on a server with
few CPUs their workers would take them from the queue's own backends. Going back gives the
planner its choice again.

``parallel_workers = 0``: no statement reads ``pgqueue_job`` with parallel workers. The queue
itself reads the table by index only (the worker's connection does not even consider another
plan); a sequential scan of it is a report, an export, someone's ``count(*)``. As a parallel
query each such scan runs in up to ``1 + max_parallel_workers_per_gather`` processes, and
where the server's CPUs are few, the queue's own backends wait for a CPU among them: four
readers scanning the table in a loop on 2 CPUs kept twelve processes busy, and the queue's
start latency p95 was 66 ms instead of 28 over ten minutes (docs/performance.md, "Reports on
the job table run in one process"). In one process each, the same reports take longer but
leave the queue its share. The queue does not depend on it.

The SQL is frozen as it ran: the statements of ``sql/`` may change, this migration never does.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """ALTER TABLE pgqueue_job SET (parallel_workers = 0)"""

BACKWARD = """ALTER TABLE pgqueue_job RESET (parallel_workers)"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0009_ready_held")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
