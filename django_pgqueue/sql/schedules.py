"""Statements of periodic schedules: firing due ticks, "run now", telling workers."""

from __future__ import annotations

from django_pgqueue.sql import SCHEDULE_TABLE, TABLE
from django_pgqueue.states import ACTIVE, sql_list

#: The database's clock (ticks are compared with it, not the worker's) and the next tick due.
NOW_AND_NEXT_DUE = f"SELECT clock_timestamp(), min(next_run_at) FROM {SCHEDULE_TABLE} WHERE enabled"

#: Due schedules, locked: another worker skips them and fires the others. Locked in one
#: transaction with the INSERT of their ticks' jobs and the UPDATE that advances them.
LOCK_DUE = f"""
SELECT id, name, job, cron, every, timezone, queue, priority, catch_up, next_run_at
FROM {SCHEDULE_TABLE}
WHERE enabled AND next_run_at <= %s
ORDER BY next_run_at, id
LIMIT %s
FOR UPDATE SKIP LOCKED
"""

#: One job per tick (``run_after`` is the tick; a NULL tick is "now", for "run now"), arguments
#: straight from the schedule's row.
#: A tick whose unique key is still in use by an active job is skipped, as ``enqueue`` would.
#: The job's limits come from its declaration, as ``enqueue`` gives them.
INSERT_TICKS = f"""
INSERT INTO {TABLE} (queue, name, args, kwargs, priority, run_after, max_attempts, unique_key,
                     concurrency_key, concurrency_limit, rate_key, is_async, schedule)
SELECT coalesce(s.queue, %s), s.job, s.args, s.kwargs, coalesce(s.priority, %s),
       coalesce(t.tick, now()), %s, %s, %s, %s, %s, %s::boolean, s.name
FROM {SCHEDULE_TABLE} s CROSS JOIN unnest(%s::timestamptz[]) AS t(tick)
WHERE s.id = %s
ORDER BY t.tick
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id
"""

ADVANCE = f"""
UPDATE {SCHEDULE_TABLE} SET next_run_at = %s, last_run_at = coalesce(%s, last_run_at)
WHERE id = %s
"""

#: A schedule whose row cannot be fired (invalid timing stored behind the admin's back): it
#: stops being due, and shows as broken, until someone fixes it.
UNSCHEDULE = f"UPDATE {SCHEDULE_TABLE} SET next_run_at = NULL WHERE id = %s"

#: Serializes syncs of code declarations (workers starting together, migrate).
SYNC_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('pgqueue:schedule-sync', 0))"
