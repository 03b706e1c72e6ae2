"""Statements of a claimed job's life: heartbeat, finish, hand back; when to look again."""

from __future__ import annotations

from django_pgqueue.sql import (
    CANCELLED,
    COMPLETED,
    DEAD,
    PENDING,
    PLANNED_EACH_TIME,
    RUNNING,
    TABLE,
    readable_timestamp,
)
from django_pgqueue.sql.queues import not_paused
from django_pgqueue.sql.ready import LATER_SLOT, READY_TABLE
from django_pgqueue.states import Attempt

# A job asked to stop while it ran ends cancelled, whatever its attempt's outcome.
_ASKED_TO_STOP = "j.cancel_requested_at IS NOT NULL"

# ``status || ''``: the rows are found by primary key, never through the partial index on
# running jobs (``pgqueue_job_stale``). Under a pinned xmin horizon that index keeps an entry
# for every job finished since, and a plan that scans it to find 100 running rows walks them
# all: by primary key each row costs the same whatever the horizon.
_IS_RUNNING = f"j.status || '' = {RUNNING}"

# Fencing by claim (``0018_claim_token``): a write about jobs a worker has in hand applies only
# to a job still under the claim that gave it to that worker. ``%(ids)s`` finds the rows by
# primary key; ``%(tokens)s``, a JSON object of each id's claim token, fences them. A worker cut
# off long enough for its job to be reclaimed, retried and claimed again (by itself, even) has
# an old token: its late writes match nothing.
_CLAIMED = f"""j.id = ANY(%(ids)s::bigint[]) AND {_IS_RUNNING} AND j.locked_by = %(worker)s::text
    AND j.claim_token IS NOT DISTINCT FROM (%(tokens)s::jsonb ->> j.id::text)::bigint"""

HEARTBEAT = f"""
UPDATE {TABLE} j SET locked_at = now()
WHERE {_CLAIMED}
RETURNING j.id, j.cancel_requested_at IS NOT NULL
"""


def _from_micros(text: str) -> str:
    """The timestamptz ``text`` holds as microseconds since the Unix epoch, exactly: whole
    seconds through ``to_timestamp`` (exact for any integer of seconds a timestamptz holds),
    the rest as an interval of microseconds. (A single interval of ``m`` microseconds goes
    through a float, which rounds past 2**53 microseconds, about year 2255.)"""
    m = f"({text})::bigint"
    return f"(to_timestamp({m} / 1000000) + ({m} %% 1000000) * interval '1 microsecond')"


# In a statement's WHERE: this statement's transaction commits without waiting for its WAL to
# reach disk (``synchronous_commit = off`` for that transaction alone, whatever the session's).
# Evaluated before any row is written: by the materialized CTE, or on each candidate row.
# The worker writes outcomes so and makes them durable afterwards (``worker.writeback``).
_ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


# An interrupted attempt (its worker shut down: the job raised ``JobInterrupted``, ran past the
# shutdown timeout, or its process was stopped under it) hands its job back, pending, and
# counts it in ``interruptions``. While the job has been interrupted fewer than
# ``%(max_interruptions)s`` times (PGQUEUE_MAX_INTERRUPTIONS) its attempt is given back; past
# that the attempt counts, and a job out of attempts ends dead: a job that never gets through a
# shutdown cannot be handed back for ever. The one place the rule is spelled: the outcome write
# (``FINISH``, an attempt the job ended) and the hand-back of running jobs (``INTERRUPT``) both
# use it.
def _charged(interrupted: str) -> str:
    return f"({interrupted} AND j.interruptions >= %(max_interruptions)s::integer)"


def _interrupted_dead(interrupted: str) -> str:
    return f"({_charged(interrupted)} AND j.attempts >= j.max_attempts)"


def _interrupted_sets(interrupted: str) -> str:
    """The columns an interruption (``interrupted``: a boolean expression) sets besides the
    status and the history."""
    return f"""attempts = CASE WHEN {interrupted} AND NOT {_charged(interrupted)}
               THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    interruptions = CASE WHEN {interrupted} THEN least(j.interruptions, 2147483646) + 1
                    ELSE j.interruptions END"""


def _interrupted_error(interrupted: str) -> str:
    """``last_error`` of a job an interruption made dead (else NULL)."""
    return f"""CASE WHEN {_interrupted_dead(interrupted)} THEN 'JobInterrupted: handed back by '
        || (j.interruptions + 1) || ' worker shutdowns (PGQUEUE_MAX_INTERRUPTIONS is '
        || %(max_interruptions)s::integer || '), the last ones counted as attempts; out of attempts'
        END"""


