"""The held partition of the ready ring: where the backlog of a busy key waits.

A job with a concurrency key runs only while its key has a free place, one with a rate key
only while its rate window has room, and the claims step over each ring row of a busy key that
sorts before the rows they can take: 50,000 jobs waiting for one busy concurrency key cost
every plain claim 27 ms instead of under one; 50,000 of a full rate window, 144 ms a limited
claim. Under a pinned xmin horizon a ring slot holding more of them than recycling moves on is
never truncated either. So the ring keeps only the first few rows of a group with many
(:func:`kept`: a few more than twice what it may start at once), in the claims' order, and the
rest wait in ``pgqueue_ready_held`` (slot -3, since ``0009_ready_held``), which no claim reads
(claims read ``slot >= 0``). A row's group (:func:`group`) is its concurrency key, else its
rate key. A row with neither belongs to its queue's group if the queue has limits of its own
(``limit_queue``: since ``0011_ready_held_queues``; 20,000 jobs waiting behind a full queue
cost every limited claim 70-86 ms), and is never held otherwise.

* The workers' upkeep (:data:`SWEEP`, with the promotion, about once a second per worker)
  holds a group's ring rows beyond its first :func:`kept` once it has twice that many (a batch
  at a time, by ``ctid``), and tops a group's ring rows up from its held ones when fewer are
  left: after ready rows were deleted for jobs no longer runnable, or while a rate key's long
  jobs run. Held rows of paused queues stay.
* A job of a key's group leaving ``running`` (finished, failed, retried, handed back, deleted)
  puts the group's next held row into the ring, in its own transaction (the trigger
  ``pgqueue_job_ready_refill``, in ``sql/schema.sql``): as many rows come back as leave, and a
  hot key runs as fast as before. Nothing fires for a job with neither key.
* A queue's group is refilled by the limited claim instead (``sql.limits``): the claim that
  takes jobs of a queue's group puts as many of its held rows back, in the same statement. A
  trigger on every finish would cost every job of every queue; the claims that take a limited
  queue's jobs are few, and they are the ones that know.
* Put-back rows go to the slot inserts go to now, so they drain with the newest rows and never
  keep an old slot from being truncated.

Within a group, jobs start in the claims' order (priority, ``run_after``, id) as before: rows
are held from the end of the group's order and put back from the front. The exception: a job
enqueued into the ring while better ones of its group are held may start before them if the
group's ring rows run out before the next are put back (after many of them were cancelled).
"""

from __future__ import annotations

from django_pgqueue.sql import claim_order
from django_pgqueue.sql.limits import QUEUE_HELD_INDEX, WINDOW_TABLE, keyless
from django_pgqueue.sql.queues import QUEUE_TABLE, not_paused
from django_pgqueue.sql.ready import (
    HELD_SLOT,
    HELD_TABLE,
    INSERT_SLOT,
    READY_TABLE,
    TAKEN,
    delete_taken,
    insert_moved,
)

_ORDER = f"ORDER BY {claim_order()}"
#: A queue group's order, queue first as in the index of a queue's held rows: a plan reading
#: the held rows in the claims' order would step over every other queue's.
_QUEUE_ORDER = f"ORDER BY queue, {claim_order()}"

#: Rows of a group the ring keeps besides twice what it may start at once.
KEPT_PER_KEY = 8
#: What a rate window may start at once, as far as the rows kept go: a ``100000/d`` window
#: would keep 200,000 rows in the ring, and each claim would step over those of a full window.
#: A group takes back as many held rows as it starts, so the cap costs no throughput.
WINDOW_KEPT_MAX = 1000


def group(row: str = "") -> str:
    """The key group a ready row (or job: ``row`` is its alias, with the dot) is held in:
    ``c:`` and its concurrency key, else ``r:`` and its rate key, else NULL (held, if at all,
    in its queue's group: ``limits.keyless``). The expression of the partial index
    ``pgqueue_ready_group``, word for word, with :data:`GROUPED` (the index's predicate)
    beside it."""
    return f"coalesce('c:' || {row}concurrency_key, 'r:' || {row}rate_key)"


def grouped(row: str = "") -> str:
    """Whether a row (``row``: as in :func:`group`) has a group."""
    return f"({row}concurrency_key IS NOT NULL OR {row}rate_key IS NOT NULL)"


