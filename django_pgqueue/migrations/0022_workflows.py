"""Workflows (issue 33): jobs that wait for other jobs, and batches whose callbacks fire once.

* ``waiting``, a new status: a job enqueued after others (``using(after=)``, ``chain``) waits
  for them, never runnable (no ready row: the ready triggers write rows of pending jobs only),
  ``parents_left`` counting its parents not completed yet. The status CHECK and the unique
  key's partial index take it in (it is active: its unique key is in use).
* ``pgqueue_job_dependency``: one row per (child, parent), written once at the child's
  enqueue; ``satisfied`` (its parent's completion is counted) and ``cascaded`` (its parent's
  end cancelled the child), kept by the triggers.
* ``pgqueue_job.dependents``: the job has dependents, so its status changes look for them
  (``pgqueue_job_flow_parent``; a plain job never calls it). Set by the edge's deferred
  trigger as the edge's transaction commits, under the parent's row lock: two parents ending
  at once each take the child's row lock to count, so neither both skip the release nor both
  do it, and a parent ending while its edge commits is seen by exactly one side.
* ``pgqueue_batch``, ``pgqueue_batch_tally``, ``pgqueue_job.batch_id`` and ``callback_of``:
  batches, counted by buckets of 128 member ids once sealed; the batch's finish enqueues its
  callbacks in the transaction of its last member's outcome, once.

The rules they keep are F1-F4 and B1 in docs/storage.md. The SQL is frozen here.

Nothing here reads ``pgqueue_job`` whole under a lock: its new columns have constant defaults
(no rewrite), the status CHECK is added ``NOT VALID``, and its new indexes and the unique key's
wider index are built by ``0023_workflows_online``, which validates the CHECK too, each in a
transaction of its own that lets enqueues and claims go on.
"""

from __future__ import annotations

import django.db.models.deletion
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

