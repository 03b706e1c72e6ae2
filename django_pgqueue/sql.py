"""Every raw SQL statement of the queue, in one place.

Each statement is a named constant used from exactly one function below. The functions take a
DB-API cursor (Django's cursor wrapper or a raw psycopg cursor: both use ``%s`` placeholders),
so the ORM-facing manager and the worker's own connection share the same SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

TABLE = "pgqueue_job"
NOTIFY_CHANNEL = "pgqueue"

#: Columns returned by the claim, in model field order (``Job.from_db`` takes them as they are).
JOB_COLUMNS = (
    "id",
    "queue",
    "name",
    "args",
    "kwargs",
    "status",
    "priority",
    "run_after",
    "attempts",
    "max_attempts",
    "locked_at",
    "locked_by",
    "last_error",
    "errors",
    "result",
    "unique_key",
    "concurrency_key",
    "created_at",
    "started_at",
    "finished_at",
)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchone(self) -> Any: ...


# Built once: ``json.dumps`` with options builds a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def dumps(value: Any) -> str:
    """JSON for a jsonb column: compact, and NaN/Infinity refused (jsonb has neither)."""
    return _ENCODER.encode(value)


# ----- enqueue -----------------------------------------------------------------------------

_INSERT_COLUMNS = (
    "queue, name, args, kwargs, priority, run_after, max_attempts, unique_key, concurrency_key"
)
_ON_CONFLICT = (
    "ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL "
    "AND status IN ('pending', 'running') DO NOTHING"
)

INSERT_ONE = f"""
INSERT INTO {TABLE} ({_INSERT_COLUMNS})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s)
{_ON_CONFLICT}
RETURNING id, run_after, created_at
"""

RESERVE_IDS = "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)"

COPY_MANY = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key)
FROM STDIN
"""

NOTIFY = "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q"


# Row layout for ``insert_one``: one tuple per job, in ``_INSERT_COLUMNS`` order with
# args/kwargs already JSON text and run_after None for "now".
InsertRow = tuple[str, str, str, str, int, datetime | None, int, str | None, str | None]


def insert_one(cursor: Cursor, row: InsertRow) -> tuple[int, datetime, datetime] | None:
    """Insert one job; None when an active job with the same unique key already exists."""
    cursor.execute(INSERT_ONE, row)
    found = cursor.fetchone()
    return None if found is None else (found[0], found[1], found[2])


def copy_many(
    cursor: Any,
    queue: str,
    name: str,
    payloads: Sequence[tuple[str, str]],
    priority: int,
    run_after: datetime,
    max_attempts: int,
    concurrency_key: str | None,
) -> list[int]:
    """Bulk-load jobs with COPY (about 4x faster than INSERT ... unnest); returns their ids.

    COPY has no ON CONFLICT, so this is for jobs without a unique key. The ids are reserved from
    the sequence first, in one round trip, so they come back in input order by construction.
    ``cursor`` is a psycopg cursor (``.copy()`` is psycopg's).
    """
    cursor.execute(RESERVE_IDS, [TABLE, len(payloads)])
    ids = [row[0] for row in cursor.fetchall()]
    with cursor.copy(COPY_MANY) as copy:
        for job_id, (args_json, kwargs_json) in zip(ids, payloads, strict=True):
            copy.write_row(
                (
                    job_id,
                    queue,
                    name,
                    args_json,
                    kwargs_json,
                    priority,
                    run_after,
                    max_attempts,
                    concurrency_key,
                )
            )
    return ids


def notify(cursor: Cursor, queues: Sequence[str]) -> None:
    """Wake the workers serving ``queues`` (sent when the surrounding transaction commits)."""
    cursor.execute(NOTIFY, [NOTIFY_CHANNEL, sorted(set(queues))])


# ----- claim -------------------------------------------------------------------------------
#
# One statement claims up to ``limit`` jobs:
#  * ``stale``: running jobs whose heartbeat is older than the visibility timeout (their worker
#    died). Recovery rides on the claim: there is no reaper to deploy.
#  * ``fresh``: runnable pending jobs, per queue in the order given, priority then run_after.
#    A job with a concurrency key is skipped while another job with that key runs; the advisory
#    lock keeps two concurrent claims from both taking the same key, and the partial unique
#    index ``pgqueue_job_one_running_per_key`` is the final word.
#  * Every claim counts an attempt; a stale job that has used all its attempts goes ``dead``.

_CLAIM_FRESH_FILTER = """
    status = 'pending' AND run_after <= now()
    AND (concurrency_key IS NULL OR (
        NOT EXISTS (SELECT 1 FROM pgqueue_job r
                    WHERE r.status = 'running' AND r.concurrency_key = j.concurrency_key)
        AND pg_try_advisory_xact_lock(hashtextextended('pgqueue:' || concurrency_key, 0))))
"""
_CLAIM_FRESH_ORDER = "ORDER BY priority DESC, run_after, id"
_CLAIM_FRESH_COLUMNS = "id, concurrency_key, priority, run_after"

