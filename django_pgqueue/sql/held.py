"""The held partition of the ready ring: where a concurrency key's backlog waits.

A job with a concurrency key runs only while its key has a free place, and the claims step
over each ring row of a busy key that sorts before the rows they can take: 50,000 jobs waiting
for one busy key cost every claim 27 ms instead of under one. Under a pinned xmin horizon a
ring slot holding more of them than recycling moves on is never truncated either. So the ring
keeps only the first few rows of a key with many (:func:`kept`: a few more than the key's
concurrency limit), in the claims' order, and the rest wait in ``pgqueue_ready_held`` (slot
-3, since ``0009_ready_held``), which no claim reads (claims read ``slot >= 0``).

* The workers' upkeep (:data:`SWEEP`, with the promotion, about once a second per worker)
  holds a key's ring rows beyond its first :func:`kept` once it has twice that many (a batch
  at a time, by ``ctid``), and tops a key's ring rows up from its held ones when fewer are
  left: after ready rows were deleted for jobs no longer runnable, say. Held rows of paused
  queues stay.
* A job of a key leaving ``running`` (finished, failed, retried, handed back, deleted) puts the
  key's next held row into the ring, in its own transaction (the trigger
  ``pgqueue_job_ready_refill``): as many rows come back as leave, and a hot key runs as fast
  as before. Nothing fires for a job without a key.
* Put-back rows go to the slot inserts go to now, so they drain with the newest rows and never
  keep an old slot from being truncated.

Within a key, jobs start in the claims' order (priority, ``run_after``, id) as before: rows
are held from the end of the key's order and put back from the front. The exception: a job
enqueued into the ring while better ones of its key are held may start before them if the
key's ring rows run out before the next are put back (after many of them were cancelled).
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.sql.queues import not_paused
from django_pgqueue.sql.ready import (
    COLUMNS,
    HELD_SLOT,
    HELD_TABLE,
    INSERT_SLOT,
    READY_TABLE,
    RING_SLOTS,
    delete_taken,
    keep_rows,
)
from django_pgqueue.states import JobStatus

_RUNNING = f"'{JobStatus.RUNNING.value}'"
_COPIED = ", ".join(COLUMNS)
_MOVED = ", ".join(f"m.{c}" for c in COLUMNS)
_ORDER = "ORDER BY priority DESC, run_after, job_id"

#: Rows of a key the ring keeps besides twice its concurrency limit.
KEPT_PER_KEY = 8


def kept(limit: str) -> str:
    """How many ring rows a key keeps, for its ``concurrency_limit`` (the SQL ``limit``)."""
    return f"({KEPT_PER_KEY} + 2 * coalesce({limit}, 1))"


# The upkeep holds the ring rows of keys beyond their first :func:`kept`, a batch at a time
# (the parameter), for keys with more than twice that many (found on the ring's partial index
# of keyed rows): a key whose finishes and enqueues keep it near :func:`kept` is left alone,
# not held and put back row by row. The rows to move are locked ``SKIP LOCKED`` (a claim's are
# left for the next round).
_HOLD = f"""over AS MATERIALIZED (
    SELECT r.concurrency_key AS key, {kept("max(r.concurrency_limit)")} AS kept
    FROM {READY_TABLE} r WHERE r.slot >= 0 AND r.concurrency_key IS NOT NULL
    GROUP BY r.concurrency_key
    HAVING count(*) > 2 * {kept("max(r.concurrency_limit)")}
), gone AS MATERIALIZED (
    SELECT e.slot, e.row_id FROM over o CROSS JOIN LATERAL (
        SELECT r.slot, r.ctid AS row_id FROM {READY_TABLE} r
        WHERE r.slot >= 0 AND r.concurrency_key = o.key
        {_ORDER}
        OFFSET o.kept LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED) e
    LIMIT %(batch)s
){delete_taken("gone", returning=True)}, held_now AS (
    INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
    SELECT {HELD_SLOT}, m.job_id, {_MOVED}
    FROM ({" UNION ALL ".join(f"SELECT * FROM taken_{s}" for s in range(RING_SLOTS))}) m
)"""

# The upkeep puts back held rows of keys with fewer than :func:`kept` rows in the ring (their
# rows were deleted for jobs no longer runnable, or a hold raced a finish): per held key, found
# by a skip scan of the held partition, one probe of the ring's keyed index. Not for paused
# queues, whose rows would only be parked.
_REFILL = f"""held_keys AS (
    (SELECT concurrency_key AS key FROM {HELD_TABLE} WHERE concurrency_key IS NOT NULL
     ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT h.concurrency_key FROM {HELD_TABLE} h WHERE h.concurrency_key > k.key
            ORDER BY h.concurrency_key LIMIT 1)
    FROM held_keys k WHERE k.key IS NOT NULL
), short AS MATERIALIZED (
    SELECT k.key, first.kept - (
        SELECT count(*) FROM (SELECT 1 FROM {READY_TABLE} r
                              WHERE r.slot >= 0 AND r.concurrency_key = k.key
                              LIMIT first.kept) ring) AS room
    FROM held_keys k
    CROSS JOIN LATERAL (
        SELECT {kept("h.concurrency_limit")} AS kept, h.queue FROM {HELD_TABLE} h
        WHERE h.concurrency_key = k.key {_ORDER} LIMIT 1) first
    WHERE k.key IS NOT NULL AND {not_paused("first.queue")}
), m AS (
    DELETE FROM {HELD_TABLE} h WHERE h.ctid = ANY(ARRAY(
        SELECT x.ctid FROM short s CROSS JOIN LATERAL (
            SELECT ctid FROM {HELD_TABLE} WHERE concurrency_key = s.key {_ORDER}
            LIMIT greatest(s.room, 0) FOR UPDATE SKIP LOCKED) x))
    RETURNING h.*
), back AS (
    INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
    SELECT {INSERT_SLOT}, m.job_id, {_MOVED} FROM m
    RETURNING 1
)"""

#: The upkeep's one statement (both parts see the ring as it was when it began: a key is
#: either held, having more than twice its kept rows, or topped up, having fewer than them);
#: returns how many rows went back into the ring.
SWEEP = f"""
WITH RECURSIVE {_HOLD}, {_REFILL}
SELECT count(*) FROM back
"""

# A job of a key left ``running``: the key's next held row goes into the ring. By ``ctid`` of
# the held row (``SKIP LOCKED``: one an upkeep is moving is left to it).
_REFILL_ONE = f"""
CREATE OR REPLACE FUNCTION pgqueue_ready_refill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH m AS (
        DELETE FROM {HELD_TABLE} h WHERE h.ctid = (
            SELECT ctid FROM {HELD_TABLE} WHERE concurrency_key = OLD.concurrency_key
            {_ORDER} LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING h.*)
    INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
    SELECT {INSERT_SLOT}, m.job_id, {_MOVED} FROM m;
    RETURN NULL;
END;
$$;
CREATE TRIGGER pgqueue_job_ready_refill
    AFTER UPDATE OF status ON {TABLE} FOR EACH ROW
    WHEN (OLD.concurrency_key IS NOT NULL AND OLD.status = {_RUNNING}
          AND NEW.status <> {_RUNNING})
    EXECUTE FUNCTION pgqueue_ready_refill();
CREATE TRIGGER pgqueue_job_ready_refill_deleted
    AFTER DELETE ON {TABLE} FOR EACH ROW
    WHEN (OLD.concurrency_key IS NOT NULL AND OLD.status = {_RUNNING})
    EXECUTE FUNCTION pgqueue_ready_refill();
"""

#: ``0009_ready_held``: the held partition (an index on ``job_id`` for the update trigger,
#: which now replaces a pending job's held row like its later and parked ones), the partial
#: index of keyed rows every partition gets (the upkeep counts a key's rows on it, and reads
#: a key's held rows in order), and the trigger that puts rows back.
ADD_HELD = f"""
CREATE TABLE {HELD_TABLE} PARTITION OF {READY_TABLE} FOR VALUES IN ({HELD_SLOT});
CREATE INDEX {HELD_TABLE}_job ON {HELD_TABLE} (job_id);
CREATE INDEX {READY_TABLE}_key ON {READY_TABLE} (concurrency_key, priority DESC, run_after, job_id)
    WHERE concurrency_key IS NOT NULL;
{keep_rows(COLUMNS, parked=True, held=True)}
{_REFILL_ONE}
"""

REMOVE_HELD = f"""
DROP TRIGGER pgqueue_job_ready_refill_deleted ON {TABLE};
DROP TRIGGER pgqueue_job_ready_refill ON {TABLE};
DROP FUNCTION pgqueue_ready_refill();
{keep_rows(COLUMNS, parked=True)}
WITH m AS (DELETE FROM {READY_TABLE} r WHERE r.slot = {HELD_SLOT} RETURNING r.*)
INSERT INTO {READY_TABLE} (slot, job_id, {_COPIED})
SELECT pgqueue_ready_slot(m.job_id, m.run_after), m.job_id, {_MOVED} FROM m;
DROP TABLE {HELD_TABLE};
DROP INDEX {READY_TABLE}_key;
"""
