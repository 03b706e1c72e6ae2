"""A worker's abandoned attempts still running (issue 36): ``pgqueue_worker.abandoned``, the ids
of the jobs whose attempt the worker gave up on (cancel timeout, job timeout) while their thread
still runs the function. The worker rewrites it on every heartbeat; a job's row says cancelled
(or dead, or pending again) while this says its code is still running.

The column has a database default, so that a worker of an older version (which does not name it)
still inserts its row.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = "ALTER TABLE pgqueue_worker ADD COLUMN abandoned jsonb NOT NULL DEFAULT '[]'::jsonb;"
BACKWARD = "ALTER TABLE pgqueue_worker DROP COLUMN abandoned;"


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0015_repair_position")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.AddField(
                    model_name="worker",
                    name="abandoned",
                    field=models.JSONField(
                        default=list,
                        db_default=models.Value([], models.JSONField()),
                        help_text="Jobs whose abandoned attempt's thread still runs here.",
                    ),
                ),
            ],
        )
    ]