_CLAIM_FRESH_ALL_QUEUES = f"""
    SELECT {_CLAIM_FRESH_COLUMNS} FROM {TABLE} j
    WHERE {_CLAIM_FRESH_FILTER}
    {_CLAIM_FRESH_ORDER}
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""

_CLAIM_FRESH_NAMED_QUEUES = f"""
    SELECT c.* FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, ord)
    CROSS JOIN LATERAL (
        SELECT {_CLAIM_FRESH_COLUMNS} FROM {TABLE} j
        WHERE j.queue = q.name AND {_CLAIM_FRESH_FILTER}
        {_CLAIM_FRESH_ORDER}
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
    LIMIT %(limit)s
"""

_CLAIM = """
WITH stale AS MATERIALIZED (
    SELECT id FROM pgqueue_job
    WHERE status = 'running' AND locked_at < now() - make_interval(secs => %(visibility)s)
      {stale_queue_filter}
    ORDER BY locked_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), fresh AS MATERIALIZED ({fresh}
), picked AS (
    SELECT id FROM stale
    UNION ALL
    (SELECT id FROM fresh WHERE concurrency_key IS NULL)
    UNION ALL
    (SELECT DISTINCT ON (concurrency_key) id FROM fresh WHERE concurrency_key IS NOT NULL
     ORDER BY concurrency_key, priority DESC, run_after, id)
    LIMIT %(limit)s
)
UPDATE pgqueue_job j SET
    status = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN 'dead'
             ELSE 'running' END,
    attempts = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN j.attempts
               ELSE j.attempts + 1 END,
    locked_at = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN NULL
                ELSE now() END,
    locked_by = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN j.locked_by
                ELSE %(worker)s END,
    started_at = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN j.started_at
                 ELSE now() END,
    finished_at = CASE WHEN j.status = 'running' AND j.attempts >= j.max_attempts THEN now()
                  ELSE NULL END,
    last_error = CASE WHEN j.status = 'running' THEN
        'WorkerLost: worker ' || coalesce(j.locked_by, '?') || ' stopped heartbeating during '
        || 'attempt ' || j.attempts || ' (lock taken at ' || j.locked_at || ')'
        ELSE j.last_error END,
    errors = CASE WHEN j.status = 'running' THEN j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts, 'worker_id', j.locked_by,
        'exception_class', 'django_pgqueue.exceptions.WorkerLost',
        'traceback', 'The worker stopped heartbeating; its lock expired.', 'at', now()))
        ELSE j.errors END
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {returning}
"""
CLAIM_ALL_QUEUES = _CLAIM.format(
    stale_queue_filter="",
    fresh=_CLAIM_FRESH_ALL_QUEUES,
    returning=", ".join(f"j.{c}" for c in JOB_COLUMNS),
)
CLAIM_NAMED_QUEUES = _CLAIM.format(
    stale_queue_filter="AND queue = ANY(%(queues)s::text[])",
    fresh=_CLAIM_FRESH_NAMED_QUEUES,
    returning=", ".join(f"j.{c}" for c in JOB_COLUMNS),
)


def claim(
    cursor: Cursor,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    visibility_timeout: float,
) -> list[tuple[Any, ...]]:
    """Claim up to ``limit`` jobs for ``worker_id``; rows in ``JOB_COLUMNS`` order.

    Rows whose status came back ``dead`` were abandoned jobs out of attempts: not to be run.
    """
    params: dict[str, Any] = {
        "worker": worker_id,
        "limit": limit,
        "visibility": visibility_timeout,
    }
    if queues:
        params["queues"] = list(queues)
        cursor.execute(CLAIM_NAMED_QUEUES, params)
    else:
        cursor.execute(CLAIM_ALL_QUEUES, params)
    return list(cursor.fetchall())


# ----- the worker's writes ------------------------------------------------------------------

HEARTBEAT = f"""
UPDATE {TABLE} SET locked_at = now()
WHERE id = ANY(%s) AND status = 'running' AND locked_by = %s
RETURNING id
"""

FINISH = f"""
UPDATE {TABLE} j SET
    status = d.status,
    run_after = coalesce(d.run_after, j.run_after),
    started_at = coalesce(d.started_at, j.started_at),
    finished_at = d.finished_at,
    result = d.result,
    locked_at = NULL,
    last_error = coalesce(d.error, j.last_error),
    errors = CASE WHEN d.error_entry IS NULL THEN j.errors
             ELSE j.errors || jsonb_build_array(d.error_entry) END
