"""The schema of 0001-0011 in one step, for a new database: the tables as they are after
``0011_ready_held_queues``, then the ready ring, its functions and the triggers, made as they
end up (nothing to move: the tables are new).

Django runs this on a database with none of 0001-0011 applied; one with some of them goes on
along them (they stay in the tree). Both give the same schema, ``django_pgqueue/sql/schema.sql``
(``tests/test_migrations_frozen.py`` compares them). Frozen like the others: SQL and statuses
spelled as they are here, nothing imported from the package but ``django_pgqueue.fields``.
"""

from __future__ import annotations

import django.core.validators
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

import django_pgqueue.fields

FORWARD = """
-- One NOTIFY per committed transaction and queue (PostgreSQL folds duplicates within a
-- transaction): the statement-level trigger sees every row an INSERT added.
CREATE FUNCTION pgqueue_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgqueue', q.queue) FROM (SELECT DISTINCT queue FROM inserted) q;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_notify_insert
    AFTER INSERT ON pgqueue_job REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_notify_insert();

-- Workers sleeping until the next tick wake when a schedule changes.
CREATE FUNCTION pgqueue_notify_schedules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgqueue_schedules', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_schedule_notify
    AFTER INSERT OR UPDATE OR DELETE ON pgqueue_schedule
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_notify_schedules();

-- Reports on the job table scan it in one process, not as parallel queries.
ALTER TABLE pgqueue_job SET (parallel_workers = 0);

-- The ready ring: slots 0-7, the later partition (-1), the parked one (-2), the held one (-3).
CREATE TABLE pgqueue_ready (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue varchar(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamptz NOT NULL,
    concurrency_key varchar(255),
    rate_key varchar(255),
    concurrency_limit integer
) PARTITION BY LIST (slot);
CREATE TABLE pgqueue_ready_later PARTITION OF pgqueue_ready FOR VALUES IN (-1);
CREATE TABLE pgqueue_ready_0 PARTITION OF pgqueue_ready FOR VALUES IN (0);
CREATE TABLE pgqueue_ready_1 PARTITION OF pgqueue_ready FOR VALUES IN (1);
CREATE TABLE pgqueue_ready_2 PARTITION OF pgqueue_ready FOR VALUES IN (2);
CREATE TABLE pgqueue_ready_3 PARTITION OF pgqueue_ready FOR VALUES IN (3);
CREATE TABLE pgqueue_ready_4 PARTITION OF pgqueue_ready FOR VALUES IN (4);
CREATE TABLE pgqueue_ready_5 PARTITION OF pgqueue_ready FOR VALUES IN (5);
CREATE TABLE pgqueue_ready_6 PARTITION OF pgqueue_ready FOR VALUES IN (6);
CREATE TABLE pgqueue_ready_7 PARTITION OF pgqueue_ready FOR VALUES IN (7);
CREATE TABLE pgqueue_ready_parked PARTITION OF pgqueue_ready FOR VALUES IN (-2);
CREATE TABLE pgqueue_ready_held PARTITION OF pgqueue_ready FOR VALUES IN (-3);

CREATE INDEX pgqueue_ready_claim ON pgqueue_ready (priority DESC, run_after, job_id);
CREATE INDEX pgqueue_ready_claim_queue ON pgqueue_ready (queue, priority DESC, run_after, job_id);
CREATE INDEX pgqueue_ready_limited ON pgqueue_ready (job_id)
    WHERE rate_key IS NOT NULL OR concurrency_limit IS NOT NULL;
-- The names 0007 gave these partitions' indexes (pgqueue_ready_job's had the plain ones then).
ALTER INDEX pgqueue_ready_later_job_id_idx RENAME TO pgqueue_ready_later_job_id_idx1;
ALTER INDEX pgqueue_ready_0_job_id_idx RENAME TO pgqueue_ready_0_job_id_idx1;
ALTER INDEX pgqueue_ready_1_job_id_idx RENAME TO pgqueue_ready_1_job_id_idx1;
ALTER INDEX pgqueue_ready_2_job_id_idx RENAME TO pgqueue_ready_2_job_id_idx1;
ALTER INDEX pgqueue_ready_3_job_id_idx RENAME TO pgqueue_ready_3_job_id_idx1;
ALTER INDEX pgqueue_ready_4_job_id_idx RENAME TO pgqueue_ready_4_job_id_idx1;
ALTER INDEX pgqueue_ready_5_job_id_idx RENAME TO pgqueue_ready_5_job_id_idx1;
ALTER INDEX pgqueue_ready_6_job_id_idx RENAME TO pgqueue_ready_6_job_id_idx1;
ALTER INDEX pgqueue_ready_7_job_id_idx RENAME TO pgqueue_ready_7_job_id_idx1;
CREATE INDEX pgqueue_ready_group ON pgqueue_ready ((coalesce('c:' || concurrency_key, 'r:' || rate_key)), priority DESC, run_after, job_id)
    WHERE (concurrency_key IS NOT NULL OR rate_key IS NOT NULL);
CREATE INDEX pgqueue_ready_later_due ON pgqueue_ready_later (run_after);
CREATE INDEX pgqueue_ready_later_job ON pgqueue_ready_later (job_id);
CREATE INDEX pgqueue_ready_parked_job ON pgqueue_ready_parked (job_id);
CREATE INDEX pgqueue_ready_held_job ON pgqueue_ready_held (job_id);
CREATE INDEX pgqueue_ready_held_queue ON pgqueue_ready_held (queue, priority DESC, run_after, job_id)
    WHERE (concurrency_key IS NULL AND rate_key IS NULL);

-- clock_timestamp(), not now(): a run_after set a moment ago (run now) is due, whenever the
-- transaction began.
CREATE FUNCTION pgqueue_ready_slot(job_id bigint, run_after timestamptz) RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (CASE WHEN run_after > clock_timestamp() THEN -1
            ELSE (job_id / 4096) % 8 END)::smallint
$$;

CREATE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit
    FROM inserted WHERE status = 'pending';
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_insert
    AFTER INSERT ON pgqueue_job REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_insert();

-- A job became pending (retry, release, hand-back) or pending with a new run_after (run now):
-- its row goes where its run_after says. A later (or parked) row it had is replaced; a ring row
-- it may still have is left to the claim, which deletes rows whose job is not pending and due.
CREATE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'pending' THEN
        DELETE FROM pgqueue_ready WHERE slot IN (-1, -2, -3) AND job_id = OLD.id;
    END IF;
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority, NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit);
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_update
    AFTER UPDATE OF status, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit ON pgqueue_job
    FOR EACH ROW WHEN (NEW.status = 'pending' AND (
        OLD.status <> 'pending'
        OR OLD.queue IS DISTINCT FROM NEW.queue
        OR OLD.priority IS DISTINCT FROM NEW.priority
        OR OLD.run_after IS DISTINCT FROM NEW.run_after
        OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key
        OR OLD.rate_key IS DISTINCT FROM NEW.rate_key
        OR OLD.concurrency_limit IS DISTINCT FROM NEW.concurrency_limit))
    EXECUTE FUNCTION pgqueue_ready_update();

-- Deleted pending jobs take their ready rows with them (prune deletes finished jobs only: its
-- transition table holds no pending row), and TRUNCATE of the job table empties the ring.
CREATE FUNCTION pgqueue_ready_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready r USING deleted d
    WHERE r.job_id = d.id AND d.status = 'pending';
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_delete
    AFTER DELETE ON pgqueue_job REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_delete();
CREATE FUNCTION pgqueue_ready_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE pgqueue_ready;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_truncate
    AFTER TRUNCATE ON pgqueue_job FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_truncate();

-- TRUNCATE a ring slot that inserts have moved past: its dead tuples go with it, whatever the
-- xmin horizon. Under ACCESS EXCLUSIVE (NOWAIT: a slot in use is left for the next round), so
-- no insert or claim can be in flight on it. A slot with a few rows left (at most
-- 256) is cleared of those whose jobs are gone or no longer pending, and the rest move to
-- the slot inserts go to now; one with more is still draining and is left alone.
CREATE FUNCTION pgqueue_ready_recycle(ring_slot integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := format('pgqueue_ready_%s', ring_slot);
    rows_left bigint;
    target integer;
BEGIN
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE NOWAIT', part);
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT 257) s', part)
        INTO rows_left;
    IF rows_left > 256 THEN
        RETURN false;
    END IF;
    IF rows_left > 0 THEN
        EXECUTE format(
            'DELETE FROM %I r WHERE NOT EXISTS (SELECT 1 FROM pgqueue_job j '
            'WHERE j.id = r.job_id AND j.status = ''pending'')', part);
        -- Stragglers (pending jobs of a queue no worker serves, say) move to the slot inserts
        -- go to now, so they never keep this one from being truncated.
        target := (coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
                   / 4096) % 8;
        IF target = ring_slot THEN
            RETURN false;
        END IF;
        EXECUTE format(
            'WITH moved AS (DELETE FROM %I RETURNING *) '
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;

-- A job of a busy key's group left running (or was deleted running): the group's next held
-- row goes into the ring, to the slot inserts go to now.
CREATE FUNCTION pgqueue_ready_refill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH m AS (
        DELETE FROM pgqueue_ready_held h WHERE h.ctid = (
            SELECT ctid FROM pgqueue_ready_held WHERE (concurrency_key IS NOT NULL OR rate_key IS NOT NULL) AND coalesce('c:' || concurrency_key, 'r:' || rate_key) = coalesce('c:' || OLD.concurrency_key, 'r:' || OLD.rate_key)
            ORDER BY priority DESC, run_after, job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING h.*)
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
SELECT mod(coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
    / 4096, 8), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key, m.concurrency_limit FROM m;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_refill
    AFTER UPDATE OF status ON pgqueue_job FOR EACH ROW
    WHEN ((OLD.concurrency_key IS NOT NULL OR OLD.rate_key IS NOT NULL) AND OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION pgqueue_ready_refill();
CREATE TRIGGER pgqueue_job_ready_refill_deleted
    AFTER DELETE ON pgqueue_job FOR EACH ROW
    WHEN ((OLD.concurrency_key IS NOT NULL OR OLD.rate_key IS NOT NULL) AND OLD.status = 'running')
    EXECUTE FUNCTION pgqueue_ready_refill();
"""

