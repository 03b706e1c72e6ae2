"""Statements that put jobs in the table."""

from __future__ import annotations

from django_pgqueue.sql import NOTIFY_CHANNEL, SCHEDULE_CHANNEL, TABLE
from django_pgqueue.sql.control import CONTROL_CHANNEL
from django_pgqueue.states import ACTIVE, sql_list

INSERT_COLUMNS = (
    "queue",
    "name",
    "args",
    "kwargs",
    "priority",
    "run_after",
    "max_attempts",
    "unique_key",
    "concurrency_key",
    # The enqueue span's W3C context (docs/tracing.md): NULL without OpenTelemetry.
    "trace_context",
    # The job's kind: true for an ``async def`` job (docs/async.md).
    "is_async",
)

# Notifications (docs/worker.md, "How workers wake"): by default ``enqueue()`` notifies after
# its transaction commits (:data:`WAKE`), not in it: the lock PostgreSQL takes to commit a
# transaction that notified (``PreCommit_Notify``) serializes every such commit, WAL flush
# included, so many web processes enqueueing at once would commit one at a time. Each statement
# that inserts jobs sets ``pgqueue.notify`` for its transaction to the last parameter:
# ``'after_commit'`` keeps the insert trigger (migration ``0020_wake_rota``) out of it,
# ``'in_transaction'`` (``PGQUEUE_NOTIFY``) lets it notify. In ``RETURNING``, evaluated row by
# row before the statement's AFTER triggers run. Any other INSERT is notified by the trigger.
_NOTIFY_MODE = "set_config('pgqueue.notify', %s::text, true)"

# And whether the wake-up after the commit (:data:`WAKE`) would be heard: whether a worker
# serving the queue (the parameter after the notify mode) listens, as ``pgqueue_wake``
# (migration ``0020_wake_rota``) picks them: ``pgqueue_listened`` (migration ``0027_listened``),
# a PL/pgSQL function, so that its query is planned once per session, not with every unprepared
# statement that asks (0.15 ms of a single enqueue). When none does (no worker running, or polling
# workers only: PgBouncer in transaction mode), ``enqueue()`` sends none, and its commit is its
# last round trip. Read in the inserting statement, so at no cost of its own: a worker that
# starts listening between that statement and the commit misses this wake-up and finds the
# job at its first claim or its next poll. A scalar subquery: once per statement.
_LISTENED = "(SELECT pgqueue_listened(%s::text))"

INSERT_ONE = f"""
INSERT INTO {TABLE} ({", ".join(INSERT_COLUMNS)})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s, %s::jsonb,
        %s::boolean)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id, run_after, created_at, {_NOTIFY_MODE}, {_LISTENED}
"""

# Jobs with a limit above one or a rate (docs/control.md): two more columns. Only these
# statements name them, so the unlimited path's statements stay as they were.
_LIMITED_COLUMNS = (*INSERT_COLUMNS, "concurrency_limit", "rate_key")
INSERT_ONE_LIMITED = f"""
INSERT INTO {TABLE} ({", ".join(_LIMITED_COLUMNS)})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s, %s::jsonb,
        %s::boolean, %s, %s)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id, run_after, created_at, {_NOTIFY_MODE}, {_LISTENED}
"""

#: ``count`` ids from the job table's sequence, in order, and the transaction's ``now()`` (what
#: ``run_after`` defaults to), in one round trip and one row: the ids as one array (a row per
#: id cost a timestamp to decode in Python per job). The sequence is looked up once (a
#: MATERIALIZED CTE): in the select list, ``pg_get_serial_sequence`` ran per id, three catalog
#: lookups each, 3.5 of the 4 us per id this statement cost.
RESERVE_IDS = """
WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence(%s, 'id')::regclass AS seq),
ids AS MATERIALIZED (SELECT nextval(s.seq) AS id FROM s, generate_series(1, %s))
SELECT array_agg(id ORDER BY id), now() FROM ids
"""

