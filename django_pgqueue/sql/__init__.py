"""Every SQL statement of the queue, as named constants, and nothing that runs them.

The statements are grouped by what they serve: :mod:`.enqueue`, :mod:`.claim`,
:mod:`.outcomes` (heartbeat, finish, release), :mod:`.maintenance` (pruning, the worker table),
:mod:`.stats` (the dashboard's counts), :mod:`.admin` (the admin's search), :mod:`.testing`
(what :func:`django_pgqueue.testing.run_jobs` adds), :mod:`.ready`, :mod:`.parked` and
:mod:`.held` (the ready ring and its partitions). The schema they run against is
``schema.sql``, whole: tables, indexes, the trigger functions (``make schema`` writes it from
the migrations, which carry their DDL frozen and never import these modules).
:mod:`django_pgqueue.operations` is the only code that executes them; its functions take a
DB-API cursor (Django's cursor wrapper or a raw psycopg cursor: both use ``%s`` placeholders),
so the ORM side and the worker's own connection share the same SQL. States are spelled through
:func:`django_pgqueue.states.sql_list`, never as literals.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from django_pgqueue.states import JobStatus, sql_list

TABLE = "pgqueue_job"
WORKER_TABLE = "pgqueue_worker"
NOTIFY_CHANNEL = "pgqueue"
SCHEDULE_TABLE = "pgqueue_schedule"
#: Sent (by a trigger) when a transaction changed schedules: workers look at them again.
SCHEDULE_CHANNEL = "pgqueue_schedules"

#: A comment a statement holds to be planned at each execution, never prepared by the worker's
#: connection (``worker.connection``), whose prepared statements keep one generic plan each. A
#: statement that joins the job table with a set of rows (the outcome writes) gets its join
#: from the table's size: made while the table was empty (a queue idle, then a burst), the plan
#: is a nested loop over the whole table materialized, and kept, it read every job row for
#: each write, 6 million rows compared for 300 outcomes on 20,000 jobs, until autovacuum
#: analyzed the table again. Planned at each execution it follows the table (0.1 ms a write).
PLANNED_EACH_TIME = "-- planned at each execution"

#: The statuses as SQL literals, for the statements (spelled once, in ``states``).
PENDING = sql_list([JobStatus.PENDING])
RUNNING = sql_list([JobStatus.RUNNING])
COMPLETED = sql_list([JobStatus.COMPLETED])
DEAD = sql_list([JobStatus.DEAD])
CANCELLED = sql_list([JobStatus.CANCELLED])


#: A claim statement's token (``0018_claim_token``): taken once per statement (an InitPlan) and
#: written on every job it claims; the writes about a claimed job are fenced by it
#: (``sql.outcomes``).
NEXT_CLAIM_TOKEN = "(SELECT nextval('pgqueue_claim_token'))"


def claim_order(row: str = "", job_id: str = "job_id") -> str:
    """The claims' order over a row (``row``: its alias with the dot, ``job_id``: its id
    column): a higher priority first, then the earlier ``run_after``, then the older job. The
    one place it is spelled; the ready table's indexes follow it."""
    return f"{row}priority DESC, {row}run_after, {row}{job_id}"


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
    "schedule",
    "claim_token",
    # The enqueue span's W3C context, for the run's span (NULL, and never decoded, without it).
    "trace_context",
    # The job's kind: an ``async def`` job runs on the worker's event loop (docs/async.md).
    "is_async",
)

# PostgreSQL's timestamptz reaches from 4713 BC to 294276 AD, and +-infinity; Python's datetime
# holds years 1 to 9999. A row written by hand with a timestamp outside that range would make
# the driver fail on the whole claim (after the claim was committed): the worker reads its
# timestamps clamped into Python's range. '-infinity' reads as the first moment of year 1.
_TIMESTAMP_COLUMNS = frozenset(
    {"run_after", "locked_at", "created_at", "started_at", "finished_at"}
)
_PYTHON_MIN = "'0001-01-01 00:00:00+00'::timestamptz"
_PYTHON_MAX = "'9999-12-31 23:59:59.999999+00'::timestamptz"


def readable_timestamp(expression: str) -> str:
    """SQL for ``expression`` (a timestamptz) clamped into what Python's datetime holds.

    A CASE, not least/greatest, which would turn NULL into a bound."""
    return (
        f"CASE WHEN {expression} < {_PYTHON_MIN} THEN {_PYTHON_MIN} "
        f"WHEN {expression} > {_PYTHON_MAX} THEN {_PYTHON_MAX} ELSE {expression} END"
    )


def job_columns(alias: str) -> str:
    """``JOB_COLUMNS`` as a select list of the table aliased ``alias``, timestamps readable."""
    return ", ".join(
        readable_timestamp(f"{alias}.{c}") + f" AS {c}"
        if c in _TIMESTAMP_COLUMNS
        else f"{alias}.{c}"
        for c in JOB_COLUMNS
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