FORWARD = r"""
-- Every waiting dependent of `parent` (or only `only_child`), and theirs, cancelled without
-- running; the edge through which each was reached first remembers it (`cascaded`), so a retry
-- of `parent` puts them back. `why`: what happened to `parent` ('ended dead', 'was deleted').
CREATE FUNCTION pgqueue_flow_cancel(parent bigint, why text, only_child bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH RECURSIVE r(parent_id, child_id) AS (
        SELECT d.parent_id, d.child_id FROM pgqueue_job_dependency d
        JOIN pgqueue_job c ON c.id = d.child_id AND c.status = 'waiting'
        WHERE d.parent_id = parent AND (only_child IS NULL OR d.child_id = only_child)
        UNION
        SELECT d.parent_id, d.child_id FROM r
        JOIN pgqueue_job_dependency d ON d.parent_id = r.child_id
        JOIN pgqueue_job c ON c.id = d.child_id AND c.status = 'waiting'
    ), first AS (
        SELECT DISTINCT ON (child_id) parent_id, child_id FROM r ORDER BY child_id, parent_id
    ), marked AS (
        UPDATE pgqueue_job_dependency d SET cascaded = true
        FROM first f WHERE d.child_id = f.child_id AND d.parent_id = f.parent_id
    )
    UPDATE pgqueue_job c SET status = 'cancelled', finished_at = now(),
        last_error = 'Cancelled without running: job #' || f.parent_id || ', which it waited '
            || 'for, ' || CASE WHEN f.parent_id = parent THEN why
                          ELSE 'was cancelled (job #' || parent || ' ' || why || ')' END
    FROM first f WHERE c.id = f.child_id AND c.status = 'waiting';
END;
$$;

-- What the status of a job with dependents going from `old_status` (NULL: an edge just
-- committed) to `new_status` does to them (or only to `only_child`): a completion counts in each
-- child's parents_left, and the child whose last parent it was becomes pending (and a worker is
-- woken); a dead or cancelled end cancels them; a completion undone counts again; a failed end
-- undone (a retry) puts back the children it cancelled.
CREATE FUNCTION pgqueue_flow_settle(
    parent bigint, old_status text, new_status text, only_child bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    queues text[];
    counts integer[];
    tickets bigint[];
    restored bigint[];
    failed record;
BEGIN
    IF old_status = 'completed' AND new_status <> 'completed' THEN
        WITH e AS (
            UPDATE pgqueue_job_dependency d SET satisfied = false
            WHERE d.parent_id = parent AND d.satisfied
            RETURNING d.child_id
        )
        UPDATE pgqueue_job c SET parents_left = c.parents_left + 1,
            status = CASE WHEN c.status = 'pending' AND c.attempts = 0 THEN 'waiting'
                     ELSE c.status END
        FROM e WHERE c.id = e.child_id;
    END IF;
    IF old_status IN ('dead', 'cancelled') AND new_status NOT IN ('dead', 'cancelled') THEN
        WITH RECURSIVE r(parent_id, child_id) AS (
            SELECT d.parent_id, d.child_id FROM pgqueue_job_dependency d
            WHERE d.parent_id = parent AND d.cascaded
            UNION
            SELECT d.parent_id, d.child_id FROM r
            JOIN pgqueue_job_dependency d ON d.parent_id = r.child_id AND d.cascaded
        ), cleared AS (
            UPDATE pgqueue_job_dependency d SET cascaded = false
            FROM r WHERE d.child_id = r.child_id AND d.parent_id = r.parent_id
        ), back AS (
            UPDATE pgqueue_job c SET status = 'waiting', finished_at = NULL, last_error = ''
            FROM (SELECT DISTINCT child_id FROM r) x
            WHERE c.id = x.child_id AND c.status = 'cancelled'
            RETURNING c.id
        )
        SELECT array_agg(id) INTO restored FROM back;
        -- A child put back that waits for another parent that failed is cancelled by that one.
        FOR failed IN
            SELECT d.parent_id, d.child_id, p.status FROM pgqueue_job_dependency d
            JOIN pgqueue_job p ON p.id = d.parent_id
            WHERE d.child_id = ANY(coalesce(restored, '{}')) AND p.status IN ('dead', 'cancelled')
        LOOP
            PERFORM pgqueue_flow_cancel(failed.parent_id, 'ended ' || failed.status,
                                        failed.child_id);
        END LOOP;
    END IF;
    IF new_status = 'completed' THEN
        WITH e AS (
            UPDATE pgqueue_job_dependency d SET satisfied = true
            WHERE d.parent_id = parent AND NOT d.satisfied
              AND (only_child IS NULL OR d.child_id = only_child)
            RETURNING d.child_id
        ), released AS (
            UPDATE pgqueue_job c SET parents_left = c.parents_left - 1,
                status = CASE WHEN c.status = 'waiting' AND c.parents_left <= 1 THEN 'pending'
                         ELSE c.status END
            FROM e WHERE c.id = e.child_id
            RETURNING c.id, c.queue, c.status
        )
        SELECT array_agg(q.queue), array_agg(q.n), array_agg(q.first)
        INTO queues, counts, tickets
        FROM (SELECT queue, count(*)::integer AS n, min(id) AS first FROM released
              WHERE status = 'pending' GROUP BY queue) q;
        IF queues IS NOT NULL THEN
            PERFORM pgqueue_wake(queues, counts, tickets);
        END IF;
    ELSIF new_status IN ('dead', 'cancelled') AND old_status IS DISTINCT FROM new_status THEN
        PERFORM pgqueue_flow_cancel(parent, 'ended ' || new_status, only_child);
    END IF;
END;
$$;

CREATE FUNCTION pgqueue_flow_parent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgqueue_flow_settle(NEW.id, OLD.status, NEW.status, NULL);
    RETURN NULL;
END;
$$;
-- Only jobs with dependents, only into or out of an end: a claim, a plain job's finish, a
-- heartbeat never call it.
CREATE TRIGGER pgqueue_job_flow_parent
    AFTER UPDATE OF status ON pgqueue_job
    FOR EACH ROW WHEN (NEW.dependents AND OLD.status IS DISTINCT FROM NEW.status AND (
        NEW.status IN ('completed', 'dead', 'cancelled')
        OR OLD.status IN ('completed', 'dead', 'cancelled')))
    EXECUTE FUNCTION pgqueue_flow_parent();

-- An edge, as its transaction commits: the parent is marked (its status changes look for its
-- dependents from now on) under its row lock, and what it already is applies to the child. The
-- lock makes the two orders the only ones: the parent's outcome committed first (seen here,
-- applied here), or this edge committed first (the outcome's trigger finds it). Held from the
-- commit's start to its end only: a worker finishing the parent waits that long at most.
CREATE FUNCTION pgqueue_flow_edge() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    parent_status text;
BEGIN
    SELECT status INTO parent_status FROM pgqueue_job WHERE id = NEW.parent_id
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job #% (which job #% was enqueued after) no longer exists',
            NEW.parent_id, NEW.child_id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'A parent must exist until its dependents are committed: pruned, '
                         'deleted, or completed under PGQUEUE_RETENTION = 0.';
    END IF;
    UPDATE pgqueue_job SET dependents = true WHERE id = NEW.parent_id AND NOT dependents;
    PERFORM pgqueue_flow_settle(NEW.parent_id, NULL, parent_status, NEW.child_id);
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER pgqueue_dependency_commit
    AFTER INSERT ON pgqueue_job_dependency
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION pgqueue_flow_edge();

-- A job with parents not all completed is never made pending (a retry by hand of a child
-- its parent's end cancelled): it waits again, or stays cancelled if a parent failed.
CREATE FUNCTION pgqueue_flow_hold() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    failed record;
BEGIN
    SELECT d.parent_id, p.status INTO failed FROM pgqueue_job_dependency d
    LEFT JOIN pgqueue_job p ON p.id = d.parent_id
    WHERE d.child_id = NEW.id AND NOT d.satisfied
      AND (p.id IS NULL OR p.status IN ('dead', 'cancelled'))
    ORDER BY d.parent_id LIMIT 1;
    IF FOUND THEN
        NEW.status := 'cancelled';
        NEW.finished_at := now();
        NEW.last_error := 'Cancelled without running: job #' || failed.parent_id || ', which it '
            || 'waited for, ' || coalesce('ended ' || failed.status, 'was deleted');
    ELSE
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER pgqueue_job_flow_hold
    BEFORE UPDATE OF status ON pgqueue_job
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending' AND NEW.parents_left > 0)
    EXECUTE FUNCTION pgqueue_flow_hold();

-- Batches. A sealed batch's members are counted by buckets of 128 ids (pgqueue_batch_tally):
-- a member's end writes its bucket's row, and the batch's row only when the bucket ends (or
-- opens again), so no row takes a write per member (under a pinned xmin horizon each write
-- leaves a version every later one walks).

-- Sealed batch `b`'s bucket changed by (`d_unfinished`, `d_failed`) members to (`new_u`,
-- `new_f`): if it ended, opened again or changed its failing, the batch's row counts it, and
-- the batch finishes (or opens again).
CREATE FUNCTION pgqueue_batch_bucket(
    b bigint, new_u integer, new_f integer, d_unfinished integer, d_failed integer
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    d_open integer := (new_u > 0)::integer - (new_u - d_unfinished > 0)::integer;
    d_failing integer := (new_u = 0 AND new_f > 0)::integer
        - (new_u - d_unfinished = 0 AND new_f - d_failed > 0)::integer;
BEGIN
    IF d_open = 0 AND d_failing = 0 THEN
        RETURN;
    END IF;
    UPDATE pgqueue_batch SET buckets_left = buckets_left + d_open,
        failed_buckets = failed_buckets + d_failing,
        finished_at = CASE WHEN buckets_left + d_open > 0 THEN NULL ELSE finished_at END
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

-- Batch `b`'s member `member` went from `old_status` to `new_status` (a delete; a member of a
-- batch not sealed as its trigger's statement saw it).
CREATE FUNCTION pgqueue_batch_count(b bigint, member bigint, old_status text, new_status text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    d_unfinished integer := (new_status NOT IN ('completed', 'dead', 'cancelled'))::integer
        - (old_status NOT IN ('completed', 'dead', 'cancelled'))::integer;
    d_failed integer := (new_status IN ('dead', 'cancelled'))::integer
        - (old_status IN ('dead', 'cancelled'))::integer;
    sealed boolean;
    new_u integer;
    new_f integer;
BEGIN
    IF d_unfinished = 0 AND d_failed = 0 THEN
        RETURN;
    END IF;
    UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
        failed = failed + d_failed
    WHERE batch_id = b AND bucket = member / 128
    RETURNING unfinished, failed INTO new_u, new_f;
    IF NOT FOUND THEN
        -- Not sealed as this statement saw it (its tally rows come with the seal), or gone:
        -- wait for a seal under way and look again. A seal that starts later counts this
        -- member as this transaction leaves it.
        SELECT sealed_at IS NOT NULL INTO sealed FROM pgqueue_batch WHERE id = b FOR SHARE;
        IF sealed IS NULL OR NOT sealed THEN
            RETURN;
        END IF;
        UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
            failed = failed + d_failed
        WHERE batch_id = b AND bucket = member / 128
        RETURNING unfinished, failed INTO new_u, new_f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pgqueue_batch_bucket(b, new_u, new_f, d_unfinished, d_failed);
END;
$$;

-- Batch `b`, sealed with no bucket left, finishes: its callbacks are enqueued, once (the row
-- lock and `finished_at IS NULL`), and recorded in `fired`.
CREATE FUNCTION pgqueue_batch_finish(b bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bt record;
    cb record;
    new_id bigint;
    v_fired jsonb := '[]';
BEGIN
    UPDATE pgqueue_batch SET finished_at = now()
    WHERE id = b AND sealed_at IS NOT NULL AND finished_at IS NULL AND buckets_left = 0
    RETURNING * INTO bt;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR cb IN
        SELECT c.callback, c.sig FROM (VALUES
            (1, 'on_success', CASE WHEN bt.failed_buckets = 0 THEN bt.on_success END),
            (2, 'on_failure', CASE WHEN bt.failed_buckets > 0 THEN bt.on_failure END),
            (3, 'on_complete', bt.on_complete)) AS c(n, callback, sig)
        WHERE c.sig IS NOT NULL AND c.sig <> 'null'::jsonb
        ORDER BY c.n
    LOOP
        INSERT INTO pgqueue_job (queue, name, args, kwargs, priority, max_attempts, callback_of)
        VALUES (cb.sig ->> 'queue', cb.sig ->> 'name', cb.sig -> 'args', cb.sig -> 'kwargs',
                (cb.sig ->> 'priority')::smallint, (cb.sig ->> 'max_attempts')::integer, b)
        RETURNING id INTO new_id;
        v_fired := v_fired || jsonb_build_object('callback', cb.callback, 'job', new_id,
                                                 'at', now());
    END LOOP;
    UPDATE pgqueue_batch SET fired = fired || v_fired WHERE id = b;
END;
$$;

-- Batch `b`'s block closed and its members are committed: count them, and finish it if none
-- is active (an empty batch finishes here). Under the batch's row lock: a member ending while
-- the batch was not sealed waits for this (pgqueue_batch_count), and is counted as it ended.
CREATE FUNCTION pgqueue_batch_seal(b bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgqueue_batch SET sealed_at = now() WHERE id = b AND sealed_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO pgqueue_batch_tally (batch_id, bucket, unfinished, failed)
    SELECT b, j.id / 128,
           count(*) FILTER (WHERE j.status NOT IN ('completed', 'dead', 'cancelled')),
           count(*) FILTER (WHERE j.status IN ('dead', 'cancelled'))
    FROM pgqueue_job j WHERE j.batch_id = b
    GROUP BY j.id / 128;
    UPDATE pgqueue_batch SET
        buckets_left = (SELECT count(*) FROM pgqueue_batch_tally t
                        WHERE t.batch_id = b AND t.unfinished > 0),
        failed_buckets = (SELECT count(*) FROM pgqueue_batch_tally t
                          WHERE t.batch_id = b AND t.unfinished = 0 AND t.failed > 0)
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

-- A member's end (or its retry): its bucket's row, the one write of the common case, in the
-- trigger itself (a function call per member costs as much as the write).
CREATE FUNCTION pgqueue_batch_member() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d_unfinished integer := (NEW.status NOT IN ('completed', 'dead', 'cancelled'))::integer
        - (OLD.status NOT IN ('completed', 'dead', 'cancelled'))::integer;
    d_failed integer := (NEW.status IN ('dead', 'cancelled'))::integer
        - (OLD.status IN ('dead', 'cancelled'))::integer;
    new_u integer;
    new_f integer;
BEGIN
    IF d_unfinished = 0 AND d_failed = 0 THEN
        RETURN NULL;
    END IF;
    UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
        failed = failed + d_failed
    WHERE batch_id = NEW.batch_id AND bucket = NEW.id / 128
    RETURNING unfinished, failed INTO new_u, new_f;
    IF NOT FOUND THEN
        PERFORM pgqueue_batch_count(NEW.batch_id, NEW.id, OLD.status, NEW.status);
    ELSIF (new_u > 0) <> (new_u - d_unfinished > 0) OR new_u = 0 THEN
        PERFORM pgqueue_batch_bucket(NEW.batch_id, new_u, new_f, d_unfinished, d_failed);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_batch_member
    AFTER UPDATE OF status ON pgqueue_job
    FOR EACH ROW WHEN (NEW.batch_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status AND (
        NEW.status IN ('completed', 'dead', 'cancelled')
        OR OLD.status IN ('completed', 'dead', 'cancelled')))
    EXECUTE FUNCTION pgqueue_batch_member();

-- A batch deleted (the admin, by hand): its tally goes with it; its members count for nothing.
CREATE FUNCTION pgqueue_batch_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_batch_tally t USING deleted d WHERE t.batch_id = d.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_batch_delete
    AFTER DELETE ON pgqueue_batch
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_batch_delete();

-- A job deleted: an unfinished parent's waiting dependents can never run (cancelled); a
-- child's edges go with it; an unfinished member counts as ended, failed.
CREATE FUNCTION pgqueue_flow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.dependents AND OLD.status IN ('waiting', 'pending', 'running') THEN
        PERFORM pgqueue_flow_cancel(OLD.id, 'was deleted', NULL);
    END IF;
    IF OLD.parents_left IS NOT NULL THEN
        DELETE FROM pgqueue_job_dependency WHERE child_id = OLD.id;
    END IF;
    IF OLD.batch_id IS NOT NULL AND OLD.status IN ('waiting', 'pending', 'running') THEN
        PERFORM pgqueue_batch_count(OLD.batch_id, OLD.id, OLD.status, 'cancelled');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_flow_delete
    AFTER DELETE ON pgqueue_job
    FOR EACH ROW WHEN (OLD.dependents OR OLD.parents_left IS NOT NULL OR OLD.batch_id IS NOT NULL)
    EXECUTE FUNCTION pgqueue_flow_delete();
"""

