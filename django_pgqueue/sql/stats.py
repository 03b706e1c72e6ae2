"""The dashboard's and ``pgqueue_status``'s statements: counts that stay cheap on big tables.

Run by :mod:`django_pgqueue.operations.stats`; :mod:`django_pgqueue.stats` explains the limits
(caps, estimates) they are built around.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.states import FINISHED, PRIORITY_MAX, PRIORITY_MIN, Event, JobStatus, sql_list

_PENDING = sql_list([JobStatus.PENDING])
_RUNNING = sql_list([JobStatus.RUNNING])
_COMPLETED = sql_list([JobStatus.COMPLETED])
_DEAD = sql_list([JobStatus.DEAD])
_WAITING = sql_list([JobStatus.WAITING])

TABLE_BYTES = "SELECT pg_relation_size(%s::regclass)"
#: These statements are cheap by design; compiling them would cost more than running them.
NO_JIT = "SET LOCAL jit = off"
STATEMENT_TIMESTAMP = "SELECT statement_timestamp()"
#: The planner's estimate of a statement's rows (prefix of the statement).
EXPLAIN_JSON = "EXPLAIN (FORMAT JSON) "

EXACT_COUNTS = f"""
SELECT queue,
    count(*) FILTER (WHERE status = {_PENDING} AND run_after <= statement_timestamp()),
    count(*) FILTER (WHERE status = {_PENDING} AND run_after > statement_timestamp()),
    count(*) FILTER (WHERE status = {_RUNNING}),
    count(*) FILTER (WHERE status = {_COMPLETED}),
    count(*) FILTER (WHERE status = {_DEAD}),
    count(*) FILTER (WHERE status = {_WAITING}),
    min(run_after) FILTER (WHERE status = {_PENDING} AND run_after <= statement_timestamp())
FROM {TABLE}
GROUP BY queue
"""

# The rows each capped count reads, by the partial index its WHERE clause implies ({q}: the
# queue, a column or a placeholder).
RUNNABLE = f"status = {_PENDING} AND queue = {{q}} AND run_after <= statement_timestamp()"
SCHEDULED = f"status = {_PENDING} AND queue = {{q}} AND run_after > statement_timestamp()"
RUNNING = f"status = {_RUNNING} AND queue = {{q}}"
DEAD = f"status = {_DEAD} AND queue = {{q}}"
COMPLETED = f"status = {_COMPLETED} AND queue = {{q}}"
WAITING = f"status = {_WAITING} AND queue = {{q}}"


def select_where(where: str) -> str:
    """``SELECT 1`` of the rows of one queue (``%s``) matching one of the conditions above."""
    return f"SELECT 1 FROM {TABLE} WHERE " + where.format(q="%s")


# Each count reads at most %(cap)s index entries of one partial index.
_CAPPED = "(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT %(cap)s) s)"

# The oldest runnable job of a queue: one probe of the claim index per priority instead of
# reading every pending row of the queue.
_OLDEST_RUNNABLE = f"""(
    SELECT min(m.run_after) FROM generate_series({PRIORITY_MIN}, {PRIORITY_MAX}) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT run_after FROM {TABLE}
        WHERE status = {_PENDING} AND queue = q.name AND priority = p.priority
        ORDER BY run_after LIMIT 1
    ) m
    WHERE m.run_after <= statement_timestamp()
)"""

CAPPED_COUNTS = f"""
SELECT q.name,
    {_CAPPED.format(table=TABLE, where=RUNNABLE.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=SCHEDULED.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=RUNNING.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=DEAD.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=WAITING.format(q="q.name"))},
    {_OLDEST_RUNNABLE}
FROM unnest(%(queues)s::text[]) AS q(name)
"""

# Distinct queues among jobs of one status: a loose scan of the partial index that leads with
# ``queue`` (one index probe per queue).
_LOOSE_QUEUES = f"""
WITH RECURSIVE t(queue) AS (
    (SELECT queue FROM {TABLE} WHERE status = {{status}} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {TABLE} j WHERE j.status = {{status}} AND j.queue > t.queue
            ORDER BY j.queue LIMIT 1)
    FROM t WHERE t.queue IS NOT NULL
)
SELECT queue FROM t WHERE queue IS NOT NULL
"""
#: The queues of pending, then dead jobs (each status has a partial index leading with queue).
LOOSE_QUEUES = (_LOOSE_QUEUES.format(status=_PENDING), _LOOSE_QUEUES.format(status=_DEAD))
RUNNING_QUEUES = f"SELECT DISTINCT queue FROM {TABLE} WHERE status = {_RUNNING}"
COMMON_VALUES = """
SELECT most_common_vals::text::text[] FROM pg_stats
WHERE schemaname = current_schema() AND tablename = %s AND attname = %s
"""
#: The distinct values of a column (small tables only), by column.
DISTINCT = {column: f"SELECT DISTINCT {column} FROM {TABLE}" for column in ("queue", "name")}

# The last hour: completions per queue and minute, and failed attempts (from each job's error
# history: jobs that finished in the hour, and pending or running jobs that failed in it).
# Minute 0 is the last minute (and holds events stamped a little ahead of the database's clock).
# The row of kind Event.SCANNED says how many finished rows were read and the minute of the
# oldest (to detect the cap).
LAST_HOUR = f"""
WITH finished AS MATERIALIZED (
    SELECT queue, status = {_COMPLETED} AS completed, finished_at,
           CASE WHEN errors = '[]'::jsonb THEN NULL ELSE errors END AS errors
    FROM {TABLE}
    WHERE status IN ({sql_list(FINISHED)})
      AND finished_at > statement_timestamp() - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
), failing AS MATERIALIZED (
    (SELECT queue, errors FROM {TABLE}
     WHERE status = {_PENDING} AND errors <> '[]'
       AND run_after > statement_timestamp() - interval '1 hour'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, errors FROM {TABLE} WHERE status = {_RUNNING} AND errors <> '[]' LIMIT %(cap)s)
), failures AS (
    SELECT f.queue, (e ->> 'at')::timestamptz AS at
    FROM (SELECT queue, errors FROM finished WHERE errors IS NOT NULL
          UNION ALL
          SELECT queue, errors FROM failing) f
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE jsonb_typeof(f.errors) WHEN 'array' THEN f.errors ELSE '[]' END) e
    WHERE e ->> 'at' ~ '^\\d{{4}}-\\d\\d-\\d\\d'
), events AS (
    SELECT queue, finished_at AS at, '{Event.COMPLETED.value}' AS kind FROM finished WHERE completed
    UNION ALL
    SELECT queue, at, '{Event.FAILED.value}' FROM failures
    WHERE at > statement_timestamp() - interval '1 hour'
), clock AS (
    SELECT date_part('epoch', statement_timestamp()) AS now
)
SELECT queue, kind, greatest(floor((clock.now - date_part('epoch', at)) / 60)::int, 0), count(*)
FROM events, clock
GROUP BY 1, 2, 3
UNION ALL
SELECT NULL, '{Event.SCANNED.value}',
       floor((clock.now - date_part('epoch', min(finished_at))) / 60)::int, count(*)
FROM finished, clock
GROUP BY clock.now
"""
