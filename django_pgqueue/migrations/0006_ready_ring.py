"""The ready ring: runnable jobs apart from the job rows, so the claim never walks the job
table's dead index entries (``django_pgqueue.sql.ready`` describes it). Pending jobs of an
existing table get their ready rows here; nothing else of the job table changes.

The SQL is frozen as it ran: the statements of ``sql/`` may change, this migration never does.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE TABLE pgqueue_ready (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue varchar(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamptz NOT NULL,
    concurrency_key varchar(255)
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
CREATE INDEX pgqueue_ready_claim ON pgqueue_ready (priority DESC, run_after, job_id);
CREATE INDEX pgqueue_ready_claim_queue ON pgqueue_ready (queue, priority DESC, run_after, job_id);
CREATE INDEX pgqueue_ready_job ON pgqueue_ready (job_id);
CREATE INDEX pgqueue_ready_later_due ON pgqueue_ready_later (run_after);

-- clock_timestamp(), not now(): a run_after set a moment ago (run now) is due, whenever the
-- transaction began.
CREATE FUNCTION pgqueue_ready_slot(job_id bigint, run_after timestamptz) RETURNS smallint
LANGUAGE sql VOLATILE AS $$
    SELECT (CASE WHEN run_after > clock_timestamp() THEN -1
            ELSE (job_id / 4096) % 8 END)::smallint
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key
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
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key)
    VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority, NEW.run_after, NEW.concurrency_key);
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON pgqueue_job;
CREATE TRIGGER pgqueue_job_ready_update
    AFTER UPDATE OF status, queue, priority, run_after, concurrency_key ON pgqueue_job
    FOR EACH ROW WHEN (NEW.status = 'pending' AND (
        OLD.status <> 'pending'
        OR OLD.queue IS DISTINCT FROM NEW.queue
        OR OLD.priority IS DISTINCT FROM NEW.priority
        OR OLD.run_after IS DISTINCT FROM NEW.run_after
        OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key))
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
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;

CREATE TRIGGER pgqueue_job_ready_insert
    AFTER INSERT ON pgqueue_job REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_ready_insert();

-- Deleted pending jobs take their ready rows with them (prune deletes finished jobs only: its
-- transition table holds no pending row), and TRUNCATE of the job table empties the ring.

CREATE OR REPLACE FUNCTION pgqueue_ready_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready
    WHERE job_id = ANY(ARRAY(SELECT id FROM deleted WHERE status = 'pending'));
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

-- Pending jobs of a table made before the ring.
INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key)
SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key
FROM pgqueue_job WHERE status = 'pending';
"""

BACKWARD = """
DROP TRIGGER IF EXISTS pgqueue_job_ready_truncate ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_delete ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_update ON pgqueue_job;
DROP TRIGGER IF EXISTS pgqueue_job_ready_insert ON pgqueue_job;
DROP FUNCTION IF EXISTS pgqueue_ready_recycle(integer);
DROP FUNCTION IF EXISTS pgqueue_ready_truncate();
DROP FUNCTION IF EXISTS pgqueue_ready_delete();
DROP FUNCTION IF EXISTS pgqueue_ready_update();
DROP FUNCTION IF EXISTS pgqueue_ready_insert();
DROP TABLE IF EXISTS pgqueue_ready;
DROP FUNCTION IF EXISTS pgqueue_ready_slot(bigint, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0005_limits")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
