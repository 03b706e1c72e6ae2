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
)

# Notifications (docs/worker.md, "How workers wake"): ``enqueue()`` notifies after its
# transaction commits (:data:`WAKE`), not in it: the lock PostgreSQL takes to commit a
# transaction that notified (``PreCommit_Notify``) serializes every such commit, WAL flush
# included, so many web processes enqueueing at once would commit one at a time. Each statement
# that inserts jobs sets ``pgqueue.notify`` for its transaction so that the insert trigger
# (migration ``0020_notify_tickets``) leaves it out: in ``RETURNING``, evaluated row by row
# before the statement's AFTER triggers run. Any other INSERT is notified by the trigger.
_DEFER = "set_config('pgqueue.notify', 'after_commit', true)"

INSERT_ONE = f"""
INSERT INTO {TABLE} ({", ".join(INSERT_COLUMNS)})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s, %s::jsonb)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id, run_after, created_at, {_DEFER}
"""

# Jobs with a limit above one or a rate (docs/control.md): two more columns. Only these
# statements name them, so the unlimited path's statements stay as they were.
_LIMITED_COLUMNS = (*INSERT_COLUMNS, "concurrency_limit", "rate_key")
INSERT_ONE_LIMITED = f"""
INSERT INTO {TABLE} ({", ".join(_LIMITED_COLUMNS)})
VALUES (%s, %s, %s::jsonb, %s::jsonb, %s, coalesce(%s, now()), %s, %s, %s, %s::jsonb, %s, %s)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ({sql_list(ACTIVE)})
DO NOTHING
RETURNING id, run_after, created_at, {_DEFER}
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
                     concurrency_key, trace_context)
SELECT %s, %s, u.a, u.k, %s, coalesce(%s, now()), %s, %s, %s::jsonb
FROM (SELECT a, k FROM unnest(%s::jsonb[], %s::jsonb[]) WITH ORDINALITY AS u(a, k, n)
      ORDER BY n) u
RETURNING id, run_after, {_DEFER}
"""

COPY_MANY = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key)
FROM STDIN
"""

COPY_MANY_LIMITED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              concurrency_limit, rate_key)
FROM STDIN
"""

# Jobs enqueued in a trace (docs/tracing.md): the same, and each row's trace_context. Only these
# name it: without OpenTelemetry, COPY writes no NULL for it in every row.
COPY_MANY_TRACED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              trace_context)
FROM STDIN
"""

COPY_MANY_LIMITED_TRACED = f"""
COPY {TABLE} (id, queue, name, args, kwargs, priority, run_after, max_attempts, concurrency_key,
              concurrency_limit, rate_key, trace_context)
FROM STDIN
"""

#: Before a COPY of jobs: the trigger leaves this transaction out (see ``_DEFER``).
DEFER_NOTIFY = f"SELECT {_DEFER}"

#: Wake the workers of the queues ``%s`` (``%s`` jobs each), once the jobs' transaction
#: committed: one notification a queue, ``'<queue> <ticket> <jobs>'``, the ticket (this
#: transaction's id) picking the listening worker that claims (``worker.rota``). In a
#: transaction of its own that commits without waiting for its WAL flush: a notification lost
#: in a crash costs a poll, never a job.
WAKE = f"""SELECT set_config('synchronous_commit', 'off', true),
    pg_notify('{NOTIFY_CHANNEL}', w.q || ' ' || txid_current() || ' ' || w.n)
FROM unnest(%s::text[], %s::int[]) AS w(q, n)"""

#: A worker passes a wake on to the next worker of the rota (it had no room for the jobs, or
#: took as many as it could): ``%(queue)s``, the next ``%(ticket)s``, the ``%(jobs)s`` it did
#: not take, the ``%(hops)s`` so far.
PASS_WAKE = f"""SELECT set_config('synchronous_commit', 'off', true),
    pg_notify('{NOTIFY_CHANNEL}', %(queue)s::text || ' ' || %(ticket)s::bigint || ' '
              || %(jobs)s::int || ' ' || %(hops)s::int)"""
#: The workers' listener subscribes to these: new jobs (the trigger and ``NOTIFY``), control
#: requests (cancel) and schedule changes.
LISTEN = {
    channel: f"LISTEN {channel}" for channel in (NOTIFY_CHANNEL, CONTROL_CHANNEL, SCHEDULE_CHANNEL)
}