BACKWARD = """
DROP TRIGGER pgqueue_batch_delete ON pgqueue_batch;
DROP FUNCTION pgqueue_batch_delete();
DROP TRIGGER pgqueue_job_flow_delete ON pgqueue_job;
DROP TRIGGER pgqueue_job_batch_member ON pgqueue_job;
DROP TRIGGER pgqueue_job_flow_hold ON pgqueue_job;
DROP TRIGGER pgqueue_dependency_commit ON pgqueue_job_dependency;
DROP TRIGGER pgqueue_job_flow_parent ON pgqueue_job;
DROP FUNCTION pgqueue_flow_delete();
DROP FUNCTION pgqueue_batch_member();
DROP FUNCTION pgqueue_batch_seal(bigint);
DROP FUNCTION pgqueue_batch_finish(bigint);
DROP FUNCTION pgqueue_batch_count(bigint, bigint, text, text);
DROP FUNCTION pgqueue_batch_bucket(bigint, integer, integer, integer, integer);
DROP FUNCTION pgqueue_flow_hold();
DROP FUNCTION pgqueue_flow_edge();
DROP FUNCTION pgqueue_flow_parent();
DROP FUNCTION pgqueue_flow_settle(bigint, text, text, bigint);
DROP FUNCTION pgqueue_flow_cancel(bigint, text, bigint);
"""

