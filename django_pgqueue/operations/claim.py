"""Claiming jobs, and turning the claimed rows into ``Job`` instances."""

from __future__ import annotations

import functools
import json
import operator
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import DEFERRED

from django_pgqueue.operations import ready
from django_pgqueue.operations.db import UNIQUE_VIOLATIONS, Database
from django_pgqueue.operations.rows import (
    EMPTY_JSON,
    from_values,
    init_signals_listen,
    job_fields,
)
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import JOB_COLUMNS
from django_pgqueue.sql import claim as sql
from django_pgqueue.sql import limits as limits_sql
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.worker")

# How often a claim is retried when a concurrent claim won the race for a concurrency key.
CLAIM_RACE_RETRIES = 5

_JSON_COLUMNS = frozenset({"args", "kwargs", "errors", "result"})
_JSON_INDEXES = tuple(i for i, c in enumerate(JOB_COLUMNS) if c in _JSON_COLUMNS)


@dataclass(frozen=True, kw_only=True)
class ClaimRequest:
    """What one claim asks for. Every caller (the worker, ``Job.objects.claim``,
    ``testing.run_jobs``) asks through this one shape, and :func:`claim` decides from the
    database how to take it: a new need (room for jobs of another kind, a token per claim)
    is a field here, not a variant of the claim.
    """

    worker_id: str
    #: At most this many jobs (with ``async_limit``: this many sync jobs).
    limit: int
    #: At most this many ``async def`` jobs besides (a worker: its event loop's room), each
    #: kind picked apart (``sql.ready.by_kind``). ``None``: jobs of either kind, ``limit`` in
    #: all (the manager, ``testing.run_jobs``).
    async_limit: int | None = None
    #: Served in the order given (``None``: every queue, by priority).
    queues: Sequence[str] | None = None
    visibility_timeout: float
    #: Also take back the running jobs of workers that stopped heartbeating, first, in a
    #: statement of their own, and move due scheduled jobs, parked rows of resumed queues and
    #: held rows with room into the ring (the manager always; the worker about once a second).
    reclaim: bool = True
    #: Just after a claim of the caller's own: at most that many runnable jobs besides the
    #: stale ones, and none unless the promotion moved some (``None``: what the stale ones
    #: left of ``limit``).
    fresh: int | None = None
    #: ``False`` (tests): start rate-limited jobs whatever their windows say.
    rate_limits: bool = True


class ClaimPath:
    """Which claim statement the database needs: the limited one (``sql.limits``) while some
    queue has settings or limited jobs wait (:func:`limited_claim_needed`), else the plain one
    (``sql.claim``).

    A caller that keeps no state asks the database at every claim (:func:`claim` without a
    path). The worker keeps one: read again when it is older than ``max_age`` seconds or after
    :meth:`changed` (a NOTIFY said the queues' settings changed). A reading that has gone stale
    is safe: the plain claim takes no rate-limited job and nothing at all while any queue has
    settings, so it delays such jobs until the next reading, never starts one a setting or a
    limit keeps back.
    """

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        #: The last reading (False before the first).
        self.limited = False
        self._read_at: float | None = None

    def changed(self) -> None:
        """The queues' settings changed: read again at the next claim."""
        self._read_at = None

    def read(self, db: Database) -> bool:
        """Whether the limited claim is needed, read again if due."""
        now = time.monotonic()
        if self._read_at is None or now - self._read_at >= self.max_age:
            self.limited = limited_claim_needed(db)
            self._read_at = now
        return self.limited


def limited_claim_needed(db: Database) -> bool:
    """Whether some queue has settings or limited jobs wait: then only the limited claim takes
    every job it may (the plain one leaves those alone)."""
    with db.cursor() as cursor:
        cursor.execute(limits_sql.LIMITED_CLAIM_NEEDED)
        return bool(cursor.fetchone()[0])


