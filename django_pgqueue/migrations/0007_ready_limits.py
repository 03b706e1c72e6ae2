"""Ready rows copy the job's rate key and concurrency limit (``sql.ready.ADD_LIMITS``), so the
limited claim reads the ready ring like the plain one; the job table's all-queues claim index
and its index of waiting limited jobs, which no claim reads any more, are dropped (every
enqueue wrote them)."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import ready


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0006_ready_ring")]

    operations = [
        migrations.RunSQL(ready.ADD_LIMITS, ready.REMOVE_LIMITS),
        migrations.RemoveIndex(model_name="job", name="pgqueue_job_claim"),
        migrations.RemoveIndex(model_name="job", name="pgqueue_job_limited"),
    ]