def _finish(commit: str) -> str:
    """The outcomes of a worker's attempts written on their jobs' rows.

    Every condition on a job row is a join clause with ``d`` (the fence's worker and status are
    columns of ``d``), none a filter of the job table alone, so the planner estimates the job
    side as the whole table, whatever its statistics say. With filters of its own (``status``,
    ``locked_by``), a table last ANALYZEd nearly empty (a queue idle, then a burst: autovacuum
    analyzes it a minute later) was estimated at one matching row, and the planner could take
    the job rows as the outer side of a nested loop over ``d``: one pass over every outcome per
    job, 490,000 comparisons and 120 ms for 700 outcomes (docs/benchmarks/drain.md). Now that
    plan is estimated ten times dearer than probing the primary key per outcome, and the one
    after it is a hash join: linear either way. ``j.status = d.running`` also keeps the partial
    index on running jobs out (``_IS_RUNNING``): a join clause on a column of ``d`` proves no
    index predicate. ``%(count)s`` (the outcomes in the document) gives the planner their
    number, up to ``jsonb_array_elements``' own estimate of 100: a few outcomes are looked up
    by key, where a hash join read the whole table for each write."""
    return f"""
WITH d AS MATERIALIZED (
    -- One JSON document of [id, status, run_after, started_at, finished_at, result, error,
    -- error_entry, claim_token, interrupted] rows: json.dumps builds it in C, where array
    -- parameters are dumped element by element in Python. ``interrupted`` may be left out.
    -- The timestamps are microseconds since the Unix epoch.
    SELECT (r->>0)::bigint AS id, r->>1 AS status, {_from_micros("r->>2")} AS run_after,
           {_from_micros("r->>3")} AS started_at, {_from_micros("r->>4")} AS finished_at,
           (r->>5)::jsonb AS result, r->>6 AS error, (r->>7)::jsonb AS error_entry,
           (r->>8)::bigint AS claim_token, coalesce((r->>9)::boolean, false) AS interrupted,
           {RUNNING}::text AS running, %(worker)s::text AS worker
    FROM jsonb_array_elements(%(outcomes)s::jsonb) AS t(r)
    WHERE {commit}
    -- How many there are (all of them): without it the planner takes any document for 100
    -- rows, and on a table of a few thousand jobs hashed all of them for one outcome.
    LIMIT %(count)s::integer
)
UPDATE {TABLE} j SET
    status = CASE WHEN {_ASKED_TO_STOP} THEN {CANCELLED}
                  WHEN {_interrupted_dead("d.interrupted")} THEN {DEAD}
                  ELSE d.status END,
    run_after = coalesce(d.run_after, j.run_after),
    started_at = coalesce(d.started_at, j.started_at),
    finished_at = CASE WHEN {_ASKED_TO_STOP} OR {_interrupted_dead("d.interrupted")}
                  THEN coalesce(d.finished_at, now()) ELSE d.finished_at END,
    result = d.result,
    locked_at = NULL,
    -- A retry waits unowned; a finished job keeps the worker that ran its last attempt.
    locked_by = CASE WHEN d.status = {PENDING} THEN NULL ELSE j.locked_by END,
    last_error = coalesce(d.error, {_interrupted_error("d.interrupted")}, j.last_error),
    errors = CASE WHEN d.error_entry IS NULL THEN j.errors
             ELSE j.errors || jsonb_build_array(d.error_entry) END,
    {_interrupted_sets("d.interrupted")}
FROM d
WHERE j.id = d.id AND j.status = d.running AND j.locked_by = d.worker
  AND j.claim_token IS NOT DISTINCT FROM d.claim_token
RETURNING j.id
{PLANNED_EACH_TIME}: joined with the job table, never prepared (``sql.PLANNED_EACH_TIME``)
"""


def _delete_finished(commit: str) -> str:
    """Completed jobs deleted (``PGQUEUE_RETENTION = 0``), but a job with dependents or in a
    batch: it is kept completed, with its result (``%(results)s``: a JSON object of each id's),
    for its dependents and its batch (pruned once they no longer need it). Decided on the
    locked rows: a dependent's edge committing meanwhile marks the row first, or sees it
    completed (docs/storage.md, F3)."""
    return f"""
WITH locked AS MATERIALIZED (
    SELECT j.id, (j.dependents OR j.batch_id IS NOT NULL) AS kept FROM {TABLE} j
    WHERE {_CLAIMED} AND {commit}
    FOR UPDATE
), kept AS (
    UPDATE {TABLE} j SET
        status = CASE WHEN {_ASKED_TO_STOP} THEN {CANCELLED} ELSE {COMPLETED} END,
        finished_at = now(), locked_at = NULL, result = %(results)s::jsonb -> j.id::text
    FROM locked l WHERE j.id = l.id AND l.kept
    RETURNING j.id
), gone AS (
    DELETE FROM {TABLE} j USING locked l WHERE j.id = l.id AND NOT l.kept
    RETURNING j.id
)
SELECT id FROM kept UNION ALL SELECT id FROM gone
{PLANNED_EACH_TIME}: joined with the job table, never prepared (``sql.PLANNED_EACH_TIME``)
"""


