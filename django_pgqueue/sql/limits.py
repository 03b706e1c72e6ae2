"""The limited claim: concurrency limits above one, queue concurrency limits, rate limits.

Workers use it while some queue has settings or limited jobs exist (``sql.claim``'s plain
statement otherwise), in one transaction of two statements:

1. ``LOCK_LIMITS_*`` takes a transaction-level advisory lock per limit the claim may count
   (the rate window of each rate key waiting in the ring, each queue with limits), in one
   order, and returns their ids. Claims that count the same limits run one after the other,
   and since each statement of a READ COMMITTED transaction sees what committed before it
   started, the second statement counts every start and run of the claims before. Claims of
   other limits do not wait.
2. ``LIMITED_CLAIM_*`` picks runnable jobs of queues not paused, within every limit (of a
   job whose limits the first statement did not lock: none, as it came in between), and in
   the same statement records their starts in the rate windows and gives each keyed job a
   free place (``concurrency_place``) among its key's ``concurrency_limit``; the partial unique
   index on (key, place) of running jobs refuses two jobs in one place whatever happens.
   It also puts back as many held rows of a limited queue as it took of the queue's ring rows
   (``sql.held``): the queue's backlog waits out of the ring, a few rows kept in it.

A rate window (``pgqueue_rate_window``) counts its recent starts, at most about a hundred
entries whatever its rate: a window of up to :data:`EXACT_STARTS` starts per period keeps their
times (``recent``), a larger one counts them per hundredth of its period (``recent``: each
bucket's start, ``counts``: its starts). A job may start while the starts counted since
``period`` seconds ago (for buckets: since the start of the bucket that time falls in) are
fewer than ``starts``, so no window of ``period`` seconds ever holds more than ``starts``
starts (a sliding window); a bucketed window may leave up to a hundredth of its rate unused.
Start times are the claim statement's ``statement_timestamp()``, also written as the jobs'
``started_at``. A job a limit keeps waiting is not touched: no attempt spent, its place kept.
"""

from __future__ import annotations

from django_pgqueue.sql import NEXT_CLAIM_TOKEN, RUNNING, TABLE, claim_order, job_columns
from django_pgqueue.sql.queues import QUEUE_TABLE, not_paused
from django_pgqueue.sql.ready import (
    HELD_TABLE,
    INSERT_SLOT,
    READY_TABLE,
    by_kind,
    candidates,
    delete_taken,
    insert_moved,
    rows_of_picked,
)

WINDOW_TABLE = "pgqueue_rate_window"

_NOW = "statement_timestamp()"


#: The held partition's index of queue groups (``sql.held``, ``0011_ready_held_queues``).
QUEUE_HELD_INDEX = f"{HELD_TABLE}_queue"


def keyless(row: str = "") -> str:
    """Whether a ready row (``row``: its alias, with the dot) has neither a concurrency key nor
    a rate key: held, if ever, in its queue's group (``sql.held``)."""
    return f"({row}concurrency_key IS NULL AND {row}rate_key IS NULL)"


def key_window(rate_key: str) -> str:
    """The window id of a job ``rate_key``."""
    return f"key:{rate_key}"


def queue_window(queue: str) -> str:
    """The window id of a queue's ``rate_limit``."""
    return f"queue:{queue}"


#: Create a rate window, or change its rate (its recent starts are kept).
DEFINE_WINDOW = f"""
INSERT INTO {WINDOW_TABLE} AS w (id, starts, period, recent, counts, updated_at)
VALUES (%s, %s, %s, '{{}}', '{{}}', now())
ON CONFLICT (id) DO UPDATE SET starts = EXCLUDED.starts, period = EXCLUDED.period,
    updated_at = now()
WHERE (w.starts, w.period) IS DISTINCT FROM (EXCLUDED.starts, EXCLUDED.period)
"""

DROP_WINDOW = f"DELETE FROM {WINDOW_TABLE} WHERE id = %s"

#: Whether limited jobs wait (the ready ring's small partial index, dead entries bounded like
#: the ring's). A rate window outlives its last job: it does not count here, or one
#: rate-limited job would keep every worker on the limited claim for good. (A queue's own rate
#: window comes with its queue row, which counts as settings.)
_LIMITED_WAITING = f"""EXISTS (SELECT 1 FROM {READY_TABLE}
               WHERE rate_key IS NOT NULL OR concurrency_limit IS NOT NULL)"""
