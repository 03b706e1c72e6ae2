"""Workflows (issue 33), the part that reads the whole job table: ``0022_workflows`` added the
status ``waiting`` to the CHECK ``NOT VALID``; here it is validated, the indexes of waiting jobs
and of batch members are built, and the unique key's index is rebuilt to take ``waiting`` in
(a waiting job's unique key is in use).

Each statement in a transaction of its own (``atomic = False``), none holding a lock that stops
writes: ``VALIDATE CONSTRAINT`` and ``CREATE INDEX CONCURRENTLY`` take ``SHARE UPDATE EXCLUSIVE``
on ``pgqueue_job`` (enqueues and claims go on while they read it; ``ALTER TABLE ... ADD
CONSTRAINT`` and ``CREATE INDEX`` would stop them for the length of the scan, a minute or more
on a big table). The unique index is built under a new name first, then the old one dropped and
the new one renamed: some index enforces the unique key at every moment.

The unique index comes first: this version's ``enqueue()`` names it (``ON CONFLICT`` over
pending, running and waiting jobs) and fails until it is built, while the version before's
works with either index. Migrate before starting this version (docs/upgrading.md).

Run again after a failure (a concurrent build that failed leaves an invalid index behind, which
``check`` reports as ``E106``), it drops what a previous run left and builds it again. Enqueues
of waiting jobs before it finishes (code of this version running before the migration ends)
are not yet in the unique index: a duplicate unique key among them fails its build, named in
the error.
"""

from __future__ import annotations

from django.db import migrations, models

VALIDATE = "ALTER TABLE pgqueue_job VALIDATE CONSTRAINT pgqueue_job_status_valid;"

WAITING = (
    "DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_waiting;",
    "CREATE INDEX CONCURRENTLY pgqueue_job_waiting ON pgqueue_job (queue, id)"
    " WHERE status = 'waiting';",
)
BATCH = (
    "DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_batch;",
    "CREATE INDEX CONCURRENTLY pgqueue_job_batch ON pgqueue_job (batch_id, id)"
    " WHERE batch_id IS NOT NULL;",
)


def _unique(statuses: str) -> tuple[str, ...]:
    """The unique key's index, over jobs of ``statuses``, swapped in under its name."""
    return (
        "DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_unique_active_new;",
        "CREATE UNIQUE INDEX CONCURRENTLY pgqueue_job_unique_active_new"
        f" ON pgqueue_job (queue, unique_key) WHERE status IN ({statuses})"
        " AND unique_key IS NOT NULL;",
        "DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_unique_active;",
        "ALTER INDEX pgqueue_job_unique_active_new RENAME TO pgqueue_job_unique_active;",
    )


UNIQUE = _unique("'pending', 'running', 'waiting'")
UNIQUE_BACKWARD = _unique("'pending', 'running'")


class Migration(migrations.Migration):
    # Each statement in a transaction of its own: CONCURRENTLY needs it, and the validation
    # holds only its own lock.
    atomic = False

    dependencies = [("django_pgqueue", "0022_workflows")]

    operations = [
        migrations.RunSQL(
            UNIQUE,
            UNIQUE_BACKWARD,
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="pgqueue_job_unique_active"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        models.F("queue"),
                        models.F("unique_key"),
                        condition=models.Q(
                            ("status__in", ["pending", "running", "waiting"]),
                            ("unique_key__isnull", False),
                        ),
                        name="pgqueue_job_unique_active",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(VALIDATE, migrations.RunSQL.noop),
        migrations.RunSQL(
            WAITING,
            ("DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_waiting;",),
            state_operations=[
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("status", "waiting")),
                        fields=["queue", "id"],
                        name="pgqueue_job_waiting",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(
            BATCH,
            ("DROP INDEX CONCURRENTLY IF EXISTS pgqueue_job_batch;",),
            state_operations=[
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("batch__isnull", False)),
                        fields=["batch", "id"],
                        name="pgqueue_job_batch",
                    ),
                ),
            ],
        ),
    ]
