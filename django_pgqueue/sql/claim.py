"""The claim: one statement that takes up to ``limit`` jobs for a worker.

* ``RECLAIM_*``: running jobs whose heartbeat is older than the visibility timeout (their worker
  died). Workers run it about once a second, besides their claims: there is no reaper to deploy.
* ``CLAIM_*``: runnable pending jobs, per queue in the order given, priority then run_after.
  A job with a concurrency key is skipped while another job with that key runs; the advisory
  lock keeps two concurrent claims from both taking the same key, and the partial unique
  index ``pgqueue_job_running_per_key_place`` (key, place 0 here) is the final word. Jobs with
  a rate limit are left to the limited claim (``sql.limits``), which also runs jobs with a
  ``concurrency_limit`` above one in their other places.
* Every claim counts an attempt; a stale job that has used all its attempts goes ``dead``.
"""

from __future__ import annotations

from collections.abc import Callable

from django_pgqueue.sql import (
    CANCELLED,
    DEAD,
    NEXT_CLAIM_TOKEN,
    PENDING,
    RUNNING,
    TABLE,
    claim_order,
    job_columns,
)
from django_pgqueue.sql.queues import QUEUE_TABLE
from django_pgqueue.sql.ready import by_kind, candidates, delete_taken, rows_of_picked

# Fresh jobs come from the ready ring (``sql.ready``), never from the job table's indexes:
# only the ring's slots (slot >= 0; the later partition is pruned at plan time). Rate-limited
# jobs are the limited claim's (``sql.limits``), and so is everything while some queue has
# settings (paused or limited): whoever runs this statement, it never starts a job a setting
# keeps back (a worker that has not heard of a new setting yet waits for it instead). One
# probe of ``pgqueue_queue`` per claim (an InitPlan): per row, it cost 0.45 ms a claim.
_FRESH_FILTER = f"""
    r.slot >= 0 AND r.rate_key IS NULL
    AND NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE})
    AND (r.concurrency_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM {TABLE} x
        WHERE x.status = {RUNNING} AND x.concurrency_key = r.concurrency_key))
"""
# Taken row by row, only for the rows the claim pulls (``ready.candidates``).
_KEY_LOCK = """(r.concurrency_key IS NULL
        OR pg_try_advisory_xact_lock(hashtextextended('pgqueue:' || r.concurrency_key, 0)))"""
_FRESH_COLUMNS = (
    "r.slot, r.row_id, r.job_id AS id, j.job_row, r.concurrency_key, r.priority, r.run_after"
)


# Each kind apart (``ready.by_kind``): up to ``%(limit)s`` sync jobs, ``%(async_limit)s`` async.
def _fresh_of_all_queues(kind: str, limit: str) -> str:
    return candidates(f"{kind} AND {_FRESH_FILTER}", _KEY_LOCK, _FRESH_COLUMNS, limit)


def _fresh_of_named_queues(kind: str, limit: str) -> str:
    fresh = candidates(
        f"r.queue = q.name AND {kind} AND {_FRESH_FILTER}", _KEY_LOCK, _FRESH_COLUMNS, limit
    )
    return f"""
    SELECT c.* FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL ({fresh}
    ) c
    LIMIT {limit}
"""


# A stale job that has used all its attempts goes dead instead of running again; one that was
# asked to stop (``cancel()`` while it ran) goes cancelled.
_LOST_FOR_GOOD = (
    f"j.status = {RUNNING} AND (j.attempts >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)"
)
_FINAL_STATUS = f"CASE WHEN j.cancel_requested_at IS NOT NULL THEN {CANCELLED} ELSE {DEAD} END"


def _when_lost_for_good(then: str, otherwise: str) -> str:
    return f"CASE WHEN {_LOST_FOR_GOOD} THEN {then} ELSE {otherwise} END"


# Runnable pending jobs, at most one per concurrency key; their ready rows are deleted.
# A candidate is a ring row whose job is pending, due, agrees with it and is not locked
# (``ready.candidates``): a row that disagrees, whose job is gone, or whose job row another
# transaction has locked (an operator's ``select_for_update()``) is stepped over, never the end of
# the claim (docs/storage.md, S4). Two rows of one job (S1 violated) run it once: both go.
_PICK_FRESH = f"""
WITH fresh AS MATERIALIZED ({{fresh}}
), picked AS (
    (SELECT slot, row_id, id, job_row FROM fresh WHERE concurrency_key IS NULL)
    UNION ALL
    (SELECT DISTINCT ON (concurrency_key) slot, row_id, id, job_row FROM fresh
     WHERE concurrency_key IS NOT NULL
     ORDER BY concurrency_key, {claim_order(job_id="id")})
    LIMIT %(total)s::integer
), gone AS ({rows_of_picked("fresh", "picked")}
){delete_taken("gone")}"""