#: Whether a claim must count limits and pauses: some queue has settings, or limited jobs
#: wait (the plain claim leaves both alone).
LIMITED_CLAIM_NEEDED = f"SELECT EXISTS (SELECT 1 FROM {QUEUE_TABLE}) OR {_LIMITED_WAITING}"


def _lock_limits(queue_filter: str) -> str:
    """Lock the limits the claim may count (``queue_filter``: a condition on a queue name
    ``n``), in one order, and return their ids: the rate windows of the rate keys waiting in
    the ring and the limits of the queues with limits. A limit no candidate has is not
    locked: claims of other limits never wait for it."""
    return f"""
SELECT coalesce(array_agg(l.id ORDER BY l.id), ARRAY[]::text[]) FROM (
    SELECT o.id, pg_advisory_xact_lock(hashtextextended('pgqueue-limit:' || o.id, 0)) FROM (
        SELECT DISTINCT 'key:' || r.rate_key AS id FROM {READY_TABLE} r
        WHERE r.slot >= 0 AND r.rate_key IS NOT NULL AND {queue_filter.format(n="r.queue")}
        UNION
        SELECT 'queue:' || q.name FROM {QUEUE_TABLE} q
        WHERE (q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL)
          AND {queue_filter.format(n="q.name")}
        ORDER BY 1
    ) o
) l
"""


LOCK_LIMITS_ALL_QUEUES = _lock_limits("true")
LOCK_LIMITS_NAMED_QUEUES = _lock_limits("{n} = ANY(%(queues)s::text[])")


#: The largest window that keeps each start's time; larger ones count per hundredth of their
#: period (:data:`BUCKETS` buckets), so a window's size is bounded whatever its rate.
EXACT_STARTS = 100
BUCKETS = 100


def _bucket_width(window: str) -> str:
    """Seconds per bucket of the window ``window``: 0 for one that keeps exact times."""
    return (
        f"(CASE WHEN {window}.starts > {EXACT_STARTS} THEN {window}.period / {BUCKETS} ELSE 0 END)"
    )


def _free(window: str) -> str:
    """How many more starts the window ``window`` allows now: ``starts`` less those counted
    since ``period`` seconds ago (a bucket counts whole if it ends after that)."""
    return f"""({window}.starts - (SELECT coalesce(sum(coalesce(s.n, 1)), 0)
        FROM unnest({window}.recent, {window}.counts) AS s(t, n)
        WHERE s.t > {_NOW} - make_interval(secs => {window}.period + {_bucket_width(window)})))"""


def _running(column: str, value: str) -> str:
    return f"(SELECT count(*) FROM {TABLE} x WHERE x.status = {RUNNING} AND x.{column} = {value})"


# Candidates come from the ready ring (``sql.ready``), like the plain claim's, never from the
# job table's indexes. Per row, so that jobs kept waiting never fill the LIMIT: a job whose key,
# queue or window is full is not a candidate at all.
_FILTER = f"""
    r.slot >= 0 AND {not_paused("r.queue")}
    AND (r.concurrency_key IS NULL
         OR {_running("concurrency_key", "r.concurrency_key")} < coalesce(r.concurrency_limit, 1))
    AND NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} qc WHERE qc.name = r.queue
        AND qc.concurrency_limit IS NOT NULL
        AND {_running("queue", "r.queue")} >= qc.concurrency_limit)
    AND (r.rate_key IS NULL OR 'key:' || r.rate_key = ANY(%(locked)s::text[]))
    AND ('queue:' || r.queue = ANY(%(locked)s::text[]) OR NOT EXISTS (
        SELECT 1 FROM {QUEUE_TABLE} ql WHERE ql.name = r.queue
        AND (ql.concurrency_limit IS NOT NULL OR ql.rate_limit IS NOT NULL)))
    AND (NOT %(rate_limits)s
         OR NOT 'queue:' || r.queue = ANY((SELECT ids FROM full_windows)::text[]))
    AND (r.rate_key IS NULL OR NOT %(rate_limits)s
         OR NOT 'key:' || r.rate_key = ANY((SELECT ids FROM full_windows)::text[]))
"""
# Taken row by row, only for the rows the claim pulls (``ready.candidates``).
_KEY_LOCK = """(r.concurrency_key IS NULL
        OR pg_try_advisory_xact_lock(hashtextextended('pgqueue:' || r.concurrency_key, 0)))"""
