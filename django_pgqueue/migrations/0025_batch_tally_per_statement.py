"""Batch members are counted once per statement, not once per member (B1 in docs/storage.md).

``0022_workflows`` counted each member's end in a row trigger: an ``UPDATE`` of its bucket's
tally row, at the end of the outcome statement, one member after the other. Two workers'
claims interleave ids (each skips the rows the other is locking), so their outcome statements
end members of the same buckets: each waited for the other's whole run of member triggers and
its commit, bucket after bucket, and two of them taking buckets in different orders deadlocked.
A 10,000-member batch drained 1.2-2.8 times slower than 10,000 plain jobs on 2 processes.

Now a statement trigger reads the statement's changed rows (its transition tables), counts its
members' ends per bucket, and writes each bucket once, in the order of (batch, bucket), then
each batch's row once (when some bucket ended or opened again): the tally rows are locked for
the few writes at the end of the statement, always in the same order. What it counts, and the
batch's finish (its callbacks enqueued once, in the transaction of the last member's outcome,
under the batch's row lock), are as before. A delete still counts by the row trigger
``pgqueue_job_flow_delete`` (rare: one at a time).

The statement trigger fires for every ``UPDATE`` of the job table (a trigger with transition
tables takes no column list nor ``WHEN``): a statement that moves no batch member into or out
of an end costs a scan of its old and new rows.

Only functions and triggers change: no lock on the job table beyond the trigger's own creation.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = r"""
DROP TRIGGER pgqueue_job_batch_member ON pgqueue_job;
DROP FUNCTION pgqueue_batch_member();

-- Sealed batch `b`'s bucket `bucket` changed by (`d_unfinished`, `d_failed`) members: its
-- tally row, and what that did to the batch's counts (`d_open`: the bucket opened (1) or
-- ended (-1); `d_failing`: it became (1) or stopped being (-1) an ended bucket with a failed
-- member). A batch not sealed as this statement saw it (its tally rows come with the seal):
-- wait for a seal under way (the batch's row FOR SHARE) and look again; a seal that starts
-- later counts these members as this transaction leaves them.
CREATE FUNCTION pgqueue_batch_tally_add(
    b bigint, bucket_no bigint, d_unfinished integer, d_failed integer,
    OUT d_open integer, OUT d_failing integer
) LANGUAGE plpgsql AS $$
DECLARE
    sealed boolean;
    new_u integer;
    new_f integer;
BEGIN
    d_open := 0;
    d_failing := 0;
    UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
        failed = failed + d_failed
    WHERE batch_id = b AND bucket = bucket_no
    RETURNING unfinished, failed INTO new_u, new_f;
    IF NOT FOUND THEN
        SELECT sealed_at IS NOT NULL INTO sealed FROM pgqueue_batch WHERE id = b FOR SHARE;
        IF sealed IS NULL OR NOT sealed THEN
            RETURN;
        END IF;
        UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
            failed = failed + d_failed
        WHERE batch_id = b AND bucket = bucket_no
        RETURNING unfinished, failed INTO new_u, new_f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    d_open := (new_u > 0)::integer - (new_u - d_unfinished > 0)::integer;
    d_failing := (new_u = 0 AND new_f > 0)::integer
        - (new_u - d_unfinished = 0 AND new_f - d_failed > 0)::integer;
END;
$$;

-- A statement's members' ends (or retries), counted per bucket: each bucket's tally row once,
-- in the order of (batch, bucket), then the batch's row once if a bucket ended or opened again;
-- the batch that ends enqueues its callbacks (pgqueue_batch_finish). One order for every
-- statement: two never wait for each other in a circle.
CREATE FUNCTION pgqueue_batch_members() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g record;
    t record;
    cur bigint := NULL;
    opened integer := 0;
    failing integer := 0;
BEGIN
    -- Most statements end no member (a plain job's claim or outcome, a member's claim or
    -- heartbeat): two scans of the rows it changed, and nothing else.
    IF NOT EXISTS (SELECT 1 FROM pgqueue_new_rows
                   WHERE batch_id IS NOT NULL AND status IN ('completed', 'dead', 'cancelled'))
       AND NOT EXISTS (SELECT 1 FROM pgqueue_old_rows
                       WHERE batch_id IS NOT NULL AND status IN ('completed', 'dead', 'cancelled'))
    THEN
        RETURN NULL;
    END IF;
    FOR g IN
        SELECT n.batch_id AS b, n.id / 128 AS bucket,
            sum((n.status NOT IN ('completed', 'dead', 'cancelled'))::integer
                - (o.status NOT IN ('completed', 'dead', 'cancelled'))::integer)::integer AS d_u,
            sum((n.status IN ('dead', 'cancelled'))::integer
                - (o.status IN ('dead', 'cancelled'))::integer)::integer AS d_f
        FROM pgqueue_new_rows n JOIN pgqueue_old_rows o ON o.id = n.id
        WHERE n.batch_id IS NOT NULL AND o.status IS DISTINCT FROM n.status
          AND (n.status IN ('completed', 'dead', 'cancelled')
               OR o.status IN ('completed', 'dead', 'cancelled'))
        GROUP BY 1, 2
        ORDER BY 1, 2
    LOOP
        IF g.d_u = 0 AND g.d_f = 0 THEN
            CONTINUE;
        END IF;
        IF cur IS DISTINCT FROM g.b THEN
            IF cur IS NOT NULL AND (opened <> 0 OR failing <> 0) THEN
                PERFORM pgqueue_batch_counted(cur, opened, failing);
            END IF;
            cur := g.b;
            opened := 0;
            failing := 0;
        END IF;
        SELECT * INTO t FROM pgqueue_batch_tally_add(g.b, g.bucket, g.d_u, g.d_f);
        opened := opened + t.d_open;
        failing := failing + t.d_failing;
    END LOOP;
    IF cur IS NOT NULL AND (opened <> 0 OR failing <> 0) THEN
        PERFORM pgqueue_batch_counted(cur, opened, failing);
    END IF;
    RETURN NULL;
END;
$$;

-- Batch `b`'s buckets left changed by `d_open`, its failed buckets by `d_failing`: its row,
-- and its finish when none is left (or its opening again).
CREATE FUNCTION pgqueue_batch_counted(b bigint, d_open integer, d_failing integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgqueue_batch SET buckets_left = buckets_left + d_open,
        failed_buckets = failed_buckets + d_failing,
        finished_at = CASE WHEN buckets_left + d_open > 0 THEN NULL ELSE finished_at END
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

CREATE TRIGGER pgqueue_job_batch_members
    AFTER UPDATE ON pgqueue_job
    REFERENCING OLD TABLE AS pgqueue_old_rows NEW TABLE AS pgqueue_new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue_batch_members();
"""

BACKWARD = r"""
DROP TRIGGER pgqueue_job_batch_members ON pgqueue_job;
DROP FUNCTION pgqueue_batch_members();
DROP FUNCTION pgqueue_batch_counted(bigint, integer, integer);
DROP FUNCTION pgqueue_batch_tally_add(bigint, bigint, integer, integer);

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
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0024_batch_callback_kind")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
