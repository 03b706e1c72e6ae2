"""Rows of paused queues leave the ready ring for a partition of their own
(``pgqueue_ready_parked``): claims stop stepping over a paused queue's backlog, and the ring's
slots can be truncated while it waits. Rows of queues paused at the time move there; going
back puts every parked row into the ring again.

The SQL is frozen as it ran: the statements of ``sql/`` may change, this migration never does.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE TABLE pgqueue_ready_parked PARTITION OF pgqueue_ready FOR VALUES IN (-2);
CREATE INDEX pgqueue_ready_parked_job ON pgqueue_ready_parked (job_id);

CREATE OR REPLACE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit
    FROM inserted WHERE status = 'pending';
    RETURN NULL;
END;
$$;

-- A job became pending (retry, release, hand-back) or pending with a new run_after (run now):
-- its row goes where its run_after says. A later (or parked) row it had is replaced; a ring row
-- it may still have is left to the claim, which deletes rows whose job is not pending and due.
CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'pending' THEN
        DELETE FROM pgqueue_ready WHERE slot IN (-1, -2) AND job_id = OLD.id;
    END IF;
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority, NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit);
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON pgqueue_job;
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

-- TRUNCATE a ring slot that inserts have moved past: its dead tuples go with it, whatever the
-- xmin horizon. Under ACCESS EXCLUSIVE (NOWAIT: a slot in use is left for the next round), so
-- no insert or claim can be in flight on it. A slot with a few rows left (at most
-- 256) is cleared of those whose jobs are gone or no longer pending, and the rest move to
-- the slot inserts go to now; one with more is still draining and is left alone.
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
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;


WITH m AS (DELETE FROM pgqueue_ready r WHERE r.slot >= 0 AND r.queue IN (SELECT name FROM pgqueue_queue WHERE paused) RETURNING r.*)
INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
SELECT -2, m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key, m.concurrency_limit FROM m
;
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

-- A job became pending (retry, release, hand-back) or pending with a new run_after (run now):
-- its row goes where its run_after says. A later (or parked) row it had is replaced; a ring row
-- it may still have is left to the claim, which deletes rows whose job is not pending and due.
CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'pending' THEN
        DELETE FROM pgqueue_ready WHERE slot = -1 AND job_id = OLD.id;
    END IF;
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
    VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority, NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit);
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON pgqueue_job;
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

-- TRUNCATE a ring slot that inserts have moved past: its dead tuples go with it, whatever the
-- xmin horizon. Under ACCESS EXCLUSIVE (NOWAIT: a slot in use is left for the next round), so
-- no insert or claim can be in flight on it. A slot with a few rows left (at most
-- 256) is cleared of those whose jobs are gone or no longer pending, and the rest move to
-- the slot inserts go to now; one with more is still draining and is left alone.
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
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;


WITH m AS (DELETE FROM pgqueue_ready r WHERE r.slot = -2 RETURNING r.*)
INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
SELECT pgqueue_ready_slot(m.job_id, m.run_after), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key, m.concurrency_limit FROM m
;
DROP TABLE pgqueue_ready_parked;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0007_ready_limits")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
