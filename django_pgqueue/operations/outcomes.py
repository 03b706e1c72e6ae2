"""A claimed job's life after the claim: heartbeats, outcomes, hand-backs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from django.utils import timezone

from django_pgqueue.conf import settings
from django_pgqueue.operations.db import CONNECTION_ERRORS, DATABASE_ERRORS, Database
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import control as control_sql
from django_pgqueue.sql import dumps
from django_pgqueue.sql import outcomes as sql
from django_pgqueue.states import Attempt, JobStatus

logger = get_logger("django_pgqueue.worker")


@dataclass(slots=True)
class Outcome:
    """The end of one attempt, as :func:`finish` writes it back."""

    job_id: int
    status: str  # completed | pending (retry later) | dead
    started_at: datetime
    finished_at: datetime | None
    run_after: datetime | None = None
    result_json: str | None = None
    error: str | None = None
    error_entry_json: str | None = None
    #: For logging and signals; not written.
    outcome: str = Attempt.COMPLETED
    exception: BaseException | None = None
    #: Seconds until a retried job runs again, as the retry strategy decided it.
    retry_delay: float | None = None
    #: The token of the claim that gave the job to the worker: the write applies only while
    #: the job is still under that claim (fencing, ``sql.outcomes``).
    claim_token: int | None = None


class Claimed(Protocol):
    """A job as a claim handed it out: its id and its claim's token."""

    @property
    def pk(self) -> Any: ...

    @property
    def claim_token(self) -> int | None: ...


def _claimed(worker_id: str, jobs: Iterable[Claimed]) -> dict[str, Any]:
    """The parameters naming ``jobs`` in ``worker_id``'s hand, each under its claim's token."""
    tokens = {str(job.pk): job.claim_token for job in jobs}
    return {"ids": [int(i) for i in tokens], "tokens": dumps(tokens), "worker": worker_id}


def heartbeat(db: Database, worker_id: str, jobs: Iterable[Claimed]) -> tuple[set[int], set[int]]:
    """Refresh the lock of ``jobs`` still owned by ``worker_id`` under their claims.

    Returns the ids it still owns, and those of them asked to stop (``cancel()``).
    """
    with db.cursor() as cursor:
        cursor.execute(sql.HEARTBEAT, _claimed(worker_id, jobs))
        rows = cursor.fetchall()
    return {row[0] for row in rows}, {row[0] for row in rows if row[1]}


def cancel_requested(db: Database, worker_id: str, job_ids: Sequence[int]) -> set[int]:
    """Of the running jobs ``worker_id`` has in hand, the ids asked to stop."""
    with db.cursor() as cursor:
        cursor.execute(control_sql.CANCEL_REQUESTED, [list(job_ids), worker_id])
        return {row[0] for row in cursor.fetchall()}


