"""Reports on the job table scan it in one process, not as parallel queries
(``django_pgqueue.sql.storage`` says why): on a server with few CPUs their workers would take
them from the queue's own backends. Going back gives the planner its choice again.

The SQL is frozen as it ran: the statements of ``sql/`` may change, this migration never does.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """ALTER TABLE pgqueue_job SET (parallel_workers = 0)"""

BACKWARD = """ALTER TABLE pgqueue_job RESET (parallel_workers)"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0009_ready_held")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