_FRESH_STATEMENTS = {
    # (limited, named queues, sync only): the statement
    (False, False, False): sql.CLAIM_ALL_QUEUES,
    (False, True, False): sql.CLAIM_NAMED_QUEUES,
    (False, False, True): sql.CLAIM_ALL_QUEUES_SYNC_ONLY,
    (False, True, True): sql.CLAIM_NAMED_QUEUES_SYNC_ONLY,
    (True, False, False): limits_sql.LIMITED_CLAIM_ALL_QUEUES,
    (True, True, False): limits_sql.LIMITED_CLAIM_NAMED_QUEUES,
    (True, False, True): limits_sql.LIMITED_CLAIM_ALL_QUEUES_SYNC_ONLY,
    (True, True, True): limits_sql.LIMITED_CLAIM_NAMED_QUEUES_SYNC_ONLY,
}


def _fresh_statement(limited: bool, named: bool, *, sync_only: bool) -> str:
    """The claim of fresh jobs: the limited one or not, of the worker's queues or of all, and
    without the async jobs' branch when there is no room for them (``sql.ready.by_kind``)."""
    return _FRESH_STATEMENTS[limited, named, sync_only]


def claim(
    db: Database,
    request: ClaimRequest,
    *,
    path: ClaimPath | None = None,
    stale_scan: ready.StaleScan | None = None,
) -> tuple[list[Job], int]:
    """Claim what ``request`` asks for with SKIP LOCKED statements: the claim's one entry point.

    Returns the jobs, ``running``, locked by the request's worker, with their attempt counted,
    in the order to run them; and the rows taken. Stale jobs out of attempts go ``dead``
    instead and are left out of the jobs, but counted in the rows taken: a claim that took
    ``limit`` rows was not short of work.

    Which statement runs, the database says (:class:`ClaimPath`; ``path``: the caller's
    reading, kept between claims; ``None``: read now). The limited claim leaves out paused
    queues and keeps every concurrency and rate limit. With ``stale_scan`` (the worker's), the
    stale-job scan starts where the previous one ended instead of at the oldest lock.
    """
    controlled = path.read(db) if path is not None else limited_claim_needed(db)
    worker_id, queues, limit = request.worker_id, request.queues, request.limit
    async_limit = request.async_limit
    total = limit if async_limit is None else limit + async_limit
    params: dict[str, Any] = {
        "worker": worker_id,
        # Reclaimed first, of either kind, up to the total; then each kind's room.
        "limit": total,
        "async_limit": limit if async_limit is None else async_limit,
        "total": total,
        "visibility": request.visibility_timeout,
        "since": None,
        "rate_limits": request.rate_limits,
    }
    if queues:
        params["queues"] = list(queues)
    rows: list[Any] = []
    promoted = 0
    if request.reclaim:
        # Due scheduled jobs, jobs a resume left parked, and held jobs of keys with room join
        # the ring.
        promoted = ready.promote(db) + ready.sweep_parked(db) + ready.sweep_held(db)
        if stale_scan is not None:
            params["since"] = stale_scan.start(db, request.visibility_timeout)
        with db.atomic(), db.cursor() as cursor:
            cursor.execute(sql.RECLAIM_NAMED_QUEUES if queues else sql.RECLAIM_ALL_QUEUES, params)
            rows = cursor.fetchall()
        if stale_scan is not None:
            stale_scan.done(len(rows) < total)
    stale_async = sum(1 for row in rows if row[_IS_ASYNC])
    if async_limit is None:  # either kind, within what is left of the total
        params["limit"] = params["async_limit"] = params["total"] = total - len(rows)
    else:
        params["limit"] = max(limit - (len(rows) - stale_async), 0)
        params["async_limit"] = max(async_limit - stale_async, 0)
        params["total"] = max(total - len(rows), 0)
    if request.fresh is not None:  # the caller has just claimed: only what the promotion added
        params["total"] = min(params["total"], request.fresh if promoted else 0)
    if params["total"] <= 0:
        params["limit"] = params["async_limit"] = params["total"] = 0
    statement = _fresh_statement(controlled, bool(queues), sync_only=params["async_limit"] == 0)
    stale_rows, rows = rows, []
    for attempt in range(CLAIM_RACE_RETRIES if params["total"] > 0 else 0):
        try:
            # The limited claim is two statements in a real transaction: its advisory locks
            # (claims counting the same limits, one after the other) last until it commits.
            with db.transaction() if controlled else db.atomic(), db.cursor() as cursor:
                if controlled:
                    if queues:
                        cursor.execute(limits_sql.LOCK_LIMITS_NAMED_QUEUES, params)
                    else:
                        cursor.execute(limits_sql.LOCK_LIMITS_ALL_QUEUES)
                    params["locked"] = cursor.fetchone()[0]
                cursor.execute(statement, params)
                rows = cursor.fetchall()
            break
        except UNIQUE_VIOLATIONS as exc:
            # A concurrent claim took the same concurrency key first; the unique index refused
            # ours. Claim again: that key is now visibly running.
            if attempt == CLAIM_RACE_RETRIES - 1:
                logger.warning("Claim kept losing concurrency-key races: %s", exc)
    rows = stale_rows + rows
    jobs = []
    for job in jobs_from_rows(db.alias, rows):
        if job.status == JobStatus.RUNNING:
            jobs.append(job)
        if _reclaimed(job):
            logger.warning(
                "%s #%d reclaimed by %s: %s; %s",
                job.name,
                job.id,
                worker_id,
                job.last_error,
                f"attempt {job.attempts}/{job.max_attempts} starts"
                if job.status == JobStatus.RUNNING
                else f"now {job.status}"
                + (" (cancelled while it ran)" if job.status == JobStatus.CANCELLED else ""),
                extra={"job_id": job.id, "queue": job.queue, "attempt": job.attempts},
            )
    order = {name: i for i, name in enumerate(queues or ())}
    jobs.sort(key=lambda j: (order.get(j.queue, 0), -j.priority, j.run_after, j.id))
    return jobs, len(rows)


