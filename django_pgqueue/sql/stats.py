"""The statements of the dashboard, ``pgqueue_status`` and the metrics view: counts that stay
cheap on big tables, and under a pinned xmin horizon.

Run by :mod:`django_pgqueue.operations.stats`; :mod:`django_pgqueue.stats` explains the limits
(caps, estimates) they are built around. None reads an index that every job passing through
the queue leaves an entry in (the job table's pending and running indexes): a transaction
holding the xmin horizon back would make each count walk the dead entries of every job run
since. Pending jobs are counted from their ready rows, running jobs over the locks of the last
visibility timeout.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.sql.ready import LATER_SLOT, READY_TABLE
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

# A running job whose lock is fresh: taken or renewed (the claim, each heartbeat) within the
# visibility timeout (``%(fresh)s`` seconds), so no stale claim may take it back yet. The
# counts read only these: under a pinned xmin horizon the running-jobs index
# (``pgqueue_job_stale``, by ``locked_at``) keeps an entry for every job finished since, and
# this range holds those of the last visibility timeout only, however long the horizon is
# pinned (the stale claim reads that index by ranges for the same reason).
_FRESH_LOCK = "locked_at >= statement_timestamp() - make_interval(secs => %(fresh)s)"

EXACT_COUNTS = f"""
SELECT queue,
    count(*) FILTER (WHERE status = {_PENDING} AND run_after <= statement_timestamp()),
    count(*) FILTER (WHERE status = {_PENDING} AND run_after > statement_timestamp()),
    count(*) FILTER (WHERE status = {_RUNNING} AND {_FRESH_LOCK}),
    count(*) FILTER (WHERE status = {_COMPLETED}),
    count(*) FILTER (WHERE status = {_DEAD}),
    count(*) FILTER (WHERE status = {_WAITING}),
    min(run_after) FILTER (WHERE status = {_PENDING} AND run_after <= statement_timestamp())
FROM {TABLE}
GROUP BY queue
"""

# The rows each capped count reads ({q}: the queue, a column or a placeholder). Pending jobs
# are counted from their ready rows (``pgqueue_ready``): one per pending job, copying its queue
# and run_after (S1-S3 in docs/storage.md), in partitions the claims empty and TRUNCATE, so a
# pinned horizon leaves few dead entries there, where the job table's index of pending jobs
# keeps one for every job claimed since. A row of the ring, the parked or the held partition is
# due (it went there due, S5), a row of the later partition is due once its run_after passed
# (the upkeep promotes it within a second): the runnable jobs are the first and the due ones of
# the second, the scheduled ones the rest of the second. Dead and waiting jobs are read through
# their partial indexes.
RUNNABLE = "queue = {q} AND run_after <= statement_timestamp()"
SCHEDULED = f"slot = {LATER_SLOT} AND queue = {{q}} AND run_after > statement_timestamp()"
_RUNNABLE_IN_PLACE = f"slot <> {LATER_SLOT} AND queue = {{q}}"
_RUNNABLE_LATER = f"slot = {LATER_SLOT} AND queue = {{q}} AND run_after <= statement_timestamp()"
DEAD = f"status = {_DEAD} AND queue = {{q}}"
COMPLETED = f"status = {_COMPLETED} AND queue = {{q}}"
WAITING = f"status = {_WAITING} AND queue = {{q}}"
#: The table each condition above reads.
TABLE_OF = {RUNNABLE: READY_TABLE, SCHEDULED: READY_TABLE}


def select_where(where: str) -> str:
    """``SELECT 1`` of the rows of one queue (``%s``) matching one of the conditions above."""
    return f"SELECT 1 FROM {TABLE_OF.get(where, TABLE)} WHERE " + where.format(q="%s")


# Each count reads at most %(cap)s matching entries of one index.
_CAPPED = "(SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT %(cap)s) s)"

# The runnable ready rows of a queue matching ``where``: how many (at most %(cap)s read), and
# the oldest run_after among those read.
_RUNNABLE_ROWS = f"""(
    SELECT count(*) AS n, min(run_after) AS oldest FROM (
        SELECT run_after FROM {READY_TABLE} WHERE {{where}} LIMIT %(cap)s
    ) s
)"""

# The oldest runnable job of a queue over the cap: one probe of the ready rows' claim order
# per priority instead of reading every ready row of the queue. Under the cap, the counts read
# every runnable row, and their minimum is the answer.
_OLDEST_RUNNABLE = f"""(
    SELECT min(m.run_after) FROM generate_series({PRIORITY_MIN}, {PRIORITY_MAX}) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT run_after FROM {READY_TABLE}
        WHERE queue = q.name AND priority = p.priority
        ORDER BY run_after LIMIT 1
    ) m
    WHERE m.run_after <= statement_timestamp()
)"""

CAPPED_COUNTS = f"""
SELECT q.name,
    in_place.n + later.n,
    {_CAPPED.format(table=READY_TABLE, where=SCHEDULED.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=DEAD.format(q="q.name"))},
    {_CAPPED.format(table=TABLE, where=WAITING.format(q="q.name"))},
    CASE WHEN in_place.n < %(cap)s AND later.n < %(cap)s
         THEN least(in_place.oldest, later.oldest)
         ELSE {_OLDEST_RUNNABLE} END
