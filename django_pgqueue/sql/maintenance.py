"""Statements that keep the tables small, and the worker table's rows."""

from __future__ import annotations

from django_pgqueue.sql import TABLE, WORKER_TABLE
from django_pgqueue.sql.flow import BATCH_TABLE, KEEP_PARENT
from django_pgqueue.states import PRUNED_AFTER_RETENTION, JobStatus, sql_list


def _prune(statuses: tuple[str, ...]) -> str:
    """Finished jobs of ``statuses`` past a retention, in a batch. The statuses are constants,
    not a parameter: the worker's connection plans its statements once, for any parameters
    (``plan_cache_mode = force_generic_plan``), and only a constant list lets the planner prove
    the finished-jobs partial index applies (with an array parameter it read the job table's
    every row by primary key: 6 ms per call with 20,000 jobs waiting). A parent is kept while
    a dependent of it has not ended (F4 in docs/storage.md)."""
    return f"""
DELETE FROM {TABLE} WHERE id IN (
    SELECT j.id FROM {TABLE} j
    WHERE j.status IN ({sql_list(statuses)})
      AND j.finished_at < now() - make_interval(secs => %s)
      AND {KEEP_PARENT}
    LIMIT %s
)
"""


#: Completed and cancelled jobs past ``PGQUEUE_RETENTION``; dead ones past their own.
PRUNE = _prune(PRUNED_AFTER_RETENTION)
PRUNE_DEAD = _prune((JobStatus.DEAD.value,))

#: Batches finished for longer than ``PGQUEUE_RETENTION`` whose members are all pruned
#: (docs/workflows.md); their tallies go with them (the trigger ``pgqueue_batch_delete``).
PRUNE_BATCHES = f"""
DELETE FROM {BATCH_TABLE} WHERE id IN (
    SELECT b.id FROM {BATCH_TABLE} b
    WHERE b.finished_at < now() - make_interval(secs => %s)
      AND NOT EXISTS (SELECT 1 FROM {TABLE} j WHERE j.batch_id = b.id)
    LIMIT %s)
"""

#: The worker's row, inserted or refreshed; returns the host and pid the row named before (no
#: row for a new one: the upsert runs all the same, as every data-modifying CTE does). A
#: process that takes over the row of another (a restart under the same ``--worker-id``)
#: starts it afresh.
UPSERT_WORKER = f"""
WITH before AS (SELECT hostname, pid FROM {WORKER_TABLE} WHERE worker_id = %(id)s),
upserted AS (
    INSERT INTO {WORKER_TABLE} AS w
        (worker_id, hostname, pid, queues, threads, started_at, last_seen_at, jobs_done,
         stopped_at, abandoned, listening, listener)
    VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s::jsonb, %(threads)s, now(), now(),
            %(jobs_done)s, NULL, %(abandoned)s::jsonb, %(listening)s::boolean, %(listener)s)
    ON CONFLICT (worker_id) DO UPDATE
    SET last_seen_at = now(), jobs_done = EXCLUDED.jobs_done, stopped_at = NULL,
        hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
        threads = EXCLUDED.threads, abandoned = EXCLUDED.abandoned,
        listening = EXCLUDED.listening, listener = EXCLUDED.listener,
        started_at = CASE WHEN (w.hostname, w.pid) = (EXCLUDED.hostname, EXCLUDED.pid)
                     THEN w.started_at ELSE now() END
)
SELECT hostname, pid FROM before
"""

STOP_WORKER = f"""
UPDATE {WORKER_TABLE} SET stopped_at = now(), last_seen_at = now(), jobs_done = %s,
    abandoned = '[]'::jsonb, listening = false
WHERE worker_id = %s
"""

PRUNE_WORKERS = f"""
DELETE FROM {WORKER_TABLE} WHERE last_seen_at < now() - make_interval(secs => %s)
"""