GROUPED = grouped()


def kept(grp: str, limit: str, rate_key: str) -> str:
    """How many ring rows a group keeps: for a concurrency key (``limit``: its
    ``concurrency_limit``), and for a rate key (``rate_key``), by its window's starts."""
    return f"""({KEPT_PER_KEY} + 2 * CASE WHEN left({grp}, 2) = 'c:' THEN coalesce({limit}, 1)
        ELSE coalesce((SELECT least(w.starts, {WINDOW_KEPT_MAX}) FROM {WINDOW_TABLE} w
                       WHERE w.id = 'key:' || {rate_key}), 1)
        END)"""


def _of_group(grp: str, row: str = "r.") -> str:
    """A ready row (``row``: its alias, with the dot) of the key group ``grp``."""
    return f"{grouped(row)} AND {group(row)} = {grp}"


def _of_queue(queue: str, row: str = "r.") -> str:
    """A ready row of the queue group of ``queue`` (neither key)."""
    return f"{row}queue = {queue} AND {keyless(row)}"


def _in_ring(where: str, limit: str) -> str:
    """How many ring rows ``r`` match ``where``, counting up to ``limit`` only."""
    return f"""(SELECT count(*) FROM (SELECT 1 FROM {READY_TABLE} r
        WHERE r.slot >= 0 AND {where} LIMIT {limit}) ring)"""


def _beyond_kept(over: str, where: str) -> str:
    """The ring rows ``r`` matching ``where`` past the first ``kept`` of each group in
    ``over`` (a batch at most), locked ``SKIP LOCKED``: what the upkeep holds."""
    return f"""(SELECT e.slot, e.row_id FROM {over} o CROSS JOIN LATERAL (
        SELECT r.slot, r.ctid AS row_id FROM {READY_TABLE} r
        WHERE r.slot >= 0 AND {where}
        {_ORDER}
        OFFSET o.kept LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED) e
    LIMIT %(batch)s)"""


def _front_of_held(short: str, where: str, order: str = _ORDER) -> str:
    """The first ``room`` held rows matching ``where`` of each group in ``short``, in
    ``order``, locked ``SKIP LOCKED``: what the upkeep puts back."""
    return f"""SELECT x.ctid FROM {short} s CROSS JOIN LATERAL (
            SELECT ctid FROM {HELD_TABLE} WHERE {where} {order}
            LIMIT greatest(s.room, 0) FOR UPDATE SKIP LOCKED) x"""


#: A queue's group (rows with neither key, of a queue with limits of its own) keeps the same
#: few rows besides twice what the queue may start at once: its ``concurrency_limit`` or its
#: window's starts, the larger.
_LIMITED_QUEUES = f"""limited_queues AS MATERIALIZED (
    SELECT q.name, q.paused, ({KEPT_PER_KEY} + 2 * greatest(
        coalesce(q.concurrency_limit, 1), least(coalesce(w.starts, 1), {WINDOW_KEPT_MAX})))
        AS kept
    FROM {QUEUE_TABLE} q LEFT JOIN {WINDOW_TABLE} w ON w.id = 'queue:' || q.name
    WHERE q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL
)"""

# The upkeep holds the ring rows of groups beyond their first :func:`kept`, a batch at a time
# (the parameter), for groups with more than twice that many (found on the ring's partial
# index of grouped rows): a group whose finishes and enqueues keep it near :func:`kept` is left
# alone, not held and put back row by row. The rows to move are locked ``SKIP LOCKED`` (a
# claim's are left for the next round).
_HOLD = f"""counted AS MATERIALIZED (
    SELECT {group("r.")} AS grp, count(*) AS n,
        max(r.concurrency_limit) AS climit, max(r.rate_key) AS rkey
    FROM {READY_TABLE} r WHERE r.slot >= 0 AND {grouped("r.")}
    GROUP BY 1
), over AS MATERIALIZED (
    SELECT c.grp, k.kept FROM counted c
    CROSS JOIN LATERAL (SELECT {kept("c.grp", "c.climit", "c.rkey")} AS kept) k
    WHERE c.n > 2 * k.kept
), queues_over AS MATERIALIZED (
    SELECT l.name, l.kept FROM limited_queues l
    WHERE NOT l.paused AND {_in_ring(_of_queue("l.name"), "2 * l.kept + 1")} > 2 * l.kept
), gone AS MATERIALIZED (
    {_beyond_kept("over", _of_group("o.grp"))}
    UNION ALL
    {_beyond_kept("queues_over", _of_queue("o.name"))}
){delete_taken("gone", returning=True)}, held_now AS (
    {insert_moved(str(HELD_SLOT), TAKEN)}
)"""