# Running jobs whose heartbeat is older than the visibility timeout: their worker died.
# A statement of its own, run about once a second, not with every claim: under MVCC pressure
# (a transaction pinning the xmin horizon) this index range fills with dead entries of
# finished jobs, and every claim would walk them.
# Under MVCC pressure (a transaction pinning the xmin horizon) the stale index fills with dead
# entries of finished jobs, all older than the timeout: a worker starts where its last scan
# ended (``since``, a few seconds back for late commits), so each scan walks only the entries
# of that interval.
# A running row without a lock (locked_at NULL: written by hand) has no heartbeat to wait for;
# it is picked by a branch of its own, so the stale range stays an index range scan.
_PICK_STALE = f"""
WITH picked AS (
    SELECT id, job_row FROM (
        SELECT id, ctid AS job_row FROM {TABLE}
        WHERE status = {RUNNING} AND locked_at < now() - make_interval(secs => %(visibility)s)
          AND locked_at >= coalesce(%(since)s::timestamptz, '-infinity')
          {{queue_filter}}
        ORDER BY locked_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) stale
    UNION ALL
    SELECT id, job_row FROM (
        SELECT id, ctid AS job_row FROM {TABLE}
        WHERE status = {RUNNING} AND locked_at IS NULL {{queue_filter}}
        ORDER BY locked_at  -- all NULL: says "read the stale index", never the table
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) unlocked
    LIMIT %(limit)s
)"""

# Both update the picked rows the same way; fresh rows take the ELSE branches. Each picked row
# comes with its job row's ``ctid`` (``job_row``), locked by the pick.
_CLAIM = f"""
{{picked}}
UPDATE {TABLE} j SET
    status = {_when_lost_for_good(_FINAL_STATUS, RUNNING)},
    -- least(): a row whose counter is at the integer limit still claims (and then fails).
    attempts = {_when_lost_for_good("j.attempts", "least(j.attempts, 2147483646) + 1")},
    locked_at = {_when_lost_for_good("NULL", "now()")},
    locked_by = {_when_lost_for_good("j.locked_by", "%(worker)s")},
    started_at = {_when_lost_for_good("j.started_at", "now()")},
    finished_at = {_when_lost_for_good("now()", "NULL")},
    -- A fresh job runs in its key's place 0 (the limited claim gives the others).
    concurrency_place = CASE WHEN j.status = {PENDING} THEN 0 ELSE j.concurrency_place END,
    -- This claim's token, one per statement (``sql.outcomes``: fencing by claim).
    claim_token = {NEXT_CLAIM_TOKEN},
    last_error = CASE WHEN j.status = {RUNNING} THEN
        'WorkerLost: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating during '
        || 'attempt ' || j.attempts
        || coalesce(' (lock taken at ' || j.locked_at || ')', ' (never locked)')
        ELSE j.last_error END,
    errors = CASE WHEN j.status = {RUNNING} THEN j.errors || jsonb_build_array(
        jsonb_build_object(
            'attempt', j.attempts, 'worker_id', j.locked_by,
            'exception_class', 'django_pgqueue.exceptions.WorkerLost',
            'traceback', 'The worker stopped heartbeating; its lock expired.', 'at', now()))
        ELSE j.errors END
-- By the locked rows' ctid (a TID scan: no second primary-key lookup per job).
WHERE j.ctid = ANY(ARRAY(SELECT job_row FROM picked))
RETURNING {job_columns("j")}
"""


def _claim_fresh(fresh: Callable[[str, str], str], *, sync_only: bool = False) -> str:
    return _CLAIM.format(picked=_PICK_FRESH.format(fresh=by_kind(fresh, sync_only=sync_only)))


CLAIM_ALL_QUEUES = _claim_fresh(_fresh_of_all_queues)
CLAIM_NAMED_QUEUES = _claim_fresh(_fresh_of_named_queues)
#: The same without the async jobs' branch: a claim with no room for them (``ready.by_kind``).
CLAIM_ALL_QUEUES_SYNC_ONLY = _claim_fresh(_fresh_of_all_queues, sync_only=True)
CLAIM_NAMED_QUEUES_SYNC_ONLY = _claim_fresh(_fresh_of_named_queues, sync_only=True)
RECLAIM_ALL_QUEUES = _CLAIM.format(picked=_PICK_STALE.format(queue_filter=""))
RECLAIM_NAMED_QUEUES = _CLAIM.format(
    picked=_PICK_STALE.format(queue_filter="AND queue = ANY(%(queues)s::text[])")
)

#: The database's clock, for where the next stale-job scan starts.
DATABASE_NOW = "SELECT now()"

#: The jobs a worker has in hand (claimed, running), e.g. when its process died.
LOCKED_BY = f"""
SELECT {job_columns("j")} FROM {TABLE} j WHERE status = {RUNNING} AND locked_by = %s
"""