FROM (
    -- One JSON document of [id, status, run_after, started_at, finished_at, result, error,
    -- error_entry] rows: json.dumps builds it in C, where array parameters are dumped
    -- element by element in Python.
    SELECT (r->>0)::bigint AS id, r->>1 AS status, (r->>2)::timestamptz AS run_after,
           (r->>3)::timestamptz AS started_at, (r->>4)::timestamptz AS finished_at,
           (r->>5)::jsonb AS result, r->>6 AS error, (r->>7)::jsonb AS error_entry
    FROM jsonb_array_elements(%s::jsonb) AS t(r)
) d
WHERE j.id = d.id AND j.status = 'running' AND j.locked_by = %s
RETURNING j.id
"""

DELETE_FINISHED = f"""
DELETE FROM {TABLE} WHERE id = ANY(%s) AND status = 'running' AND locked_by = %s
RETURNING id
"""

RELEASE = f"""
UPDATE {TABLE} SET status = 'pending', attempts = greatest(attempts - 1, 0), locked_at = NULL,
    started_at = NULL
WHERE id = ANY(%s) AND status = 'running' AND locked_by = %s
RETURNING id
"""

PRUNE = f"""
DELETE FROM {TABLE} WHERE id IN (
    SELECT id FROM {TABLE}
    WHERE status = ANY(%s::text[]) AND finished_at < now() - make_interval(secs => %s)
    LIMIT %s
)
"""

NEXT_RUN_AFTER_ALL_QUEUES = f"""
SELECT min(run_after) FROM {TABLE} WHERE status = 'pending'
"""

NEXT_RUN_AFTER_NAMED_QUEUES = f"""
SELECT min(n) FROM unnest(%s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT min(run_after) AS n FROM {TABLE} WHERE status = 'pending' AND queue = q.name
) m
"""


class Finish(Protocol):
    """What the worker knows about one job when it ends an attempt."""

    @property
    def job_id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def run_after(self) -> datetime | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def result_json(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def error_entry_json(self) -> str | None: ...


def heartbeat(cursor: Cursor, worker_id: str, job_ids: Sequence[int]) -> set[int]:
    """Refresh the lock of jobs still owned by ``worker_id``; returns the ids it still owns."""
    cursor.execute(HEARTBEAT, [list(job_ids), worker_id])
    return {row[0] for row in cursor.fetchall()}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def finish(cursor: Cursor, worker_id: str, finishes: Sequence[Finish]) -> set[int]:
    """Record the end of many attempts in one statement; returns the ids written.

    A job missing from the result was no longer this worker's (its lock expired and another
    worker reclaimed it): its outcome is dropped, not written over the new owner's.
    """
    rows = [
        [
            f.job_id,
            f.status,
            _iso(f.run_after),
            _iso(f.started_at),
            _iso(f.finished_at),
            f.result_json,
            f.error,
            f.error_entry_json,
        ]
        for f in finishes
    ]
    cursor.execute(FINISH, [dumps(rows), worker_id])
    return {row[0] for row in cursor.fetchall()}


def delete_finished(cursor: Cursor, worker_id: str, job_ids: Sequence[int]) -> set[int]:
    """Delete completed jobs at once (``PGQUEUE_RETENTION = 0``)."""
    cursor.execute(DELETE_FINISHED, [list(job_ids), worker_id])
    return {row[0] for row in cursor.fetchall()}


def release(cursor: Cursor, worker_id: str, job_ids: Sequence[int]) -> set[int]:
    """Hand claimed-but-unstarted jobs back to ``pending`` without spending an attempt."""
    cursor.execute(RELEASE, [list(job_ids), worker_id])
    return {row[0] for row in cursor.fetchall()}


def prune(cursor: Cursor, statuses: Sequence[str], older_than: float, limit: int) -> int:
    """Delete at most ``limit`` finished jobs older than ``older_than`` seconds."""
    cursor.execute(PRUNE, [list(statuses), older_than, limit])
    return int(cursor.rowcount)


def next_run_after(cursor: Cursor, queues: Sequence[str] | None) -> datetime | None:
    """When the earliest pending job becomes runnable (None: no pending job)."""
    if queues:
        cursor.execute(NEXT_RUN_AFTER_NAMED_QUEUES, [list(queues)])
    else:
        cursor.execute(NEXT_RUN_AFTER_ALL_QUEUES)
    row = cursor.fetchone()
    return None if row is None else row[0]


# ----- the worker table ---------------------------------------------------------------------

UPSERT_WORKER = """
INSERT INTO pgqueue_worker
    (worker_id, hostname, pid, queues, threads, started_at, last_seen_at, jobs_done, stopped_at)
VALUES (%s, %s, %s, %s::jsonb, %s, now(), now(), %s, NULL)
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(), jobs_done = EXCLUDED.jobs_done, stopped_at = NULL
"""

STOP_WORKER = """
UPDATE pgqueue_worker SET stopped_at = now(), last_seen_at = now(), jobs_done = %s
WHERE worker_id = %s
"""

PRUNE_WORKERS = """
DELETE FROM pgqueue_worker WHERE last_seen_at < now() - make_interval(secs => %s)
"""