# The tables themselves go with the models (DeleteModel, after this).
BACKWARD = """
DROP TRIGGER IF EXISTS pgqueue_job_ready_refill_deleted ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_refill ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_truncate ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_delete ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_insert ON pgqueue_job;
DROP FUNCTION IF EXISTS pgqueue_ready_refill();
DROP FUNCTION IF EXISTS pgqueue_ready_recycle(integer);
DROP FUNCTION IF EXISTS pgqueue_ready_truncate();
DROP FUNCTION IF EXISTS pgqueue_ready_delete();
DROP FUNCTION IF EXISTS pgqueue_ready_update();
DROP FUNCTION IF EXISTS pgqueue_ready_insert();
DROP TABLE IF EXISTS pgqueue_ready;
DROP FUNCTION IF EXISTS pgqueue_ready_slot(bigint, timestamptz);
ALTER TABLE pgqueue_job RESET (parallel_workers);
DROP TRIGGER IF EXISTS pgqueue_schedule_notify ON pgqueue_schedule;
DROP FUNCTION IF EXISTS pgqueue_notify_schedules();
DROP TRIGGER IF EXISTS pgqueue_job_notify_insert ON pgqueue_job;
DROP FUNCTION IF EXISTS pgqueue_notify_insert();
"""


class Migration(migrations.Migration):
    replaces = [
        ("django_pgqueue", "0001_initial"),
        ("django_pgqueue", "0002_job_cancel_progress"),
        ("django_pgqueue", "0003_schedules"),
        ("django_pgqueue", "0004_queue"),
        ("django_pgqueue", "0005_limits"),
        ("django_pgqueue", "0006_ready_ring"),
        ("django_pgqueue", "0007_ready_limits"),
        ("django_pgqueue", "0008_ready_parked"),
        ("django_pgqueue", "0009_ready_held"),
        ("django_pgqueue", "0010_job_serial_scans"),
        ("django_pgqueue", "0011_ready_held_queues"),
    ]

    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("worker_id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("hostname", models.CharField(max_length=255)),
                ("pid", models.PositiveIntegerField()),
                (
                    "queues",
                    models.JSONField(
                        default=list, help_text="Queues served, in order; [] means all."
                    ),
                ),
                ("threads", models.PositiveIntegerField(default=1)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_seen_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "jobs_done",
                    models.BigIntegerField(default=0, help_text="Attempts finished since start."),
                ),
                ("stopped_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "pgqueue_worker",
                "ordering": ["-last_seen_at"],
            },
        ),
        # The columns in the order 0001-0005 added them, so both paths make the same table.
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("queue", models.CharField(db_default="default", max_length=100)),
                (
                    "name",
                    models.CharField(
                        help_text="Registered name of the job function.", max_length=255
                    ),
                ),
                (
                    "args",
                    models.JSONField(db_default=models.Value([], models.JSONField()), default=list),
                ),
                (
                    "kwargs",
                    models.JSONField(db_default=models.Value({}, models.JSONField()), default=dict),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("running", "Running"),
                            ("completed", "Completed"),
                            ("dead", "Dead"),
                            ("cancelled", "Cancelled"),
                        ],
                        db_default="pending",
                        default="pending",
                        max_length=16,
                    ),
                ),
                (
                    "priority",
                    models.SmallIntegerField(
                        db_default=0, default=0, help_text="From -100 to 100; higher runs first."
                    ),
                ),
                (
                    "run_after",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                        help_text="Not claimed before this time.",
                    ),
                ),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Claims so far, including the running one.",
                    ),
                ),
                ("max_attempts", models.PositiveIntegerField(db_default=5, default=5)),
                (
                    "locked_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="Claim time, refreshed by the worker's heartbeat.",
                        null=True,
                    ),
                ),
                ("locked_by", models.CharField(blank=True, max_length=255, null=True)),
                ("last_error", models.TextField(blank=True, db_default="", default="")),
                (
                    "errors",
                    models.JSONField(
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text="One entry per failed attempt (attempt, worker_id, exception_class, traceback).",
                    ),
                ),
                (
                    "result",
                    models.JSONField(
                        blank=True, help_text="JSON return value, on success.", null=True
                    ),
                ),
                ("unique_key", models.CharField(blank=True, max_length=255, null=True)),
                ("concurrency_key", models.CharField(blank=True, max_length=255, null=True)),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "cancel_requested_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a cancellation of the running job was asked for; it ends cancelled.",
                        null=True,
                    ),
                ),
                (
                    "progress",
                    models.JSONField(
                        blank=True,
                        help_text="What the job last reported with set_progress().",
                        null=True,
                    ),
                ),
                (
                    "schedule",
                    models.CharField(
                        blank=True,
                        help_text="Name of the periodic schedule that enqueued this job, if one did.",
                        max_length=255,
                        null=True,
                    ),
                ),
                (
                    "concurrency_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most running jobs with this concurrency key (NULL: 1).",
                        null=True,
                    ),
                ),
                (
                    "concurrency_slot",
                    models.PositiveSmallIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Which of its key's concurrency_limit places it holds.",
                    ),
                ),
                (
                    "rate_key",
                    models.CharField(
                        blank=True,
                        help_text="The rate limit it counts against.",
                        max_length=255,
                        null=True,
                    ),
                ),
            ],
            options={
                "db_table": "pgqueue_job",
                "ordering": ["-id"],
                "indexes": [
                    models.Index(
                        models.F("queue"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("status", "pending")),
                        name="pgqueue_job_claim_queue",
                    ),
                    models.Index(
                        condition=models.Q(("status", "running")),
                        fields=["locked_at"],
                        name="pgqueue_job_stale",
                    ),
                    models.Index(
                        condition=models.Q(("status__in", ["completed", "dead", "cancelled"])),
                        fields=["finished_at"],
                        name="pgqueue_job_finished",
                    ),
                    models.Index(
                        condition=models.Q(("status", "dead")),
                        fields=["queue", "id"],
                        name="pgqueue_job_dead",
                    ),
                    models.Index(
                        condition=models.Q(("schedule__isnull", False)),
                        fields=["schedule", "id"],
                        name="pgqueue_job_schedule",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("queue"),
                        models.F("unique_key"),
                        condition=models.Q(
                            ("status__in", ["pending", "running"]), ("unique_key__isnull", False)
                        ),
                        name="pgqueue_job_unique_active",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name="pgqueue_job_priority_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("status__in", ["pending", "running", "completed", "dead", "cancelled"])
                        ),
                        name="pgqueue_job_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("max_attempts__gte", 1)),
                        name="pgqueue_job_max_attempts",
                    ),
                    models.UniqueConstraint(
                        models.F("concurrency_key"),
                        models.F("concurrency_slot"),
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "running")
                        ),
                        name="pgqueue_job_running_per_key_slot",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=255, unique=True)),
                (
                    "job",
                    models.CharField(
                        help_text="Registered name of the job it enqueues.", max_length=255
                    ),
                ),
                (
                    "cron",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="Cron expression: minute hour day month weekday, with an optional leading seconds field. Leave empty to use an interval.",
                        max_length=255,
                    ),
                ),
                (
                    "every",
                    models.FloatField(
                        blank=True,
                        help_text="Seconds between runs (instead of a cron expression).",
                        null=True,
                    ),
                ),
                (
                    "timezone",
                    models.CharField(
                        default=django_pgqueue.fields.default_zone,
                        help_text="IANA time zone the cron expression is read in (e.g. Europe/Paris).",
                        max_length=64,
                    ),
                ),
                (
                    "args",
                    models.JSONField(
                        blank=True, default=list, help_text="Positional arguments (JSON)."
                    ),
                ),
                (
                    "kwargs",
                    models.JSONField(
                        blank=True, default=dict, help_text="Keyword arguments (JSON)."
                    ),
                ),
                (
                    "queue",
                    models.CharField(
                        blank=True,
                        help_text="Empty: the job's own queue.",
                        max_length=100,
                        null=True,
                    ),
                ),
                (
                    "priority",
                    models.SmallIntegerField(
                        blank=True,
                        help_text="From -100 to 100; empty: the job's own priority.",
                        null=True,
                        validators=[
                            django.core.validators.MinValueValidator(-100),
                            django.core.validators.MaxValueValidator(100),
                        ],
                    ),
                ),
                (
                    "catch_up",
                    models.BooleanField(
                        default=False,
                        help_text="After an outage, enqueue every missed run (at most 100) instead of only the latest one.",
                    ),
                ),
                ("enabled", models.BooleanField(default=True)),
                ("next_run_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "last_run_at",
                    models.DateTimeField(
                        blank=True,
                        editable=False,
                        help_text="The last tick a worker enqueued.",
                        null=True,
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[("code", "Code"), ("admin", "Admin")],
                        default="admin",
                        editable=False,
                        max_length=8,
                    ),
                ),
                (
                    "code",
                    models.JSONField(
                        blank=True,
                        editable=False,
                        help_text="What the code declares (code schedules), kept apart from the values in use.",
                        null=True,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "db_table": "pgqueue_schedule",
                "ordering": ["name"],
                "indexes": [
                    models.Index(
                        condition=models.Q(("enabled", True)),
                        fields=["next_run_at"],
                        name="pgqueue_sched_due",
                    ),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("cron", ""), ("every__gte", 1)),
                            models.Q(
                                models.Q(("cron", ""), _negated=True), ("every__isnull", True)
                            ),
                            _connector="OR",
                        ),
                        name="pgqueue_schedule_cron_or_every",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("priority__isnull", True),
                            models.Q(("priority__gte", -100), ("priority__lte", 100)),
                            _connector="OR",
                        ),
                        name="pgqueue_schedule_priority_range",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                (
                    "paused",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="No worker starts a job of this queue.",
                    ),
                ),
                (
                    "concurrency_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs of this queue running at once, all workers.",
                        null=True,
                    ),
                ),
                (
                    "rate_limit",
                    models.CharField(
                        blank=True,
                        help_text='Most job starts per period, e.g. "10/s".',
                        max_length=32,
                        null=True,
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
            ],
            options={
                "db_table": "pgqueue_queue",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="RateWindow",
            fields=[
                ("id", models.CharField(max_length=300, primary_key=True, serialize=False)),
                ("starts", models.PositiveIntegerField()),
                ("period", models.FloatField(help_text="Seconds.")),
                ("recent", django_pgqueue.fields.TimestampArrayField(default=list)),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
            ],
            options={
                "db_table": "pgqueue_rate_window",
            },
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
