"""The position of the workers' repair rounds (docs/storage.md, "Self-healing"): a sequence
every worker takes the number of its next range of job ids from, so that together they repair
the whole table once an interval, each round reading one range.

Not derived from the job table, and not truth: a position. Losing it (a restore without it)
costs one pass over the table.

The SQL is frozen here: it is what this migration ran, whatever the package's code says later.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = "CREATE SEQUENCE pgqueue_repair_position MINVALUE 0 START 0;"
BACKWARD = "DROP SEQUENCE pgqueue_repair_position;"


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0014_concurrency_place")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
