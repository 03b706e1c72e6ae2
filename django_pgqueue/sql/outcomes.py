"""Statements of a claimed job's life: heartbeat, finish, hand back; when to look again."""

from __future__ import annotations

from django_pgqueue.sql import TABLE, readable_timestamp
from django_pgqueue.sql.queues import not_paused
from django_pgqueue.states import JobStatus

_RUNNING = f"'{JobStatus.RUNNING.value}'"
_PENDING = f"'{JobStatus.PENDING.value}'"
_CANCELLED = f"'{JobStatus.CANCELLED.value}'"
# A job asked to stop while it ran ends cancelled, whatever its attempt's outcome.
_ASKED_TO_STOP = "j.cancel_requested_at IS NOT NULL"

HEARTBEAT = f"""
UPDATE {TABLE} SET locked_at = now()
WHERE id = ANY(%s) AND status = {_RUNNING} AND locked_by = %s
RETURNING id, cancel_requested_at IS NOT NULL
"""

FINISH = f"""
UPDATE {TABLE} j SET
    status = CASE WHEN {_ASKED_TO_STOP} THEN {_CANCELLED} ELSE d.status END,
    run_after = coalesce(d.run_after, j.run_after),
    started_at = coalesce(d.started_at, j.started_at),
    finished_at = CASE WHEN {_ASKED_TO_STOP} THEN coalesce(d.finished_at, now())
                  ELSE d.finished_at END,
    result = d.result,
    locked_at = NULL,
    -- A retry waits unowned; a finished job keeps the worker that ran its last attempt.
    locked_by = CASE WHEN d.status = {_PENDING} THEN NULL ELSE j.locked_by END,
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
WHERE j.id = d.id AND j.status = {_RUNNING} AND j.locked_by = %s
RETURNING j.id
"""

DELETE_FINISHED = f"""
DELETE FROM {TABLE} WHERE id = ANY(%s) AND status = {_RUNNING} AND locked_by = %s
RETURNING id
"""

RELEASE = f"""
UPDATE {TABLE} j SET
    status = CASE WHEN {_ASKED_TO_STOP} THEN {_CANCELLED} ELSE {_PENDING} END,
    finished_at = CASE WHEN {_ASKED_TO_STOP} THEN now() END,
    attempts = greatest(attempts - 1, 0), locked_at = NULL, locked_by = NULL, started_at = NULL
WHERE id = ANY(%s) AND status = {_RUNNING} AND locked_by = %s
RETURNING id
"""

NEXT_RUN_AFTER_ALL_QUEUES = f"""
SELECT {readable_timestamp("min(run_after)")} FROM {TABLE} WHERE status = {_PENDING}
"""

NEXT_RUN_AFTER_NAMED_QUEUES = f"""
SELECT {readable_timestamp("min(n)")} FROM unnest(%s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT min(run_after) AS n FROM {TABLE} WHERE status = {_PENDING} AND queue = q.name
) m
"""

# The same, leaving out paused queues (while any queue has settings: docs/control.md).
CONTROLLED_NEXT_RUN_AFTER_ALL_QUEUES = f"""
SELECT min(run_after) FROM {TABLE} j WHERE status = {_PENDING} AND {not_paused("j.queue")}
"""

CONTROLLED_NEXT_RUN_AFTER_NAMED_QUEUES = f"""
SELECT min(n) FROM unnest(%s::text[]) AS q(name)
CROSS JOIN LATERAL (
    SELECT min(run_after) AS n FROM {TABLE} WHERE status = {_PENDING} AND queue = q.name
) m
WHERE {not_paused("q.name")}
"""