STATUS_CHECK = """
ALTER TABLE pgqueue_job DROP CONSTRAINT pgqueue_job_status_valid,
    ADD CONSTRAINT pgqueue_job_status_valid CHECK (
        status IN ('pending', 'waiting', 'running', 'completed', 'dead', 'cancelled')) NOT VALID;
"""
STATUS_CHECK_BACKWARD = """
ALTER TABLE pgqueue_job DROP CONSTRAINT pgqueue_job_status_valid,
    ADD CONSTRAINT pgqueue_job_status_valid CHECK (
        status IN ('pending', 'running', 'completed', 'dead', 'cancelled'));
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0021_job_kind"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "description",
                    models.CharField(blank=True, db_default="", default="", max_length=255),
                ),
                (
                    "on_success",
                    models.JSONField(blank=True, help_text="Enqueued if all completed.", null=True),
                ),
                (
                    "on_failure",
                    models.JSONField(
                        blank=True, help_text="Enqueued if any ended dead or cancelled.", null=True
                    ),
                ),
                (
                    "on_complete",
                    models.JSONField(blank=True, help_text="Enqueued in either case.", null=True),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
                (
                    "sealed_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="Its block closed and its members were committed.",
                        null=True,
                    ),
                ),
                (
                    "finished_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="Every member ended; its callbacks were enqueued.",
                        null=True,
                    ),
                ),
                (
                    "buckets_left",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        help_text="Buckets of members with some still active.",
                    ),
                ),
                (
                    "failed_buckets",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        help_text="Ended buckets with a dead or cancelled member.",
                    ),
                ),
                (
                    "fired",
                    models.JSONField(
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text="Callbacks enqueued: [{callback, job, at}], one entry per finish.",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "batches",
                "db_table": "pgqueue_batch",
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="BatchTally",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("bucket", models.BigIntegerField()),
                ("unfinished", models.IntegerField()),
                ("failed", models.IntegerField()),
            ],
            options={
                "db_table": "pgqueue_batch_tally",
            },
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("satisfied", models.BooleanField(db_default=False, default=False)),
                ("cascaded", models.BooleanField(db_default=False, default=False)),
            ],
            options={
                "db_table": "pgqueue_job_dependency",
            },
        ),
        migrations.AddField(
            model_name="job",
            name="dependents",
            field=models.BooleanField(
                db_default=False,
                default=False,
                editable=False,
                help_text="Jobs wait for it: its end releases or cancels them.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="parents_left",
            field=models.IntegerField(
                blank=True,
                editable=False,
                help_text="Of the jobs it was enqueued after, how many have not completed (NULL: it waits for none); it is waiting while this is above 0.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("waiting", "Waiting"),
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
        migrations.AddField(
            model_name="job",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                help_text="The batch it is a member of.",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="members",
                to="django_pgqueue.batch",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="callback_of",
            field=models.ForeignKey(
                blank=True,
                db_column="callback_of",
                db_constraint=False,
                db_index=False,
                editable=False,
                help_text="The batch whose end enqueued it (a callback).",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="callback_jobs",
                to="django_pgqueue.batch",
            ),
        ),
        # The status CHECK takes `waiting` in without reading the table under this
        # transaction's lock: NOT VALID here, validated by 0023 in a transaction of its own.
        migrations.RunSQL(
            STATUS_CHECK,
            STATUS_CHECK_BACKWARD,
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="pgqueue_job_status_valid"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                ["pending", "waiting", "running", "completed", "dead", "cancelled"],
                            )
                        ),
                        name="pgqueue_job_status_valid",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="batchtally",
            name="batch",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                to="django_pgqueue.batch",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="child",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="parent_links",
                to="django_pgqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="parent",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="child_links",
                to="django_pgqueue.job",
            ),
        ),
        migrations.AddConstraint(
            model_name="batchtally",
            constraint=models.UniqueConstraint(
                models.F("batch"), models.F("bucket"), name="pgqueue_batch_tally_bucket"
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.UniqueConstraint(
                models.F("child"), models.F("parent"), name="pgqueue_dependency_edge"
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["finished_at"],
                name="pgqueue_batch_finished",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
