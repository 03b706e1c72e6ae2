"""Deploy-safe long jobs (issue 36): ``pgqueue_job.interruptions``, how many times a worker's
shutdown handed the job back (``JobInterrupted``, the shutdown timeout, a process stopped under
it). Within ``PGQUEUE_MAX_INTERRUPTIONS`` an interruption gives its attempt back; past it, each
counts as one. Never negative (S9 in docs/storage.md): the CHECK says so.

The column has a database default, so that a worker of an older version (which does not name it)
still inserts jobs, and adding it rewrites no row (PostgreSQL 11+ stores a constant default in
the catalog). The CHECK is added ``NOT VALID`` with it (no scan of the table under the ALTER's
exclusive lock, which would stop every enqueue and claim while it reads a big table), then
validated in a transaction of its own (``atomic = False``), whose lock lets reads and writes go
on.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = """
ALTER TABLE pgqueue_job ADD COLUMN interruptions integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT pgqueue_job_interruptions_check CHECK (interruptions >= 0) NOT VALID;
"""
VALIDATE = "ALTER TABLE pgqueue_job VALIDATE CONSTRAINT pgqueue_job_interruptions_check;"
BACKWARD = "ALTER TABLE pgqueue_job DROP COLUMN interruptions;"


class Migration(migrations.Migration):
    # Each statement in a transaction of its own: the validation does not hold the ALTER's lock.
    atomic = False

    dependencies = [("django_pgqueue", "0016_worker_abandoned")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="interruptions",
                    field=models.PositiveIntegerField(
                        default=0,
                        db_default=0,
                        help_text="Times a worker's shutdown handed it back (docs/worker.md); "
                        "within PGQUEUE_MAX_INTERRUPTIONS they spend no attempt.",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(VALIDATE, migrations.RunSQL.noop),
    ]
