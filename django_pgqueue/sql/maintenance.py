"""Statements that keep the tables small, and the worker table's rows."""

from __future__ import annotations

from django_pgqueue.sql import TABLE, WORKER_TABLE

PRUNE = f"""
DELETE FROM {TABLE} WHERE id IN (
    SELECT id FROM {TABLE}
    WHERE status = ANY(%s::text[]) AND finished_at < now() - make_interval(secs => %s)
    LIMIT %s
)
"""

UPSERT_WORKER = f"""
INSERT INTO {WORKER_TABLE}
    (worker_id, hostname, pid, queues, threads, started_at, last_seen_at, jobs_done, stopped_at)
VALUES (%s, %s, %s, %s::jsonb, %s, now(), now(), %s, NULL)
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(), jobs_done = EXCLUDED.jobs_done, stopped_at = NULL
"""

STOP_WORKER = f"""
UPDATE {WORKER_TABLE} SET stopped_at = now(), last_seen_at = now(), jobs_done = %s
WHERE worker_id = %s
"""

PRUNE_WORKERS = f"""
DELETE FROM {WORKER_TABLE} WHERE last_seen_at < now() - make_interval(secs => %s)
"""