FINISH = _finish("true")
DELETE_FINISHED = _delete_finished("true")
#: The same, committed asynchronously (see ``_ASYNC_COMMIT``).
FINISH_ASYNC = _finish(_ASYNC_COMMIT)
DELETE_FINISHED_ASYNC = _delete_finished(_ASYNC_COMMIT)

#: A transaction that writes WAL (a transactional logical message: a few bytes, no table, any
#: wal_level, any user), so its commit waits until its WAL is on disk (with
#: ``synchronous_commit`` on), and with it everything committed before it, asynchronous commits
#: included. ``txid_current()`` would not do: a transaction that wrote no WAL before its commit
#: record does not wait for it.
MAKE_DURABLE = "SELECT pg_logical_emit_message(true, 'django_pgqueue', '')"


def _release(which: str) -> str:
    return f"""
UPDATE {TABLE} j SET
    status = CASE WHEN {_ASKED_TO_STOP} THEN {CANCELLED} ELSE {PENDING} END,
    finished_at = CASE WHEN {_ASKED_TO_STOP} THEN now() END,
    attempts = greatest(j.attempts - 1, 0), locked_at = NULL, locked_by = NULL,
    started_at = NULL
WHERE {which}
RETURNING j.id
"""


#: Claimed jobs handed back unstarted, without spending an attempt: these ids.
RELEASE = _release(_CLAIMED)

#: Running jobs of ``%(worker)s`` handed back interrupted (see ``_charged``), each with an entry
#: in its history saying why (``%(reason)s``): at the end of the shutdown timeout, their
#: threads still running; by the supervisor, their process stopped under them while it shut
#: down. Returns each job's id and status (``dead``: interrupted too often, out of attempts).
INTERRUPT = f"""
UPDATE {TABLE} j SET
    status = CASE WHEN {_ASKED_TO_STOP} THEN {CANCELLED}
                  WHEN {_interrupted_dead("true")} THEN {DEAD}
                  ELSE {PENDING} END,
    finished_at = CASE WHEN {_ASKED_TO_STOP} OR {_interrupted_dead("true")} THEN now() END,
    locked_at = NULL, locked_by = NULL,
    last_error = coalesce({_interrupted_error("true")}, j.last_error),
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts, 'worker_id', j.locked_by,
        'exception_class', 'django_pgqueue.exceptions.JobInterrupted',
        'traceback', %(reason)s::text, 'at', now(), '{Attempt.INTERRUPTED.value}', true)),
    {_interrupted_sets("true")}
WHERE {_CLAIMED}
RETURNING j.id, j.status
"""
#: The same for every running job the worker has in hand but these ids: after a lost connection,
#: the jobs of a claim that committed while its answer was lost (the worker never knew of
#: them). Through the partial index on running jobs, whatever the size of the history: a
#: statement made once per reconnection, not per claim.
RELEASE_UNKNOWN = _release(
    f"NOT (j.id = ANY(%(ids)s::bigint[])) AND j.status = {RUNNING} AND j.locked_by = %(worker)s"
)


# What an idle worker waits for, from the ready ring (``sql.ready``): whether a ring slot holds
# a row of the queues (runnable now, but locked by another claim or waiting for its concurrency
# key), and the earliest run_after waiting in the later partition (NULL: none), which only a
# promotion moves into the ring. Never from the job table's pending index, which a pinned
# horizon fills.
def _next_run_after(queue_filter: str) -> str:
    ring = f"SELECT 1 FROM {READY_TABLE} r WHERE r.slot >= 0 {queue_filter}"
    later = (
        f"SELECT min(r.run_after) FROM {READY_TABLE} r WHERE r.slot = {LATER_SLOT} {queue_filter}"
    )
    # Computed once in a MATERIALIZED CTE: the clamp names its argument three times, and
    # each copy of the subquery would be run.
    return f"""
WITH q AS (SELECT %s::text[] AS names),
n AS MATERIALIZED (SELECT EXISTS ({ring}) AS ready, ({later}) AS at FROM q)
SELECT n.ready, {readable_timestamp("n.at")} FROM n
"""


_NAMED = "AND r.queue = ANY((SELECT names FROM q)::text[])"
_NOT_PAUSED = f"AND {not_paused('r.queue')}"

# The queue list is a parameter of all four; NULL for every queue.
NEXT_RUN_AFTER_ALL_QUEUES = _next_run_after("")
NEXT_RUN_AFTER_NAMED_QUEUES = _next_run_after(_NAMED)
# The same, leaving out paused queues (while any queue has settings: docs/control.md).
CONTROLLED_NEXT_RUN_AFTER_ALL_QUEUES = _next_run_after(_NOT_PAUSED)
CONTROLLED_NEXT_RUN_AFTER_NAMED_QUEUES = _next_run_after(f"{_NAMED} {_NOT_PAUSED}")