FROM unnest(%(queues)s::text[]) AS q(name)
CROSS JOIN LATERAL {_RUNNABLE_ROWS.format(where=_RUNNABLE_IN_PLACE.format(q="q.name"))} in_place
CROSS JOIN LATERAL {_RUNNABLE_ROWS.format(where=_RUNNABLE_LATER.format(q="q.name"))} later
"""

#: Running jobs per queue, of every queue at once, those whose lock is fresh (above): at most
#: %(cap)s of them read in all.
RUNNING_COUNTS = f"""
SELECT queue, count(*) FROM (
    SELECT queue FROM {TABLE} WHERE status = {_RUNNING} AND {_FRESH_LOCK} LIMIT %(cap)s
) r
GROUP BY queue
"""

# Distinct queues of some rows of a table: a loose scan of an index that leads with ``queue``
# (one index probe per queue).
_LOOSE_QUEUES = """
WITH RECURSIVE t(queue) AS (
    (SELECT queue FROM {table} WHERE {where} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {table} j WHERE {where} AND j.queue > t.queue
            ORDER BY j.queue LIMIT 1)
    FROM t WHERE t.queue IS NOT NULL
)
SELECT queue FROM t WHERE queue IS NOT NULL
"""
#: The queues of pending jobs (their ready rows: every partition has an index leading with
#: queue), then of dead jobs (a partial index leading with queue).
LOOSE_QUEUES = (
    _LOOSE_QUEUES.format(table=READY_TABLE, where="true"),
    _LOOSE_QUEUES.format(table=TABLE, where=f"status = {_DEAD}"),
)
COMMON_VALUES = """
SELECT most_common_vals::text::text[] FROM pg_stats
WHERE schemaname = current_schema() AND tablename = %s AND attname = %s
"""
#: The distinct values of a column (small tables only), by column.
DISTINCT = {column: f"SELECT DISTINCT {column} FROM {TABLE}" for column in ("queue", "name")}

# The last hour: completions per queue and minute, and failed attempts (from each job's error
# history: jobs that finished in the hour, and pending or running jobs that failed in it; the
# pending ones found by their ready rows, each job then by primary key (``status || ''``
# keeps the planner off the pending jobs' index), the running ones among the fresh locks, as
# the counts find them).
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
    (SELECT j.queue, j.errors FROM {READY_TABLE} r JOIN {TABLE} j ON j.id = r.job_id
     WHERE r.run_after > statement_timestamp() - interval '1 hour'
       AND j.status || '' = {_PENDING} AND j.errors <> '[]'
     LIMIT %(cap)s)
    UNION ALL
    (SELECT queue, errors FROM {TABLE}
     WHERE status = {_RUNNING} AND {_FRESH_LOCK} AND errors <> '[]'
     LIMIT %(cap)s)
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