#: A few jobs (``insert_many`` up to ``FEW_MAX``): one statement, one round trip, where the
#: reserved ids and COPY take three and a transaction. The rows go in in input order (the
#: subquery's ORDER BY is kept: a sorted subquery is never pulled up), and the identity's
#: ``nextval`` runs row by row in that order, so the ids sorted are the input's order.
INSERT_FEW = f"""
INSERT INTO {TABLE} (queue, name, args, kwargs, priority, run_after, max_attempts,
                     concurrency_key, trace_context, is_async)
SELECT %s, %s, u.a, u.k, %s, coalesce(%s, now()), %s, %s, %s::jsonb, %s::boolean
FROM (SELECT a, k FROM unnest(%s::jsonb[], %s::jsonb[]) WITH ORDINALITY AS u(a, k, n)
      ORDER BY n) u
RETURNING id, run_after, {_NOTIFY_MODE}, {_LISTENED}
"""

COPY_MANY = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              is_async)
FROM STDIN
"""

COPY_MANY_LIMITED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              is_async, concurrency_limit, rate_key)
FROM STDIN
"""

# Jobs enqueued in a trace (docs/tracing.md): the same, and each row's trace_context. Only these
# name it: without OpenTelemetry, COPY writes no NULL for it in every row.
COPY_MANY_TRACED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              is_async, trace_context)
FROM STDIN
"""

COPY_MANY_LIMITED_TRACED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              is_async, concurrency_limit, rate_key, trace_context)
FROM STDIN
"""

#: Before a COPY of jobs: the trigger leaves this transaction out, or not (``_NOTIFY_MODE``),
#: and whether a worker would hear the wake-up (``_LISTENED``).
NOTIFY_MODE = f"SELECT {_NOTIFY_MODE}, {_LISTENED}"

#: Wake a worker of each of the queues ``%(queues)s`` (``%(jobs)s`` jobs each, the first one's
#: id ``%(tickets)s``, their kinds ``%(kinds)s``: ``'s'``, ``'a'``, ``'sa'`` or NULL, unknown),
#: once the jobs' transaction committed: ``pgqueue_wake`` (migrations ``0020_wake_rota``,
#: ``0026_wake_kinds``) notifies, for each queue, the worker the ticket picks among the live
#: listening workers of the queue (the rota, ``worker.rota``), on its own channel (none
#: listening: nothing). In a
#: transaction of its own that commits without waiting for its WAL flush: a notification lost
#: in a crash costs a poll, never a job.
WAKE = """SELECT set_config('synchronous_commit', 'off', true),
    pgqueue_wake(%(queues)s::text[], %(jobs)s::int[], %(tickets)s::bigint[], %(kinds)s::text[])"""

#: A worker passes a wake on to the next worker of the rota (it had no room for the jobs, or
#: took as many as it could), on that worker's ``%(channel)s``: ``%(queue)s``, the next
#: ``%(ticket)s``, the ``%(jobs)s`` it did not take, the ``%(hops)s`` so far, the jobs'
#: ``%(kinds)s`` (NULL: unknown).
PASS_WAKE = """SELECT set_config('synchronous_commit', 'off', true),
    pg_notify(%(channel)s::text, %(queue)s::text || ' ' || %(ticket)s::bigint || ' '
              || %(jobs)s::int || ' ' || %(hops)s::int || coalesce(' ' || %(kinds)s::text, ''))"""
#: The workers' listener subscribes to these: new jobs (the trigger and ``NOTIFY``), control
#: requests (cancel) and schedule changes.
LISTEN = {
    channel: f"LISTEN {channel}" for channel in (NOTIFY_CHANNEL, CONTROL_CHANNEL, SCHEDULE_CHANNEL)
}
#: The worker's own channel (``sql.rota.channel``: ``pgqueue.`` and hex digits, quoted).
LISTEN_OWN = 'LISTEN "{channel}"'
#: A worker's own channel, once no process of the relay's (``worker.relay``) listens on it.
UNLISTEN_OWN = 'UNLISTEN "{channel}"'
