"""A queue's own limits hold its backlog too (``sql.held``): rows with neither key, of a queue
with a concurrency or rate limit of its own, beyond the few the ring keeps. The held partition
gets an index of them in the claims' order; going back puts them into the ring again."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import held


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0010_job_serial_scans")]

    operations = [migrations.RunSQL(held.ADD_HELD_QUEUES, held.REMOVE_HELD_QUEUES)]