# The upkeep puts back held rows of groups with fewer than :func:`kept` rows in the ring: their
# rows were deleted for jobs no longer runnable, a hold raced a finish, or long jobs of a rate
# key left few rows waiting (a finish puts one back; this tops a group up to its kept rows,
# about once a second, so a rate key never starts fewer than its rate). Per held group, found
# by a skip scan of the held partition, one probe of the ring's index. A group's rows of
# paused queues stay held (they would only be parked), and are stepped over: a key whose jobs
# are in two queues, one paused, goes on in the other.
_REFILL = f"""held_groups AS (
    (SELECT {group()} AS grp FROM {HELD_TABLE} WHERE {GROUPED} ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT (SELECT {group("h.")} FROM {HELD_TABLE} h
            WHERE {grouped("h.")} AND {group("h.")} > g.grp ORDER BY 1 LIMIT 1)
    FROM held_groups g WHERE g.grp IS NOT NULL
), short AS MATERIALIZED (
    SELECT g.grp, first.kept - {_in_ring(_of_group("g.grp"), "first.kept")} AS room
    FROM held_groups g
    CROSS JOIN LATERAL (
        SELECT {kept("g.grp", "h.concurrency_limit", "h.rate_key")} AS kept, h.queue
        FROM {HELD_TABLE} h
        WHERE {_of_group("g.grp", "h.")} {_ORDER} LIMIT 1) first
    WHERE g.grp IS NOT NULL
), held_queues AS (
    -- The queues with held rows of neither key, by a skip scan of {QUEUE_HELD_INDEX}.
    (SELECT queue FROM {HELD_TABLE} WHERE {keyless()} ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT (SELECT h.queue FROM {HELD_TABLE} h
            WHERE {keyless("h.")} AND h.queue > g.queue ORDER BY 1 LIMIT 1)
    FROM held_queues g WHERE g.queue IS NOT NULL
), queues_short AS MATERIALIZED (
    -- A queue without limits any more gets every held row back, a batch at a time.
    SELECT g.queue, CASE WHEN l.name IS NULL THEN %(batch)s
        ELSE l.kept - {_in_ring(_of_queue("g.queue"), "l.kept")} END AS room
    FROM held_queues g LEFT JOIN limited_queues l ON l.name = g.queue
    WHERE g.queue IS NOT NULL AND {not_paused("g.queue")}
), m AS (
    DELETE FROM {HELD_TABLE} h WHERE h.ctid = ANY(ARRAY(
        {_front_of_held("short", f"{_of_group('s.grp', '')} AND {not_paused('queue')}")}
        UNION ALL
        {_front_of_held("queues_short", _of_queue("s.queue", ""), _QUEUE_ORDER)}))
    RETURNING h.*
), back AS (
    {insert_moved(INSERT_SLOT)}
    RETURNING 1
)"""

#: The upkeep's one statement (both parts see the ring as it was when it began: a group is
#: either held, having more than twice its kept rows, or topped up, having fewer than them);
#: returns how many rows went back into the ring.
SWEEP = f"""
WITH RECURSIVE {_LIMITED_QUEUES}, {_HOLD}, {_REFILL}
SELECT count(*) FROM back
"""

#: Whether :data:`SWEEP` may have anything to do: a grouped row in the ring (a key that may
#: need holding), a held row (one that may need putting back), or a queue with limits of its
#: own. Three probes of small indexes and tables. The upkeep runs :data:`SWEEP` only then:
#: most queues have none of these, and a worker plans that statement on its first run (7 ms
#: on the shared server, every worker start; docs/performance.md, "Where a worker's start
#: goes").
SWEEP_DUE = f"""
SELECT EXISTS (SELECT 1 FROM {READY_TABLE} r WHERE r.slot >= 0 AND {grouped("r.")})
    OR EXISTS (SELECT 1 FROM {HELD_TABLE})
    OR EXISTS (SELECT 1 FROM {QUEUE_TABLE}
               WHERE concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL)
"""