def save_progress(db: Database, worker_id: str, progress: dict[int, str]) -> None:
    """Store the latest progress (JSON text by job id) of running jobs ``worker_id`` has in hand."""
    document = "{" + ",".join(f'"{job_id}":{text}' for job_id, text in progress.items()) + "}"
    with db.cursor() as cursor:
        cursor.execute(control_sql.SET_PROGRESS, [document, worker_id])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch: how ``sql.FINISH`` (and the worker's journal) take a
    timestamp, a third of ``isoformat()``'s cost and no text to parse. A naive value
    (``USE_TZ = False``) is in ``TIME_ZONE``, as the connection's session reads one."""
    if value.tzinfo is None:
        value = timezone.make_aware(value)
    # The delta's parts in integers: a third cheaper than ``// timedelta(microseconds=1)``, which
    # converts both deltas to microseconds first (four calls a job).
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_epoch_micros(micros: int) -> datetime:
    """The aware (UTC) datetime :func:`epoch_micros` made ``micros`` of."""
    return _EPOCH + micros * _MICROSECOND


def epoch_micros_or_none(value: datetime | None) -> int | None:
    return None if value is None else epoch_micros(value)


def finish(
    db: Database,
    worker_id: str,
    outcomes: Sequence[Outcome],
    *,
    delete_completed: bool,
    asynchronous: bool = False,
) -> set[int]:
    """Record the end of many attempts in one statement; returns the ids written.

    With ``delete_completed`` (``PGQUEUE_RETENTION = 0``), completed jobs are deleted instead.
    With ``asynchronous``, the statement commits without waiting for its WAL to reach disk: the
    caller keeps the outcomes until :func:`make_durable` (or another commit of its own that
    waits) has returned, and writes them again if the connection is lost before.
    A job missing from the result was no longer this worker's (its lock expired and another
    worker reclaimed it): its outcome is dropped, not written over the new owner's.

    When the statement fails for a reason other than the connection (PostgreSQL refused a value
    in it), the outcomes are written one by one, so one bad outcome never delays the others;
    an outcome refused alone is replaced by a dead outcome saying why. Connection errors are
    raised: the caller keeps the outcomes and writes them once it is back.
    """
    try:
        return _finish(db, worker_id, outcomes, delete_completed, asynchronous)
    except CONNECTION_ERRORS:
        raise
    except DATABASE_ERRORS as exc:
        logger.warning(
            "Writing %d outcomes failed (%s); writing them one by one", len(outcomes), exc
        )
    written: set[int] = set()
    for outcome in outcomes:
        try:
            written |= _finish(db, worker_id, [outcome], delete_completed, asynchronous)
            continue
        except CONNECTION_ERRORS:
            raise
        except DATABASE_ERRORS as exc:
            logger.error("Job #%d: PostgreSQL refused its outcome: %s", outcome.job_id, exc)
            replacement = unstorable(outcome, exc)
        try:
            written |= _finish(db, worker_id, [replacement], delete_completed, asynchronous)
        except CONNECTION_ERRORS:
            raise
        except DATABASE_ERRORS:
            # Not even that: leave the job running; it is reclaimed after the visibility timeout.
            logger.exception("Job #%d: could not record any outcome", outcome.job_id)
    return written


def unstorable(outcome: Outcome, exc: BaseException) -> Outcome:
    """A dead outcome in place of one PostgreSQL refused (its result or error text)."""
    text = f"OutcomeNotStorable: PostgreSQL refused this attempt's outcome ({outcome.outcome}): "
    text += str(exc).replace("\x00", "\\x00")[:2000]
    return replace(
        outcome,
        status=JobStatus.DEAD,
        finished_at=outcome.finished_at or timezone.now(),
        run_after=None,
        result_json=None,
        error=text,
        error_entry_json=None,
        outcome=Attempt.DEAD,
    )


def _finish(
    db: Database,
    worker_id: str,
    outcomes: Sequence[Outcome],
    delete_completed: bool,
    asynchronous: bool,
) -> set[int]:
    deleted = [o for o in outcomes if delete_completed and o.status == JobStatus.COMPLETED]
    to_delete = [_Written(o.job_id, o.claim_token) for o in deleted]
    to_update = [
        [
            o.job_id,
            o.status,
            epoch_micros_or_none(o.run_after),
            epoch_micros_or_none(o.started_at),
            epoch_micros_or_none(o.finished_at),
            o.result_json,
            o.error,
            o.error_entry_json,
            o.claim_token,
            *((True,) if o.outcome == Attempt.INTERRUPTED else ()),
        ]
        for o in outcomes
        if not (delete_completed and o.status == JobStatus.COMPLETED)
    ]
    written: set[int] = set()
    with db.cursor() as cursor:
        if to_delete:
            statement = sql.DELETE_FINISHED_ASYNC if asynchronous else sql.DELETE_FINISHED
            # The results of the ones kept (a workflow's: sql.outcomes._delete_finished).
            results = ",".join(f'"{o.job_id}":{o.result_json or "null"}' for o in deleted)
            cursor.execute(
                statement, {**_claimed(worker_id, to_delete), "results": "{" + results + "}"}
            )
            written.update(row[0] for row in cursor.fetchall())
        if to_update:
            statement = sql.FINISH_ASYNC if asynchronous else sql.FINISH
            cursor.execute(
                statement,
                {
                    "outcomes": dumps(to_update),
                    "count": len(to_update),
                    "worker": worker_id,
                    "max_interruptions": settings.MAX_INTERRUPTIONS,
                },
            )
            written.update(row[0] for row in cursor.fetchall())
    return written


class _Written(NamedTuple):
    pk: int
    claim_token: int | None


def make_durable(db: Database) -> None:
    """Return once every commit ``db`` made before, asynchronous ones included, is on disk
    (as ``synchronous_commit`` says: with it off for the server, at once)."""
    with db.cursor() as cursor:
        cursor.execute(sql.MAKE_DURABLE)


def release(db: Database, worker_id: str, jobs: Iterable[Claimed]) -> set[int]:
    """Hand claimed-but-unstarted jobs back to ``pending`` without spending an attempt."""
    with db.cursor() as cursor:
        cursor.execute(sql.RELEASE, _claimed(worker_id, jobs))
        return {row[0] for row in cursor.fetchall()}


def interrupt(db: Database, worker_id: str, jobs: Iterable[Claimed], reason: str) -> dict[int, str]:
    """Hand back running jobs of ``worker_id`` whose worker is shutting down under them
    (interrupted: see ``sql.INTERRUPT``), ``reason`` kept in their history; returns the status
    each job now has (``pending``; ``dead`` for one interrupted too often and out of attempts;
    ``cancelled`` for one asked to stop)."""
    with db.cursor() as cursor:
        cursor.execute(
            sql.INTERRUPT,
            {
                **_claimed(worker_id, jobs),
                "reason": reason,
                "max_interruptions": settings.MAX_INTERRUPTIONS,
            },
        )
        return {row[0]: row[1] for row in cursor.fetchall()}


def release_unknown(db: Database, worker_id: str, known_ids: Sequence[int]) -> set[int]:
    """Hand back, as :func:`release` does, every job the database shows in ``worker_id``'s hand
    but ``known_ids``: after a lost connection, the jobs of a claim that committed while its
    answer was lost. Left alone, they would stay ``running`` until the visibility timeout."""
    with db.cursor() as cursor:
        cursor.execute(sql.RELEASE_UNKNOWN, {"ids": list(known_ids), "worker": worker_id})
        return {row[0] for row in cursor.fetchall()}


class NextRun(NamedTuple):
    """What an idle worker waits for (:func:`next_run_after`)."""

    #: A ready row of the queues waits in the ring: runnable now, but locked by another claim
    #: or waiting for its concurrency key.
    ready: bool
    #: The earliest run_after of a scheduled job (None: none). It becomes claimable once a
    #: promotion (``promote``, in the worker's upkeep) moves it into the ring.
    later: datetime | None


def next_run_after(
    db: Database, queues: Sequence[str] | None, *, controlled: bool = False
) -> NextRun:
    """What the earliest pending job waits for (see :class:`NextRun`); with ``controlled``,
    of the queues not paused."""
    with db.cursor() as cursor:
        if queues:
            statement = (
                sql.CONTROLLED_NEXT_RUN_AFTER_NAMED_QUEUES
                if controlled
                else sql.NEXT_RUN_AFTER_NAMED_QUEUES
            )
            cursor.execute(statement, [list(queues)])
        elif controlled:
            cursor.execute(sql.CONTROLLED_NEXT_RUN_AFTER_ALL_QUEUES, [None])
        else:
            cursor.execute(sql.NEXT_RUN_AFTER_ALL_QUEUES, [None])
        row = cursor.fetchone()
    return NextRun(False, None) if row is None else NextRun(bool(row[0]), row[1])