def _reclaimed(job: Job) -> bool:
    """Whether the claim just took ``job`` from a worker that stopped heartbeating."""
    # ``errors`` is history written by the queue, but a row written by hand may contain anything.
    last = job.errors[-1] if isinstance(job.errors, list) and job.errors else None
    return (
        isinstance(last, dict)
        and last.get("exception_class") == _WORKER_LOST
        and job.last_error.startswith("WorkerLost:")
        and last.get("attempt")
        == (job.attempts if job.status != JobStatus.RUNNING else job.attempts - 1)
    )


_WORKER_LOST = "django_pgqueue.exceptions.WorkerLost"


def locked_jobs(db: Database, worker_id: str) -> list[Job]:
    """The running jobs ``worker_id`` has in hand."""
    with db.cursor() as cursor:
        cursor.execute(sql.LOCKED_BY, [worker_id])
        rows = cursor.fetchall()
    return jobs_from_rows(db.alias, rows)


_EMPTY: dict[str, Any] = {"args": [], "kwargs": {}, "errors": [], "result": None}


def jobs_from_rows(db: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    """Turn claim rows (``JOB_COLUMNS``, jsonb as text) into model instances.

    Each row is decoded on its own: a row whose JSON Python cannot take (an integer of
    thousands of digits, nesting deeper than the recursion limit), whose arguments are not a
    list and a dict, or whose attempts counter is at its limit becomes a job with ``poison``
    set to what is wrong, which the performer
    fails without running it. One bad row never breaks the claim or its batch.
    """
    from django_pgqueue.models import Job

    fields = job_fields()
    layout = _row_layout()
    claimed = _claimed_fields()
    pick = operator.itemgetter(*(i for i in layout if i >= 0))
    fast = not init_signals_listen()
    jobs = []
    for row in rows:
        values = list(row)
        if _plain(row):
            # No arguments, no errors, no result, no trace, attempts to spare: most rows, what
            # _decode() checks in one comparison.
            values[_ARGS], values[_KWARGS], values[_ERRORS] = [], {}, []
            poison = None
        else:
            poison = "; ".join(_decode(values)) or None
        if fast:
            job = from_values(db, claimed, pick(values))
        else:
            job = Job.from_db(db, fields, [values[i] if i >= 0 else DEFERRED for i in layout])
        job.poison = poison
        jobs.append(job)
    return jobs


def _decode(values: list[Any]) -> list[str]:
    """Decode a claim row's JSON columns in place (``values``, in ``JOB_COLUMNS`` order), each
    on its own, anything wrong replaced by an empty value; returns what was wrong."""
    problems = []
    for i in _JSON_INDEXES:
        if values[i] is None:
            continue
        column = JOB_COLUMNS[i]
        empty = EMPTY_JSON.get(values[i])
        if empty is not None:  # no arguments, no errors yet: most rows, without a decoder
            values[i] = empty()
            continue
        try:
            values[i] = json.loads(values[i])
        except (ValueError, RecursionError) as exc:
            problems.append(f"its {column} cannot be decoded: {type(exc).__name__}: {exc}")
            values[i] = _EMPTY[column]
    args, kwargs = values[_ARGS], values[_KWARGS]
    if not isinstance(args, list):
        problems.append(f"its args are a JSON {type(args).__name__}, not a list")
        values[_ARGS] = []
    if not isinstance(kwargs, dict):
        problems.append(f"its kwargs are a JSON {type(kwargs).__name__}, not an object")
        values[_KWARGS] = {}
    trace = values[_TRACE_CONTEXT]
    if isinstance(trace, str):  # NULL (None) on most rows: nothing to decode
        try:
            values[_TRACE_CONTEXT] = json.loads(trace)
        except (ValueError, RecursionError):
            values[_TRACE_CONTEXT] = None  # only a span link: never a reason not to run
    if values[_ATTEMPTS] >= INT_MAX:
        # The claim stops counting there (the column is an integer): a row set by hand, or a
        # job claimed two billion times. Either way not a job to run as it is.
        problems.append(
            f"its attempts counter is at the integer limit ({INT_MAX:,}); retry the job to reset it"
        )
    return problems


@functools.cache
def _row_layout() -> tuple[int, ...]:
    """For each of ``Job``'s concrete fields, the index of its value in a claim row (-1: not
    claimed, so deferred).

    ``Model.from_db`` given fewer values than the model has fields looks every field up in the
    list of names given, for every row (most of a claimed row's cost in Python once the model
    had fields the claim does not return). The rows are given full length instead, the fields
    not claimed ``DEFERRED``, which is what Django would make of them.
    """
    fields = job_fields()
    index = {column: i for i, column in enumerate(JOB_COLUMNS)}
    return tuple(index.get(name, -1) for name in fields)


@functools.cache
def _claimed_fields() -> tuple[str, ...]:
    """The fields a claim row holds, in ``Job``'s order (the others are deferred)."""
    return tuple(name for name, i in zip(job_fields(), _row_layout(), strict=True) if i >= 0)


_ARGS = JOB_COLUMNS.index("args")
_ERRORS = JOB_COLUMNS.index("errors")
_RESULT = JOB_COLUMNS.index("result")
_IS_ASYNC = JOB_COLUMNS.index("is_async")
_KWARGS = JOB_COLUMNS.index("kwargs")
_ATTEMPTS = JOB_COLUMNS.index("attempts")
_TRACE_CONTEXT = JOB_COLUMNS.index("trace_context")
#: PostgreSQL's integer, the type of ``attempts``.
INT_MAX = 2**31 - 1
#: A claimed row's args, kwargs, errors, result and trace context when it has none of them.
_PLAIN_JSON = ("[]", "{}", "[]", None, None)
_JSON_AND_TRACE = operator.itemgetter(_ARGS, _KWARGS, _ERRORS, _RESULT, _TRACE_CONTEXT)


def _plain(row: Sequence[Any]) -> bool:
    """Whether a claimed row has nothing to decode and nothing wrong with it."""
    return bool(_JSON_AND_TRACE(row) == _PLAIN_JSON and row[_ATTEMPTS] < INT_MAX)
