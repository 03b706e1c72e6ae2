"""Reports on the job table scan it in one process, not as parallel queries
(``sql.storage``): on a server with few CPUs their workers would take them from the queue's
own backends. Going back gives the planner its choice again."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import storage


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0009_ready_held")]

    operations = [migrations.RunSQL(storage.SERIAL_SCANS, storage.PARALLEL_SCANS)]
