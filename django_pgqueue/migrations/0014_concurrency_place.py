"""One meaning per name: a running job's place among its key's ``concurrency_limit`` is its
*place* (``concurrency_place``); *slot* is the ready ring's partition only (``pgqueue_ready.slot``).

* ``pgqueue_job.concurrency_slot`` becomes ``concurrency_place``, its check constraint
  ``pgqueue_job_concurrency_place_check`` (the name PostgreSQL gives a new column's).
* The unique index of running jobs per key and place, ``pgqueue_job_running_per_key_slot``,
  becomes ``pgqueue_job_running_per_key_place``: renamed, not built again.

No trigger or function reads the column. Renames only: no row is rewritten, the table is
locked for the catalog change alone. Django's state renames the field and declares the unique
constraint again under its new name (``RenameField`` does not rewrite a constraint's fields).

The SQL is frozen here: it is what this migration ran, whatever the package's code says later.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = r"""
ALTER TABLE pgqueue_job RENAME COLUMN concurrency_slot TO concurrency_place;
ALTER TABLE pgqueue_job
    RENAME CONSTRAINT pgqueue_job_concurrency_slot_check TO pgqueue_job_concurrency_place_check;
ALTER INDEX pgqueue_job_running_per_key_slot RENAME TO pgqueue_job_running_per_key_place;
"""

BACKWARD = r"""
ALTER INDEX pgqueue_job_running_per_key_place RENAME TO pgqueue_job_running_per_key_slot;
ALTER TABLE pgqueue_job
    RENAME CONSTRAINT pgqueue_job_concurrency_place_check TO pgqueue_job_concurrency_slot_check;
ALTER TABLE pgqueue_job RENAME COLUMN concurrency_place TO concurrency_slot;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0013_rate_window_buckets")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="job", name="pgqueue_job_running_per_key_slot"
                ),
                migrations.RenameField(
                    model_name="job", old_name="concurrency_slot", new_name="concurrency_place"
                ),
                migrations.AlterField(
                    model_name="job",
                    name="concurrency_place",
                    field=models.PositiveSmallIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Which of its key's concurrency_limit places it runs in.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        models.F("concurrency_key"),
                        models.F("concurrency_place"),
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "running")
                        ),
                        name="pgqueue_job_running_per_key_place",
                    ),
                ),
            ],
        ),
    ]