_COLUMNS = (
    "r.slot, r.row_id, r.job_id AS id, r.queue, r.concurrency_key, "
    "r.concurrency_limit, r.rate_key, r.priority, r.run_after"
)


# ``ord``: the queue's place in the worker's list (served in that order), 0 for every queue.
# Each kind apart (``ready.by_kind``): up to ``%(limit)s`` sync jobs, ``%(async_limit)s`` async.
def _fresh_of_all_queues(kind: str, limit: str) -> str:
    return candidates(f"{kind} AND {_FILTER}", _KEY_LOCK, f"{_COLUMNS}, 0 AS ord", limit)


def _fresh_of_named_queues(kind: str, limit: str) -> str:
    fresh = candidates(f"r.queue = q.name AND {kind} AND {_FILTER}", _KEY_LOCK, _COLUMNS, limit)
    return f"""
    SELECT c.*, q.ord FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL ({fresh}
    ) c
    LIMIT {limit}
"""


_ORDER_F = f"ORDER BY {claim_order('f.', 'id')}"


def _record_starts(prefix: str, column: str) -> str:
    """Add the picked jobs' starts to their windows: an exact window keeps its newest
    ``starts`` times within the period; a bucketed one adds them to the bucket of now and
    drops the buckets that ended before the period began (a window whose rate changed across
    :data:`EXACT_STARTS` moves its entries over)."""
    width = _bucket_width("w")
    since = f"{_NOW} - make_interval(secs => w.period + {width})"
    return f"""UPDATE {WINDOW_TABLE} w SET (recent, counts) = (
        SELECT coalesce(array_agg(x.t ORDER BY x.t), ARRAY[]::timestamptz[]),
               CASE WHEN w.starts > {EXACT_STARTS}
                    THEN coalesce(array_agg(x.n ORDER BY x.t), ARRAY[]::integer[])
                    ELSE ARRAY[]::integer[] END
        FROM (
            (SELECT e.t, NULL::integer AS n
             FROM unnest(w.recent || array_fill({_NOW}, ARRAY[p.n::int]), w.counts) AS e(t, c)
             CROSS JOIN generate_series(1, least(coalesce(e.c, 1), w.starts))
             WHERE w.starts <= {EXACT_STARTS} AND e.t > {since}
             ORDER BY e.t DESC LIMIT w.starts)
            UNION ALL
            (SELECT b.t, sum(b.n)::integer FROM (
                SELECT s.t, coalesce(s.n, 1) AS n FROM unnest(w.recent, w.counts) AS s(t, n)
                UNION ALL
                SELECT to_timestamp(
                    floor(extract(epoch FROM {_NOW}) / nullif({width}, 0)) * {width}), p.n
             ) b
             WHERE w.starts > {EXACT_STARTS} AND b.t > {since}
             GROUP BY b.t)
        ) x)
    FROM (SELECT '{prefix}' || {column} AS id, count(*) AS n FROM picked
          WHERE {column} IS NOT NULL GROUP BY {column}) p
    WHERE w.id = p.id"""


