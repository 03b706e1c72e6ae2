"""Putting jobs in the table: one INSERT, or COPY for many; waking the workers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from django.db import connections

from django_pgqueue import rules, tracing
from django_pgqueue.conf import settings
from django_pgqueue.operations import flow
from django_pgqueue.operations.db import Database, DjangoDatabase, psycopg_cursor
from django_pgqueue.operations.rows import decode_json, new_job
from django_pgqueue.spec import JobSpec
from django_pgqueue.sql import TABLE, Cursor
from django_pgqueue.sql import enqueue as sql
from django_pgqueue.sql import flow as flow_sql
from django_pgqueue.states import ACTIVE, JobStatus

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: Rows per COPY statement in ``insert_many``.
BULK_BATCH_SIZE = 5000
#: Up to this many jobs, ``insert_many`` writes them with one INSERT (one round trip, no
#: transaction of its own) instead of reserved ids and COPY (three, in a transaction): what a
#: web request enqueuing a handful of jobs does. COPY's cheaper rows win above.
FEW_MAX = 100

#: Called with every enqueued job: ``(db, spec, args_json, kwargs_json, job_id, run_after,
#: deduplicated)``, right after its INSERT, in the enqueuing thread (``db``'s transaction may
#: still roll back). Empty unless :func:`django_pgqueue.testing.capture_jobs` is listening.
Observer = Callable[[Database, JobSpec, str, str, int, "datetime | None", bool], None]
observers: list[Observer] = []
# How often an INSERT is tried again when the job using its unique key finished in between.
_UNIQUE_RETRIES = 3


def insert(
    db: Database, spec: JobSpec, args_json: str, kwargs_json: str, *, batch: int | None = None
) -> Job:
    """INSERT one job in the current transaction of ``db``; one round trip.

    With a ``unique_key`` already in use by an active job of the same queue, nothing is
    inserted and that job is returned with ``deduplicated = True``. Under OpenTelemetry, in
    a span of its own whose context the job keeps (:mod:`django_pgqueue.tracing`). A job with
    ``spec.after`` is enqueued waiting for those jobs (which must exist: else
    :class:`UnknownParent`, nothing written); ``batch``: the batch it is a member of.
    """
    if not tracing.active():
        return _insert(db, spec, args_json, kwargs_json, None, batch)
    with tracing.enqueueing(spec.name, spec.resolved_queue) as span:
        job = _insert(db, spec, args_json, kwargs_json, tracing.carrier_json(span), batch)
        tracing.enqueued(span, [job.pk], deduplicated=job.deduplicated)
        return job


def _insert(
    db: Database,
    spec: JobSpec,
    args_json: str,
    kwargs_json: str,
    trace_json: str | None,
    batch: int | None = None,
) -> Job:
    from django_pgqueue.models import Job

    queue = spec.resolved_queue
    run_after = spec.resolved_run_after()
    max_attempts = spec.resolved_max_attempts
    row: tuple[object, ...] = (
        queue,
        spec.name,
        args_json,
        kwargs_json,
        spec.priority,
        run_after,
        max_attempts,
        spec.unique_key,
        spec.concurrency_key,
        trace_json,
        spec.is_async,
    )
    statement = sql.INSERT_ONE
    status = JobStatus.WAITING if spec.after else JobStatus.PENDING
    parents_left = len(spec.after) if spec.after else None
    if spec.after or batch is not None:
        if spec.after:
            flow.check_parents(db, spec.after)
        row = (*row, spec.resolved_concurrency_limit, spec.resolved_rate_key)
        row = (*row, status.value, parents_left, batch)
        statement = flow_sql.INSERT_ONE
    elif spec.limited:
        row = (*row, spec.resolved_concurrency_limit, spec.resolved_rate_key)
        statement = sql.INSERT_ONE_LIMITED
    row = (*row, notify_mode(), queue)
    with db.cursor() as cursor:
        if spec.limited:
            register_limits(cursor, spec)
        for _ in range(_UNIQUE_RETRIES):
            cursor.execute(statement, row)
            inserted = cursor.fetchone()
            if inserted is not None:
                job = new_job(
                    db.alias,
                    id=inserted[0],
                    queue=queue,
                    name=spec.name,
                    args=decode_json(args_json),
                    kwargs=decode_json(kwargs_json),
                    status=status,
                    priority=spec.priority,
                    run_after=inserted[1],
                    max_attempts=max_attempts,
                    unique_key=spec.unique_key,
                    concurrency_key=spec.concurrency_key,
                    concurrency_limit=spec.resolved_concurrency_limit,
                    rate_key=spec.resolved_rate_key,
                    created_at=inserted[2],
                    trace_context=None if trace_json is None else decode_json(trace_json),
                    is_async=spec.is_async,
                    parents_left=parents_left,
                    batch_id=batch,
                )
                job.deduplicated = False
                if spec.after:
                    flow.insert_edges(db, [job.pk], spec.after)
                elif inserted[4]:  # a worker listens for the queue (sql.enqueue._LISTENED)
                    wake_after_commit(db, queue, job.pk, is_async=spec.is_async)
                for observe in observers:
                    observe(db, spec, args_json, kwargs_json, job.pk, job.run_after, False)
                return job
            existing = (
                Job.objects.using(db.alias)
                .filter(queue=queue, unique_key=spec.unique_key, status__in=ACTIVE)
                .first()
            )
            if existing is not None:
                existing.deduplicated = True
                for observe in observers:
                    observe(db, spec, args_json, kwargs_json, existing.pk, existing.run_after, True)
                return existing
            # The job using the key finished between our INSERT and SELECT: insert again.
    raise RuntimeError(f"Could not enqueue job {spec.name!r} with unique key {spec.unique_key!r}")


def insert_many(
    db: Database,
    spec: JobSpec,
    payloads: Sequence[tuple[str, str]],
    *,
    batch: int | None = None,
) -> list[int]:
    """Insert one job per ``(args_json, kwargs_json)``; ids in input order.

    Up to ``FEW_MAX`` jobs: one ``INSERT``, one round trip (a single statement is atomic by
    itself). More, or jobs with limits (whose limits are registered first, in the same
    transaction): COPY, in batches of ``BULK_BATCH_SIZE`` in one transaction, the ids reserved
    from the sequence first, so they come back in input order by construction. Neither has ON
    CONFLICT: this is for jobs without a unique key. Jobs of a workflow (``spec.after``, a
    ``batch``) always go by COPY, with their edges.
    """
    if spec.unique_key is not None:
        raise ValueError("insert_many takes jobs without a unique key")
    if not payloads:
        return []
    if spec.after:
        flow.check_parents(db, spec.after)
    if not tracing.active():
        ids, run_after, listened = _insert_many(db, spec, payloads, None, batch)
    else:
        with tracing.enqueueing(spec.name, spec.resolved_queue, len(payloads)) as span:
            carrier = tracing.carrier_json(span)
            ids, run_after, listened = _insert_many(db, spec, payloads, carrier, batch)
            tracing.enqueued(span, ids)
    if listened and not spec.after:
        wake_after_commit(db, spec.resolved_queue, min(ids), len(ids), is_async=spec.is_async)
    for observe in observers:
        for job_id, (args_json, kwargs_json) in zip(ids, payloads, strict=True):
            observe(db, spec, args_json, kwargs_json, job_id, run_after, False)
    return ids


class _Inserted(NamedTuple):
    """What writing many jobs returns."""

    #: Their ids, in input order.
    ids: list[int]
    #: Their ``run_after`` (None when none was written).
    run_after: datetime | None
    #: Whether a worker listens for their queue (``sql.enqueue._LISTENED``): else no wake-up.
    listened: bool


def _insert_many(
    db: Database,
    spec: JobSpec,
    payloads: Sequence[tuple[str, str]],
    trace_json: str | None,
    batch: int | None,
) -> _Inserted:
    if spec.after or batch is not None:
        return _copy_many(db, spec, payloads, trace_json, batch)
    if len(payloads) <= FEW_MAX and not spec.limited:
        return _insert_few(db, spec, payloads, trace_json)
    return _copy_many(db, spec, payloads, trace_json)


def _insert_few(
    db: Database, spec: JobSpec, payloads: Sequence[tuple[str, str]], trace_json: str | None
) -> _Inserted:
    with db.cursor() as cursor, psycopg_cursor(cursor).connection.cursor() as raw:
        # psycopg's own cursor (Django's binds on the client): the two arrays go as binary
        # parameters, not as literals escaped element by element and parsed by the server.
        raw.execute(
            sql.INSERT_FEW,
            [
                spec.resolved_queue,
                spec.name,
                spec.priority,
                spec.resolved_run_after(),
                spec.resolved_max_attempts,
                spec.concurrency_key,
                trace_json,
                spec.is_async,
                [args_json for args_json, _ in payloads],
                [kwargs_json for _, kwargs_json in payloads],
                notify_mode(),
                spec.resolved_queue,
            ],
        )
        rows = raw.fetchall()
    if len(rows) != len(payloads):
        raise RuntimeError(f"INSERT of {len(payloads)} jobs returned {len(rows)} rows")
    return _Inserted(sorted(row[0] for row in rows), rows[0][1], bool(rows[0][3]))


def _copy_many(
    db: Database,
    spec: JobSpec,
    payloads: Sequence[tuple[str, str]],
    trace_json: str | None,
    member_of: int | None = None,
) -> _Inserted:
    queue = spec.resolved_queue
    max_attempts = spec.resolved_max_attempts
    run_after: datetime | None = spec.resolved_run_after()
    ids: list[int] = []
    # One transaction (a savepoint inside the caller's): every job is written, or none.
    with db.atomic(), db.cursor() as cursor:
        raw = psycopg_cursor(cursor)
        raw.execute(sql.NOTIFY_MODE, [notify_mode(), queue])  # the trigger's part (sql.enqueue)
        mode = raw.fetchone()
        listened = mode is not None and bool(mode[1])
        # The columns after concurrency_key, the same in every row (the statement names them).
        tail: tuple[object, ...] = ()
        statement = sql.COPY_MANY
        if spec.limited:
            register_limits(cursor, spec)
            tail = (spec.resolved_concurrency_limit, spec.resolved_rate_key)
            statement = sql.COPY_MANY_LIMITED
        if trace_json is not None:  # the column only when there is a context: no \N per row
            tail = (*tail, trace_json)
            statement = sql.COPY_MANY_LIMITED_TRACED if spec.limited else sql.COPY_MANY_TRACED
        if spec.after or member_of is not None:  # a workflow's: every column
            status = JobStatus.WAITING if spec.after else JobStatus.PENDING
            tail = (
                spec.resolved_concurrency_limit,
                spec.resolved_rate_key,
                trace_json,
                status.value,
                len(spec.after) if spec.after else None,
                member_of,
            )
            statement = flow_sql.COPY_MANY
        for start in range(0, len(payloads), BULK_BATCH_SIZE):
            batch = payloads[start : start + BULK_BATCH_SIZE]
            raw.execute(sql.RESERVE_IDS, [TABLE, len(batch)])
            reserved = raw.fetchone()
            assert reserved is not None
            batch_ids, now = reserved
            if run_after is None:
                run_after = now  # the transaction's now(): the column's default
            with raw.copy(statement) as copy:
                for job_id, (args_json, kwargs_json) in zip(batch_ids, batch, strict=True):
                    copy.write_row(
                        (
                            job_id,
                            queue,
                            spec.name,
                            args_json,
                            kwargs_json,
                            spec.priority,
                            run_after,
                            max_attempts,
                            spec.concurrency_key,
                            spec.is_async,
                            *tail,
                        )
                    )
            ids += batch_ids
        if spec.after:
            flow.insert_edges(db, ids, spec.after)
    return _Inserted(ids, run_after, listened)


def register_limits(cursor: Cursor, spec: JobSpec) -> None:
    """Before a limited job is written: its rate limit's window exists (with the spec's rate),
    and the workers are told to claim with the statement that counts limits."""
    from django_pgqueue.sql import control as control_sql
    from django_pgqueue.sql import limits as limits_sql

    rate_key = spec.resolved_rate_key
    if rate_key is not None and spec.rate_limit is not None:
        starts, period = rules.parse_rate(spec.rate_limit)
        cursor.execute(limits_sql.DEFINE_WINDOW, [limits_sql.key_window(rate_key), starts, period])
    cursor.execute(control_sql.NOTIFY_CONTROL, [control_sql.LIMITS_CHANGED])


def notify_mode() -> str:
    """What the inserting statement tells the insert trigger (``sql.enqueue._NOTIFY_MODE``):
    ``'in_transaction'`` lets it notify; ``'after_commit'`` keeps it out (:func:`wake_after_commit`
    notifies once committed, or nothing does with ``PGQUEUE_NOTIFY = False``)."""
    return "in_transaction" if settings.NOTIFY == "in_transaction" else "after_commit"


class _Wake:
    """The wake-up of one transaction's queues, sent once it commits (one for all the
    transaction's enqueues: :func:`wake_after_commit` adds to it while it is pending)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: Jobs enqueued, by queue, and the first one's id (the notification's ticket).
        self.queues: dict[str, int] = {}
        self.tickets: dict[str, int] = {}
        #: Their kinds, by queue: ``'s'`` and ``'a'`` (None: some of unknown kind).
        self.kinds: dict[str, set[str] | None] = {}

    def add(self, queue: str, jobs: int, first_id: int, is_async: bool | None) -> None:
        self.queues[queue] = self.queues.get(queue, 0) + jobs
        self.tickets[queue] = min(self.tickets.get(queue, first_id), first_id)
        kinds = self.kinds.get(queue, set())
        if kinds is not None and is_async is not None:
            kinds.add("a" if is_async else "s")
        self.kinds[queue] = None if is_async is None else kinds

    def kinds_of(self, queue: str) -> str | None:
        """The payload's kinds of ``queue`` (``0026_wake_kinds``): ``'s'``, ``'a'``, ``'sa'``;
        None when some job's kind is not known (the worker looks for either)."""
        kinds = self.kinds[queue]
        return None if kinds is None else "".join(k for k in "sa" if k in kinds)

    def __call__(self) -> None:
        if self.queues:
            names = sorted(self.queues)
            with self.db.cursor() as cursor:
                cursor.execute(
                    sql.WAKE,
                    {
                        "queues": names,
                        "jobs": [self.queues[q] for q in names],
                        "tickets": [self.tickets[q] for q in names],
                        "kinds": [self.kinds_of(q) for q in names],
                    },
                )

    def pending(self) -> bool:
        """Whether this still runs after the current transaction of its Django connection."""
        connection = connections[self.db.alias]
        return connection.in_atomic_block and any(
            entry[1] is self for entry in connection.run_on_commit
        )


#: Each thread's pending wake-up, by Django connection alias (Django's connections are the
#: thread's own too).
_wakes = threading.local()


def wake_after_commit(
    db: Database, queue: str, first_id: int, jobs: int = 1, *, is_async: bool | None = None
) -> None:
    """Wake a worker serving ``queue`` for ``jobs`` jobs (the first's id ``first_id``; their
    kind ``is_async``, None when not known) once the current transaction of ``db`` commits
    (at once outside one; never if it rolls back): the jobs were written by a statement that
    keeps the insert trigger from notifying inside the transaction (``sql.enqueue``: the
    commit of the caller's rows must not wait for the lock every notifying commit holds). One
    notification a queue and transaction, whatever the number of enqueues in it."""
    if settings.NOTIFY != "after_commit":
        return  # the insert trigger notified (in_transaction), or nothing does (False)
    django_side = isinstance(db, DjangoDatabase)
    pending: dict[str, _Wake] = getattr(_wakes, "by_alias", None) or {}
    _wakes.by_alias = pending
    wake = pending.get(db.alias) if django_side else None
    if wake is not None and wake.pending():
        wake.add(queue, jobs, first_id, is_async)
        return
    wake = _Wake(db)
    wake.add(queue, jobs, first_id, is_async)
    if django_side:
        pending[db.alias] = wake
    db.after_commit(wake)


def listen(db: Database, channels: Sequence[str], own: str | None = None) -> None:
    """Subscribe ``db`` (an autocommit connection) to our notification ``channels``, in order,
    and to a worker's ``own`` channel (``sql.rota.channel``)."""
    with db.cursor() as cursor:
        for channel in channels:
            cursor.execute(sql.LISTEN[channel])
        if own is not None:
            cursor.execute(sql.LISTEN_OWN.format(channel=own))


def unlisten(db: Database, own: str) -> None:
    """Unsubscribe ``db`` from a worker's ``own`` channel (the relay, when the worker has gone)."""
    with db.cursor() as cursor:
        cursor.execute(sql.UNLISTEN_OWN.format(channel=own))
