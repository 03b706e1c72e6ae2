"""Claiming jobs, and turning the claimed rows into ``Job`` instances."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django_pgqueue.operations import ready
from django_pgqueue.operations.db import UNIQUE_VIOLATIONS, Database
from django_pgqueue.operations.rows import EMPTY_JSON, job_fields
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


def claim(
    db: Database,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    visibility_timeout: float,
    *,
    rate_limits: bool = True,
) -> list[Job]:
    """Claim up to ``limit`` runnable jobs for ``worker_id``: :func:`claim_counted`'s jobs.

    For a caller that keeps no state (``Job.objects.claim``, ``testing.run_jobs``): the
    database says whether the limited claim is needed, at every call.
    """
    jobs, _ = claim_counted(
        db, worker_id, queues, limit, visibility_timeout, rate_limits=rate_limits
    )
    return jobs


def limited_claim_needed(db: Database) -> bool:
    """Whether some queue has settings or limited jobs wait: then only the limited claim takes
    every job it may (the plain one leaves those alone)."""
    with db.cursor() as cursor:
        cursor.execute(limits_sql.LIMITED_CLAIM_NEEDED)
        return bool(cursor.fetchone()[0])


def claim_counted(
    db: Database,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    visibility_timeout: float,
    *,
    reclaim: bool = True,
    fresh: int | None = None,
    controlled: bool | None = None,
    rate_limits: bool = True,
    stale_scan: ready.StaleScan | None = None,
) -> tuple[list[Job], int]:
    """Claim up to ``limit`` runnable jobs for ``worker_id`` with one SKIP LOCKED statement.

    ``queues`` are served in the order given (``None``: every queue). The returned jobs are
    ``running``, locked by ``worker_id``, with their attempt counted, in the order to run them.
    With ``reclaim`` (the manager always; the worker about once a second), running jobs whose
    worker stopped heartbeating are taken first, in a statement of their own; those out of
    attempts go ``dead`` instead and are left out of the jobs, but counted in the rows taken
    (the second value): a claim that took ``limit`` rows was not short of work. ``reclaim``
    also moves due scheduled jobs into the ready ring first, and settles the parked rows (those
    of paused queues: :func:`~django_pgqueue.operations.ready.sweep_parked`) and the held ones
    (a busy key's or a limited queue's backlog:
    :func:`~django_pgqueue.operations.ready.sweep_held`).
    ``fresh`` (after a claim of its own): at most that many runnable jobs besides the stale
    ones, and none unless the promotion moved some (default: what the stale ones left of
    ``limit``). With ``stale_scan`` (the worker's), the stale-job scan starts where the
    previous one ended instead of at the oldest lock.
    ``controlled``: whether the limited claim (``sql.limits``) is needed, as the worker last
    read it from the database (``None``: read it now, :func:`limited_claim_needed`). The
    limited claim leaves out paused queues and keeps every concurrency and rate limit; the
    plain one takes no rate-limited job and nothing while any queue has settings, so a stale
    ``False`` delays jobs, never starts one a setting or limit keeps back.
    ``rate_limits=False`` (tests) starts rate-limited jobs whatever their windows say.
    """
    if controlled is None:
        controlled = limited_claim_needed(db)
    params: dict[str, Any] = {
        "worker": worker_id,
        "limit": limit,
        "visibility": visibility_timeout,
        "since": None,
        "rate_limits": rate_limits,
    }
    statement = limits_sql.LIMITED_CLAIM_ALL_QUEUES if controlled else sql.CLAIM_ALL_QUEUES
    if queues:
        params["queues"] = list(queues)
        statement = limits_sql.LIMITED_CLAIM_NAMED_QUEUES if controlled else sql.CLAIM_NAMED_QUEUES
    rows: list[Any] = []
    promoted = 0
    if reclaim:
        # Due scheduled jobs, jobs a resume left parked, and held jobs of keys with room join
        # the ring.
        promoted = ready.promote(db) + ready.sweep_parked(db) + ready.sweep_held(db)
        if stale_scan is not None:
            params["since"] = stale_scan.start(db, visibility_timeout)
        with db.atomic(), db.cursor() as cursor:
            cursor.execute(sql.RECLAIM_NAMED_QUEUES if queues else sql.RECLAIM_ALL_QUEUES, params)
            rows = cursor.fetchall()
        if stale_scan is not None:
            stale_scan.done(len(rows) < limit)
        params["limit"] = limit - len(rows)
    if fresh is not None:  # the caller has just claimed: only what the promotion added is new
        params["limit"] = min(params["limit"], fresh if promoted else 0)
    stale_rows, rows = rows, []
    for attempt in range(CLAIM_RACE_RETRIES if params["limit"] > 0 else 0):
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
                job.pk,
                worker_id,
                job.last_error,
                f"attempt {job.attempts}/{job.max_attempts} starts"
                if job.status == JobStatus.RUNNING
                else f"now {job.status}"
                + (" (cancelled while it ran)" if job.status == JobStatus.CANCELLED else ""),
                extra={"job_id": job.pk, "queue": job.queue, "attempt": job.attempts},
            )
    order = {name: i for i, name in enumerate(queues or ())}
    jobs.sort(key=lambda j: (order.get(j.queue, 0), -j.priority, j.run_after, j.pk))
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
    from django.db.models import DEFERRED

    from django_pgqueue.models import Job

    fields, layout = _row_layout()
    jobs = []
    for row in rows:
        values = list(row)
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
        if values[_ATTEMPTS] >= INT_MAX:
            # The claim stops counting there (the column is an integer): a row set by hand, or
            # a job claimed two billion times. Either way not a job to run as it is.
            problems.append(
                f"its attempts counter is at the integer limit ({INT_MAX:,}); retry the job "
                "to reset it"
            )
        job = Job.from_db(db, fields, [values[i] if i >= 0 else DEFERRED for i in layout])
        job.poison = "; ".join(problems) or None
        jobs.append(job)
    return jobs


@functools.cache
def _row_layout() -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``Job``'s concrete fields, and for each the index of its value in a claim row (-1: not
    claimed, so deferred).

    ``Model.from_db`` given fewer values than the model has fields looks every field up in the
    list of names given, for every row (most of a claimed row's cost in Python once the model
    had fields the claim does not return). The rows are given full length instead, the fields
    not claimed ``DEFERRED``, which is what Django would make of them.
    """
    fields = job_fields()
    index = {column: i for i, column in enumerate(JOB_COLUMNS)}
    return fields, tuple(index.get(name, -1) for name in fields)


_ARGS = JOB_COLUMNS.index("args")
_KWARGS = JOB_COLUMNS.index("kwargs")
_ATTEMPTS = JOB_COLUMNS.index("attempts")
#: PostgreSQL's integer, the type of ``attempts``.
INT_MAX = 2**31 - 1