# The candidates are ring rows whose jobs are pending, due, agree with them and are not locked
# (``ready.candidates``), as in the plain claim (``sql.claim``). Two rows of one job (S1
# violated) run it once: ``fresh`` keeps one, and both go.
_CLAIM = f"""
WITH window_room AS MATERIALIZED (
    -- How many more starts each locked window allows: counted once per claim, not per row.
    SELECT w.id, {_free("w")} AS room FROM {WINDOW_TABLE} w
    WHERE w.id = ANY(%(locked)s::text[])
), full_windows AS MATERIALIZED (
    SELECT coalesce(array_agg(id::text), ARRAY[]::text[]) AS ids FROM window_room WHERE room <= 0
), candidates AS MATERIALIZED ({{fresh}}
), fresh AS (
    SELECT DISTINCT ON (id) * FROM candidates ORDER BY id
), ranked AS (
    SELECT f.*,
        row_number() OVER (PARTITION BY f.queue {_ORDER_F}) AS queue_n,
        row_number() OVER (PARTITION BY f.rate_key {_ORDER_F}) AS rate_n
    FROM fresh f
), eligible AS (
    SELECT r.* FROM ranked r
    LEFT JOIN {QUEUE_TABLE} qc ON qc.name = r.queue
    LEFT JOIN window_room qw ON qw.id = 'queue:' || r.queue
    LEFT JOIN window_room kw ON kw.id = 'key:' || r.rate_key
    WHERE (qc.concurrency_limit IS NULL
           OR r.queue_n <= qc.concurrency_limit - {_running("queue", "r.queue")})
      AND (qw.id IS NULL OR NOT %(rate_limits)s OR r.queue_n <= qw.room)
      AND (kw.id IS NULL OR NOT %(rate_limits)s OR r.rate_n <= kw.room)
), keyed AS (
    SELECT e.id, e.concurrency_key, coalesce(e.concurrency_limit, 1) AS places,
        row_number() OVER (PARTITION BY e.concurrency_key
                           ORDER BY {claim_order("e.", "id")}) AS n
    FROM eligible e WHERE e.concurrency_key IS NOT NULL
), placed AS (
    -- The n-th job of a key takes the n-th free place of that key.
    SELECT k.id, p.place FROM keyed k
    CROSS JOIN LATERAL (
        SELECT g.place FROM generate_series(0, k.places - 1) AS g(place)
        WHERE NOT EXISTS (SELECT 1 FROM {TABLE} x WHERE x.status = {RUNNING}
                          AND x.concurrency_key = k.concurrency_key
                          AND x.concurrency_place = g.place)
        ORDER BY g.place OFFSET k.n - 1 LIMIT 1
    ) p
), picked AS MATERIALIZED (
    SELECT e.id, e.slot, e.row_id, e.queue, e.concurrency_key, e.rate_key, pl.place
    FROM eligible e
    LEFT JOIN placed pl ON pl.id = e.id
    WHERE e.concurrency_key IS NULL OR pl.place IS NOT NULL
    ORDER BY e.ord, {claim_order("e.", "id")}
    LIMIT %(total)s::integer
), key_starts AS (
    {_record_starts("key:", "rate_key")}
), queue_starts AS (
    {_record_starts("queue:", "queue")}
), gone AS ({rows_of_picked("candidates", "picked")}
){delete_taken("gone")}, refill AS (
    -- As many held rows of a queue's group as it took of them come back (``sql.held``).
    DELETE FROM {HELD_TABLE} h WHERE h.ctid = ANY(ARRAY(
        SELECT x.ctid FROM (SELECT queue, count(*) AS n FROM picked WHERE {keyless()}
                            GROUP BY queue) p
        CROSS JOIN LATERAL (
            SELECT ctid FROM {HELD_TABLE} WHERE queue = p.queue AND {keyless()}
            -- queue first, as in the index of a queue's held rows: a plan that reads the
            -- held rows in the claims' order steps over every other queue's.
            ORDER BY queue, {claim_order()}
            LIMIT p.n FOR UPDATE SKIP LOCKED) x))
    RETURNING h.*
), refilled AS (
    {insert_moved(INSERT_SLOT, "refill m")}
)
UPDATE {TABLE} j SET
    status = {RUNNING},
    attempts = least(j.attempts, 2147483646) + 1,
    locked_at = {_NOW},
    locked_by = %(worker)s,
    started_at = {_NOW},
    finished_at = NULL,
    concurrency_place = coalesce((SELECT p.place FROM picked p WHERE p.id = j.id), 0),
    claim_token = {NEXT_CLAIM_TOKEN}
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {job_columns("j")}
"""

LIMITED_CLAIM_ALL_QUEUES = _CLAIM.format(fresh=by_kind(_fresh_of_all_queues))
LIMITED_CLAIM_NAMED_QUEUES = _CLAIM.format(fresh=by_kind(_fresh_of_named_queues))
#: The same without the async jobs' branch: a claim with no room for them (``ready.by_kind``).
LIMITED_CLAIM_ALL_QUEUES_SYNC_ONLY = _CLAIM.format(
    fresh=by_kind(_fresh_of_all_queues, sync_only=True)
)
LIMITED_CLAIM_NAMED_QUEUES_SYNC_ONLY = _CLAIM.format(
    fresh=by_kind(_fresh_of_named_queues, sync_only=True)
)
