"""The parked partition of the ready ring: where the rows of paused queues wait.

``pgqueue_ready_parked`` (slot -2, since ``0008_ready_parked``) is a partition of
``pgqueue_ready`` that no claim reads (claims read ``slot >= 0``). Without it a paused queue's
backlog stays in the ring, where every claim steps over each of its rows that sorts before the
rows it can take (50,000 paused jobs: 20 ms a claim instead of 1.7), and a ring slot holding
more of them than recycling moves on can never be truncated, so under a pinned xmin horizon
the other queues' dead entries gather there at each turn of the ring.

* :data:`PARK_QUEUE` / :data:`UNPARK_QUEUE`: pausing a queue moves its ring rows here,
  resuming moves them back, in the pause's transaction (``operations.set_paused``).
* Rows placed in the ring while their queue is paused (enqueued, retried, handed back,
  promoted when due), and rows an enqueue still open when a pause or resume committed left on
  the wrong side, are moved over by the workers' upkeep (:data:`MISPLACED`, about once a second
  per worker, with the promotion): a few index probes when nothing is misplaced. Meanwhile the
  claims leave them alone (the limited claim checks the pause), and at most about a second of
  a paused queue's enqueues wait in the ring. The enqueue itself does not look at the queue's
  settings: a join with ``pgqueue_queue`` in the insert trigger cost 4 % of bulk enqueue.
"""

from __future__ import annotations

from django_pgqueue.sql.queues import QUEUE_TABLE
from django_pgqueue.sql.ready import (
    BY_ID,
    PARKED_SLOT,
    PARKED_TABLE,
    READY_TABLE,
    TAKEN,
    delete_taken,
    insert_moved,
    move_rows,
)

#: A queue is paused: its rows leave the ring (the scheduled ones are parked when due).
PARK_QUEUE = move_rows("r.slot >= 0 AND r.queue = %s", str(PARKED_SLOT))
#: A queue is resumed: its rows go back where their ids and ``run_after`` say.
UNPARK_QUEUE = move_rows(f"r.slot = {PARKED_SLOT} AND r.queue = %s", BY_ID)

#: The upkeep parks a paused queue's ring rows a batch at a time (the second parameter), like
#: the promotion: a backlog enqueued into a paused queue all at once never keeps a worker's
#: loop busy for long. By ``ctid``, one slot at a time (the ring has no index on ``job_id``).
PARK_BATCH = f"""
WITH gone AS MATERIALIZED (
    SELECT r.slot, r.ctid AS row_id FROM {READY_TABLE} r
    WHERE r.slot >= 0 AND r.queue = %s
    LIMIT %s
    FOR UPDATE SKIP LOCKED
){delete_taken("gone", returning=True)}
{insert_moved(str(PARKED_SLOT), TAKEN)}
"""

#: The workers' upkeep: paused queues with rows in the ring (``true``: to park) and queues not
#: paused with parked rows (``false``: to put back, those of an enqueue racing a resume).
#: Index probes only, per queue with settings and per parked queue (found by a skip scan), so
#: a paused backlog is never read whole; :data:`PARK_BATCH` or :data:`UNPARK_QUEUE` moves them.
MISPLACED = f"""
WITH RECURSIVE parked_queues AS (
    (SELECT queue FROM {PARKED_TABLE} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT p.queue FROM {PARKED_TABLE} p WHERE p.queue > q.queue
            ORDER BY p.queue LIMIT 1)
    FROM parked_queues q WHERE q.queue IS NOT NULL
)
SELECT q.name, true FROM {QUEUE_TABLE} q
CROSS JOIN LATERAL (  -- the first ring row from this queue on: one probe of the queue index
    SELECT r.queue FROM {READY_TABLE} r WHERE r.slot >= 0 AND r.queue >= q.name
    ORDER BY r.queue LIMIT 1) ring
WHERE q.paused AND ring.queue = q.name
UNION ALL
SELECT p.queue, false FROM parked_queues p
WHERE p.queue IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} q WHERE q.name = p.queue AND q.paused)
"""
