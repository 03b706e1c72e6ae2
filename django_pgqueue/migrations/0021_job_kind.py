"""Async jobs (issue 34): ``pgqueue_job.is_async``, the job's kind, true for an ``async def``
job (written by ``enqueue()`` from the function's kind), and its copy on every ready row, so
that a claim takes as many async jobs as its worker's event loop has room for and as many sync
jobs as it has free threads (``sql.claim``), each kind from the ring apart.

The ready row copies it like the other columns the claims choose by (S2 in docs/storage.md):
the four functions that write ready rows name it now, and an UPDATE of it moves the job's
ready row along like one of theirs (``pgqueue_job_ready_update``). Async rows have partial indexes of their
own in the ring, in the claims' order: a claim for async jobs reads only those (none at all
where no async job waits), never steps over a backlog of sync ones.

A constant default: adding the columns rewrites no row, every job enqueued so far is sync, and
a worker of an older version (which does not name the column) still inserts jobs, as sync.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = """
ALTER TABLE pgqueue_job ADD COLUMN is_async boolean NOT NULL DEFAULT false;
ALTER TABLE pgqueue_ready ADD COLUMN is_async boolean NOT NULL DEFAULT false;
CREATE INDEX pgqueue_ready_async ON pgqueue_ready (priority DESC, run_after, job_id)
    WHERE is_async;
CREATE INDEX pgqueue_ready_async_queue ON pgqueue_ready (queue, priority DESC, run_after, job_id)
    WHERE is_async;

CREATE OR REPLACE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async
    FROM inserted WHERE status = 'pending';
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready WHERE job_id = OLD.id;
    IF NEW.status = 'pending' THEN
        INSERT INTO pgqueue_ready
            (slot, job_id, queue, priority, run_after, concurrency_key, rate_key,
             concurrency_limit, is_async)
        VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority,
                NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit,
                NEW.is_async);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER pgqueue_job_ready_update ON pgqueue_job;
CREATE TRIGGER pgqueue_job_ready_update
AFTER UPDATE OF status, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit,
    is_async
ON pgqueue_job FOR EACH ROW
WHEN ((OLD.status = 'pending' OR NEW.status = 'pending') AND NEW.status <> 'running'
      AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.queue IS DISTINCT FROM NEW.queue
           OR OLD.priority IS DISTINCT FROM NEW.priority
           OR OLD.run_after IS DISTINCT FROM NEW.run_after
           OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key
           OR OLD.rate_key IS DISTINCT FROM NEW.rate_key
           OR OLD.concurrency_limit IS DISTINCT FROM NEW.concurrency_limit
           OR OLD.is_async IS DISTINCT FROM NEW.is_async))
EXECUTE FUNCTION pgqueue_ready_update();

CREATE OR REPLACE FUNCTION pgqueue_ready_refill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH m AS (
        DELETE FROM pgqueue_ready_held h WHERE h.ctid = (
            SELECT ctid FROM pgqueue_ready_held
            WHERE (concurrency_key IS NOT NULL OR rate_key IS NOT NULL)
              AND coalesce('c:' || concurrency_key, 'r:' || rate_key)
                  = coalesce('c:' || OLD.concurrency_key, 'r:' || OLD.rate_key)
              AND NOT EXISTS (SELECT 1 FROM pgqueue_queue qc WHERE qc.name = queue AND qc.paused)
            ORDER BY priority DESC, run_after, job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING h.*)
    INSERT INTO pgqueue_ready
        (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit,
         is_async)
    SELECT mod(coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
        / 4096, 8), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key,
        m.concurrency_limit, m.is_async
    FROM m;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_recycle(ring_slot integer) RETURNS boolean
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
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;
"""

BACKWARD = """
CREATE OR REPLACE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit
    FROM inserted WHERE status = 'pending';
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready WHERE job_id = OLD.id;
    IF NEW.status = 'pending' THEN
        INSERT INTO pgqueue_ready
            (slot, job_id, queue, priority, run_after, concurrency_key, rate_key,
             concurrency_limit)
        VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority,
                NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER pgqueue_job_ready_update ON pgqueue_job;
CREATE TRIGGER pgqueue_job_ready_update
AFTER UPDATE OF status, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit
ON pgqueue_job FOR EACH ROW
WHEN ((OLD.status = 'pending' OR NEW.status = 'pending') AND NEW.status <> 'running'
      AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.queue IS DISTINCT FROM NEW.queue
           OR OLD.priority IS DISTINCT FROM NEW.priority
           OR OLD.run_after IS DISTINCT FROM NEW.run_after
           OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key
           OR OLD.rate_key IS DISTINCT FROM NEW.rate_key
           OR OLD.concurrency_limit IS DISTINCT FROM NEW.concurrency_limit))
EXECUTE FUNCTION pgqueue_ready_update();

CREATE OR REPLACE FUNCTION pgqueue_ready_refill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH m AS (
        DELETE FROM pgqueue_ready_held h WHERE h.ctid = (
            SELECT ctid FROM pgqueue_ready_held
            WHERE (concurrency_key IS NOT NULL OR rate_key IS NOT NULL)
              AND coalesce('c:' || concurrency_key, 'r:' || rate_key)
                  = coalesce('c:' || OLD.concurrency_key, 'r:' || OLD.rate_key)
              AND NOT EXISTS (SELECT 1 FROM pgqueue_queue qc WHERE qc.name = queue AND qc.paused)
            ORDER BY priority DESC, run_after, job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING h.*)
    INSERT INTO pgqueue_ready
        (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    SELECT mod(coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
        / 4096, 8), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key,
        m.concurrency_limit
    FROM m;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_recycle(ring_slot integer) RETURNS boolean
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

DROP INDEX pgqueue_ready_async_queue;
DROP INDEX pgqueue_ready_async;
ALTER TABLE pgqueue_ready DROP COLUMN is_async;
ALTER TABLE pgqueue_job DROP COLUMN is_async;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0020_wake_rota")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="is_async",
                    field=models.BooleanField(
                        default=False,
                        db_default=False,
                        editable=False,
                        help_text="An async def job: run on its worker's event loop.",
                    ),
                ),
            ],
        ),
    ]
