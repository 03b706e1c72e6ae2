"""The job table is the truth: a job's ready row follows every change of the job (docs/storage.md).

Before this migration, a pending job that left ``pending`` for anything but ``running``
(cancelled, dead, set by hand), or changed queue, keys or limits while pending, kept its ring
row: the update trigger only added a new row. Cancel then retry left two rows of one job, and a
row with an old queue ran the job while its new queue was paused.

* ``pgqueue_ready_job``: an index on ``job_id`` over every partition (the ring's slots had
  none since ``0007``), so a trigger finds a job's rows wherever they are. The later, parked
  and held partitions' own ``job_id`` indexes become its partitions.
* ``pgqueue_ready_update``: any change of a job's status, queue, priority, ``run_after``, keys
  or limit, into or out of ``pending``, deletes every ready row of the job and, if it is
  pending now, inserts the one it should have. A claim (``pending`` to ``running``) is left
  out: the claim deletes the ring row it takes in the same statement.
* ``pgqueue_ready_delete``: a deleted job takes its ready rows along, whatever its status.
* ``pgqueue_ready_refill``: a finish puts back the key group's next held row of a queue not
  paused (a paused queue's row first in line stopped the group in every other queue).
* Rows that disagree with their jobs today are repaired (docs/storage.md, S1-S3).

The SQL is frozen here: it is what this migration ran, whatever the package's code says later.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = r"""
-- The later, parked and held partitions' job_id indexes become this index's partitions.
CREATE INDEX pgqueue_ready_job ON pgqueue_ready (job_id);

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
    AFTER UPDATE OF status, queue, priority, run_after, concurrency_key, rate_key,
        concurrency_limit ON pgqueue_job
    FOR EACH ROW WHEN (
        (OLD.status = 'pending' OR NEW.status = 'pending') AND NEW.status <> 'running' AND (
            OLD.status IS DISTINCT FROM NEW.status
            OR OLD.queue IS DISTINCT FROM NEW.queue
            OR OLD.priority IS DISTINCT FROM NEW.priority
            OR OLD.run_after IS DISTINCT FROM NEW.run_after
            OR OLD.concurrency_key IS DISTINCT FROM NEW.concurrency_key
            OR OLD.rate_key IS DISTINCT FROM NEW.rate_key
            OR OLD.concurrency_limit IS DISTINCT FROM NEW.concurrency_limit))
    EXECUTE FUNCTION pgqueue_ready_update();

CREATE OR REPLACE FUNCTION pgqueue_ready_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready r USING deleted d WHERE r.job_id = d.id;
    RETURN NULL;
END;
$$;

-- A job of a key's group left running: the group's next held row of a queue not paused goes
-- into the ring (a paused queue's rows stay held, and are stepped over).
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

-- Rows of jobs that are gone or not pending, and rows that disagree with their job.
DELETE FROM pgqueue_ready r WHERE NOT EXISTS (
    SELECT 1 FROM pgqueue_job j
    WHERE j.id = r.job_id AND j.status = 'pending'
      AND (j.queue, j.priority, j.run_after, j.concurrency_key, j.rate_key, j.concurrency_limit)
          IS NOT DISTINCT FROM
          (r.queue, r.priority, r.run_after, r.concurrency_key, r.rate_key, r.concurrency_limit));
-- A second row of the same job.
DELETE FROM pgqueue_ready r USING pgqueue_ready o
WHERE o.job_id = r.job_id AND (o.slot, o.ctid) < (r.slot, r.ctid);
-- Pending jobs without a row.
INSERT INTO pgqueue_ready
    (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit)
SELECT pgqueue_ready_slot(j.id, j.run_after), j.id, j.queue, j.priority, j.run_after,
    j.concurrency_key, j.rate_key, j.concurrency_limit
FROM pgqueue_job j
WHERE j.status = 'pending' AND NOT EXISTS (SELECT 1 FROM pgqueue_ready r WHERE r.job_id = j.id);
"""

# 0011's functions and trigger, as they were.
BACKWARD = r"""

CREATE OR REPLACE FUNCTION pgqueue_ready_refill() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE OR REPLACE FUNCTION pgqueue_ready_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgqueue_ready r USING deleted d
    WHERE r.job_id = d.id AND d.status = 'pending';
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue_ready_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'pending' THEN
        DELETE FROM pgqueue_ready WHERE slot IN (-1, -2, -3) AND job_id = OLD.id;
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

DROP INDEX pgqueue_ready_job;
CREATE INDEX pgqueue_ready_later_job ON pgqueue_ready_later (job_id);
CREATE INDEX pgqueue_ready_parked_job ON pgqueue_ready_parked (job_id);
CREATE INDEX pgqueue_ready_held_job ON pgqueue_ready_held (job_id);
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0011_ready_held_queues")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
