"""The performer: runs one attempt of a claimed job and decides what becomes of it.

Nothing a job does escapes :func:`perform`: an exception (``SystemExit`` and
``KeyboardInterrupt`` included), an unknown name, or a return value PostgreSQL cannot store all
become a failed attempt of that job, with the real error recorded.

One exception: a job that forks. Its child returns (or raises) into the worker's code too, and
must not carry on as a copy of the worker: it ends there (:func:`end_forked_child`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from django.db import connections
from django.db.backends.signals import connection_created

from django_pgqueue import conf, registry, signals, tracing
from django_pgqueue.arguments import jsonb_storable
from django_pgqueue.conf import settings
from django_pgqueue.exceptions import (
    JobInterrupted,
    JobTimeout,
    PoisonJob,
    ResultNotStorable,
    TransactionLeftOpen,
)
from django_pgqueue.logs import job_fields
from django_pgqueue.operations import DATABASE_ERRORS, Outcome
from django_pgqueue.printable import get_logger, log_time
from django_pgqueue.retries import RetryDecision
from django_pgqueue.sql import dumps
from django_pgqueue.states import Attempt, JobStatus

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from django_pgqueue.models import Job
    from django_pgqueue.worker.events import Events
    from django_pgqueue.worker.journal import Journal

logger = get_logger("django_pgqueue.worker")

#: The largest JSON result stored (jsonb itself stops at 255 MB; a result is not a blob store).
MAX_RESULT_BYTES = 64 * 1024 * 1024
#: Error texts (tracebacks) are cut to this many characters, keeping both ends.
MAX_ERROR_CHARS = 64 * 1024


def _exception_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def storable_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` as PostgreSQL's text and jsonb can hold it: NULs and lone surrogates escaped,
    and the middle cut out past ``limit`` characters (a traceback's ends say the most)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        half = limit // 2
        text = f"{text[:half]}\n[... {len(text) - limit:,} characters cut ...]\n{text[-half:]}"
    return text


def _history_entry(
    job: Job, exc: BaseException, worker_id: str, now: datetime, text: str
) -> dict[str, object]:
    """The attempt's entry in the job's history (``errors``)."""
    return {
        "attempt": job.attempts,
        "worker_id": worker_id,
        "exception_class": _exception_path(exc),
        "traceback": text,
        "at": now.isoformat(),
    }


def failed(
    job: Job, exc: BaseException, started_at: datetime, worker_id: str, decision: RetryDecision
) -> Outcome:
    """The outcome of a failed attempt: retried after ``decision.delay`` or dead."""
    now = conf.now()
    text = storable_text("".join(traceback.format_exception(exc)))
    entry = _history_entry(job, exc, worker_id, now, text)
    if not decision.final:
        return Outcome(
            job_id=job.id,
            claim_token=job.claim_token,
            status=JobStatus.PENDING,
            started_at=started_at,
            finished_at=None,
            run_after=now + timedelta(seconds=decision.delay),
            error=text,
            error_entry_json=dumps(entry),
            outcome=Attempt.RETRIED,
            exception=exc,
            retry_delay=decision.delay,
        )
    return Outcome(
        job_id=job.id,
        claim_token=job.claim_token,
        status=JobStatus.DEAD,
        started_at=started_at,
        finished_at=now,
        error=text,
        error_entry_json=dumps(entry),
        outcome=Attempt.DEAD,
        exception=exc,
    )


def interrupted(job: Job, exc: BaseException, started_at: datetime, worker_id: str) -> Outcome:
    """The outcome of an attempt handed back because its worker shuts down (the job raised
    ``JobInterrupted``): pending again at once, its attempt given back within
    ``PGQUEUE_MAX_INTERRUPTIONS`` (the outcome statement decides: ``sql.outcomes``)."""
    now = conf.now()
    reason = storable_text(str(exc) or "handed back: the worker is shutting down")
    entry = _history_entry(job, exc, worker_id, now, reason)
    entry[Attempt.INTERRUPTED.value] = True
    return Outcome(
        job_id=job.id,
        claim_token=job.claim_token,
        status=JobStatus.PENDING,
        started_at=started_at,
        finished_at=None,
        run_after=now,
        error_entry_json=dumps(entry),
        outcome=Attempt.INTERRUPTED,
        exception=exc,
    )


def cancelled(outcome: Outcome) -> Outcome:
    """``outcome`` for a job asked to stop while it ran: it ends cancelled, never retried.

    What the attempt did stays on record (its error, or its result if it completed).
    """
    return dataclasses.replace(
        outcome,
        status=JobStatus.CANCELLED,
        finished_at=outcome.finished_at or conf.now(),
        run_after=None,
        outcome=Attempt.CANCELLED,
    )


def decide(job: Job, *, retryable: bool = True) -> RetryDecision:
    """Retry or not, and when: the job's own :class:`RetryStrategy` (defaults if unknown)."""
    strategy = registry.spec_for(job.name).retry_strategy()
    return strategy.decide(job.attempts, job.max_attempts, retryable=retryable)


def result_json(job: Job, value: Any) -> str:
    """JSON text for a return value; :class:`ResultNotStorable` when PostgreSQL can't hold it."""
    if value is None:  # most jobs return nothing: no round trip to check
        return "null"
    try:
        text = dumps(value)
        # Too big is refused below without decoding it again (a 300 MB string would be).
        if len(text) <= MAX_RESULT_BYTES and json.loads(text) != value:
            raise TypeError(
                f"it does not survive a JSON round trip (comes back as {json.loads(text)!r:.200})"
            )
    except (TypeError, ValueError, RecursionError) as exc:
        problem = f"{type(value).__name__} is not JSON: {exc}"
    else:
        if len(text) > MAX_RESULT_BYTES:
            problem = f"its JSON is {len(text):,} bytes, over the {MAX_RESULT_BYTES:,} stored"
        elif not jsonb_storable(text):
            problem = "it holds a NUL character or a lone surrogate, which jsonb cannot store"
        else:
            return text
    raise ResultNotStorable(
        f"Job {job.name!r} #{job.id} ran, but its return value cannot be stored as its result: "
        f"{problem}. The job is not retried (it would do its work again)."
    )


def end_connections() -> list[str]:
    """After a job: roll back what it left open, then close connections Django would close.

    ``close_old_connections`` plus one check in the same pass (this runs once per job): a job
    may leave ``transaction.atomic()`` entered, or autocommit off. Its writes are not committed,
    so they must not look committed: the connection is closed (the server rolls the
    transaction back) and its transaction state reset, so the next job starts clean. Returns
    the aliases that had a transaction open.

    It never opens a connection (a job whose connection could not be opened leaves none) and
    never raises: a connection the server dropped is discarded, and the next job connects
    afresh.
    """
    left_open = []
    for connection in connections.all(initialized_only=True):
        try:
            if connection.in_atomic_block or (
                connection.connection is not None and not connection.autocommit
            ):
                left_open.append(connection.alias)
                _discard(connection)
            else:
                connection.close_if_unusable_or_obsolete()
        except DATABASE_ERRORS:
            logger.debug(  # in the job's thread: JobContext adds the job's fields
                "Discarding connection %r after an error", connection.alias, exc_info=True
            )
            _discard(connection)
    return left_open


def _discard(connection: BaseDatabaseWrapper) -> None:
    """Close ``connection`` and forget any transaction state a job left on it.

    A pooled connection (``OPTIONS["pool"]``) is rolled back here and goes back to the pool
    idle; one that cannot be rolled back is closed, and the pool, given it closed, drops it and
    opens another. (The pool would roll it back too, with a warning in its own log: the job's
    failed attempt already says it.)
    """
    connection.in_atomic_block = False
    connection.savepoint_ids = []
    connection.atomic_blocks = []
    connection.needs_rollback = False
    connection.commit_on_exit = True
    connection.closed_in_transaction = False
    raw = connection.connection
    if raw is not None and _pooled(connection):
        try:
            raw.rollback()
        except Exception:
            logger.debug("Closing pooled connection %r: its rollback failed", connection.alias)
            with contextlib.suppress(Exception):
                raw.close()
    try:
        connection.close()
    except DATABASE_ERRORS:
        connection.connection = None


def _pooled(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` comes from Django's connection pool (PostgreSQL, Django 5.1+)."""
    try:
        return getattr(connection, "pool", None) is not None
    except Exception:  # the pool cannot be made (system check E020): it gave no connection
        return False


class AttemptConnections(Protocol):
    """What happens to Django's connections around an attempt."""

    def before(self) -> None: ...

    def after(self, *, failed: bool) -> list[str]:
        """Called once the job returned or raised (maybe twice); returns the aliases the job
        left with a transaction open."""


class _ThreadConnections(threading.local):
    """An executor thread's state, with defaults as class attributes: a ``getattr()`` with a
    default of an attribute a ``threading.local`` lacks raises and catches an AttributeError
    (0.8 us against 0.08, twice a job in a thread that never connected)."""

    connected = False
    ended: float | None = None


class WorkerConnections:
    """In a worker's executor thread: connections are the thread's own, closed when old or
    left in a transaction (:func:`end_connections`).

    Nothing to look at in a thread that has never connected to a database (Django's
    ``connection_created``: a job that enters ``atomic()`` or runs a query has): a pass looks
    every alias up in the thread's ``asgiref`` local, a tenth of a no-op job's worker CPU.
    Before a job, only when the thread's last job ended more than :attr:`FRESH` seconds ago:
    nothing else uses a thread's connections between its jobs, so right after the last job's
    pass there is nothing to close (and ``CONN_MAX_AGE`` is kept to within that second).
    """

    FRESH = 1.0

    def __init__(self) -> None:
        self._thread = _ThreadConnections()
        connection_created.connect(self._connected, weak=False, dispatch_uid=id(self))

    def _connected(self, **kwargs: Any) -> None:
        self._thread.connected = True

    def before(self) -> None:
        if not self._thread.connected:
            return
        ended = self._thread.ended
        if ended is None or time.monotonic() - ended > self.FRESH:
            end_connections()  # Django's close_old_connections(), which must not raise here

    def after(self, *, failed: bool) -> list[str]:
        if not self._thread.connected:
            return []
        left_open = end_connections()
        self._thread.ended = time.monotonic()
        return left_open


WORKER_CONNECTIONS = WorkerConnections()


class _ThisProcess:
    """This process's pid, kept up to date by a fork hook rather than asked of the kernel twice
    a job: ``os.getpid()`` is a system call, 8 % of a no-op job's executor thread in a drain
    (py-spy). Every fork that goes on running Python runs the hooks: ``os.fork()`` (and so
    ``multiprocessing``), and C code that calls ``PyOS_AfterFork_Child()`` as it must."""

    pid = os.getpid()


def _forked() -> None:
    _ThisProcess.pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def run_in_this_process(job: Job) -> Any:
    """Run the job's function; in a child it forked, end that child as it returns or raises.

    The pid is the one this attempt started in: a process the job forked (``os.fork()``)
    returns or raises into this code too, and must not go on as a copy of the worker (logging
    the attempt, writing its outcome, taking more jobs on a thread no signal stops).
    """
    pid = _ThisProcess.pid
    try:
        value = registry.get(job.name).run(job)
        # ``is not None`` first: most jobs return None, and isawaitable() asks three types and
        # an ABC (0.5 us).
        if value is not None and inspect.isawaitable(value):  # an async def job on a thread
            value = run_awaitable(value)
    except BaseException as exc:
        if _ThisProcess.pid != pid:
            end_forked_child(exc)
        raise
    if _ThisProcess.pid != pid:
        end_forked_child(None)
    return value


def run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Run an ``async def`` job's coroutine to its end from sync code (not the worker's event
    loop: ``testing.run_jobs``, or a sync caller of ``JobFunction.run``), with
    ``async_to_sync``: Django's async ORM and ``sync_to_async`` calls inside it run back on
    this thread, on its connection (a test's transaction included), as in an async view."""
    from asgiref.sync import async_to_sync

    async def wrapped() -> Any:
        return await awaitable

    return async_to_sync(wrapped)()


def end_forked_child(exc: BaseException | None) -> NoReturn:
    """End a process a job forked, at once, as Python would end it (not as the worker).

    The exit status is a ``SystemExit``'s code (0 for None; its message printed and 1 for any
    other value), 0 when the job's function returned in the child, and 1 when it raised
    anything else (its traceback printed to stderr). Nothing is logged or written to the
    database, and the connections the child inherited are left alone (closing one would close
    it for the parent too): ``os._exit`` skips every cleanup but flushing ``sys.stdout`` and
    ``sys.stderr``, as ``multiprocessing`` does for the processes it forks.
    """
    code = 0
    try:
        if isinstance(exc, SystemExit):
            if isinstance(exc.code, int):
                code = exc.code
            elif exc.code is not None:
                print(exc.code, file=sys.stderr)
                code = 1
        elif exc is not None:
            code = 1
            traceback.print_exception(exc, file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    finally:
        os._exit(code)


def perform(
    job: Job, worker_id: str, attempt_connections: AttemptConnections = WORKER_CONNECTIONS
) -> Outcome:
    """Run one attempt of ``job`` (already claimed, ``running``) and return its outcome.

    ``attempt_connections``: the worker's thread connections by default;
    :func:`django_pgqueue.testing.run_jobs` runs attempts on the test's own connection. Under
    OpenTelemetry, the attempt is a span, current while the job runs
    (:mod:`django_pgqueue.tracing`).
    """
    if not tracing.active():
        return _attempt(job, worker_id, attempt_connections)
    with tracing.running(job, worker_id) as span:
        outcome = _attempt(job, worker_id, attempt_connections)
        tracing.ran(span, outcome.outcome, outcome.exception)
    return outcome


def _attempt(job: Job, worker_id: str, attempt_connections: AttemptConnections) -> Outcome:
    attempt_connections.before()
    started_at = conf.now()
    signals.send(signals.job_started, job=job, worker_id=worker_id)
    try:
        if job.poison:
            raise PoisonJob(f"Job {job.name!r} #{job.id} cannot be run as stored: {job.poison}")
        value = run_in_this_process(job)
        left_open = attempt_connections.after(failed=False)
        if left_open:
            raise TransactionLeftOpen(
                f"Job {job.name!r} #{job.id} returned with a transaction still open on "
                f"database {', '.join(left_open)}: its writes there were rolled back. Exit every "
                "transaction.atomic() block before returning."
            )
        outcome = Outcome(
            job_id=job.id,
            claim_token=job.claim_token,
            status=JobStatus.COMPLETED,
            started_at=started_at,
            finished_at=conf.now(),
            result_json=result_json(job, value),
        )
    except JobInterrupted as exc:
        attempt_connections.after(failed=True)
        outcome = interrupted(job, exc, started_at, worker_id)
    except (ResultNotStorable, PoisonJob) as exc:
        # Running it again would not help (and would do a finished job's work twice).
        attempt_connections.after(failed=True)
        outcome = failed(job, exc, started_at, worker_id, decide(job, retryable=False))
    except BaseException as exc:
        # Anything the job raised, SystemExit and KeyboardInterrupt included, fails this
        # attempt. An unknown name retries with the default backoff (a newer deploy may know it).
        attempt_connections.after(failed=True)
        outcome = failed(job, exc, started_at, worker_id, decide(job))
    signals.send(
        signals.job_finished,
        job=job,
        worker_id=worker_id,
        outcome=outcome.outcome,
        exception=outcome.exception,
    )
    return outcome


async def aperform(job: Job, worker_id: str, timeout: float | None) -> Outcome:
    """:func:`perform` for an ``async def`` job, awaited on the worker's event loop: one attempt
    of ``job`` and its outcome, within ``timeout`` seconds (``asyncio.timeout``: past it the
    job's task is cancelled where it awaits, its ``finally`` blocks run, and the attempt fails
    as :class:`JobTimeout`).

    A ``CancelledError`` from outside (the job cancelled, or the worker's shutdown timeout)
    propagates: the caller decides the outcome. Everything else the job raises is its failed
    attempt, as with :func:`perform`."""
    if not tracing.active():
        return await _aattempt(job, worker_id, timeout)
    with tracing.running(job, worker_id) as span:
        outcome = await _aattempt(job, worker_id, timeout)
        tracing.ran(span, outcome.outcome, outcome.exception)
    return outcome


async def _aattempt(job: Job, worker_id: str, timeout: float | None) -> Outcome:
    started_at = conf.now()
    signals.send(signals.job_started, job=job, worker_id=worker_id)
    try:
        if job.poison:
            raise PoisonJob(f"Job {job.name!r} #{job.id} cannot be run as stored: {job.poison}")
        try:
            async with asyncio.timeout(timeout):
                value = registry.get(job.name).run(job)
                if inspect.isawaitable(value):  # a sync job the loop was handed: run as it is
                    value = await value
        except TimeoutError as exc:
            if timeout is None or not _timed_out(exc):
                raise
            raise JobTimeout(
                f"Job {job.name!r} #{job.id} ran longer than its {timeout:g}s timeout: "
                "cancelled where it awaited"
            ) from exc
        outcome = Outcome(
            job_id=job.id,
            claim_token=job.claim_token,
            status=JobStatus.COMPLETED,
            started_at=started_at,
            finished_at=conf.now(),
            result_json=result_json(job, value),
        )
    except asyncio.CancelledError:
        raise  # cancelled from outside: the caller's outcome
    except JobInterrupted as exc:
        outcome = interrupted(job, exc, started_at, worker_id)
    except (ResultNotStorable, PoisonJob) as exc:
        outcome = failed(job, exc, started_at, worker_id, decide(job, retryable=False))
    except BaseException as exc:
        outcome = failed(job, exc, started_at, worker_id, decide(job))
    signals.send(
        signals.job_finished,
        job=job,
        worker_id=worker_id,
        outcome=outcome.outcome,
        exception=outcome.exception,
    )
    return outcome


def _timed_out(exc: TimeoutError) -> bool:
    """Whether ``exc`` is ``asyncio.timeout``'s (its cause the task's cancellation), not a
    ``TimeoutError`` the job raised itself within the time (an HTTP client's, say)."""
    return isinstance(exc.__cause__, asyncio.CancelledError)


def report(
    job: Job, outcome: Outcome, worker_id: str, journal: Journal | None, events: Events
) -> None:
    """Log and journal ``outcome`` (a failure to is logged, never raised: the outcome still
    goes on), and hand it to the worker loop: the end of an attempt, sync or async."""
    try:
        log_outcome(job, outcome, worker_id)
        if journal is not None:
            journal.ended(outcome)
    except Exception:
        logger.exception(
            "Worker %s: could not log or journal the outcome of job #%d",
            worker_id,
            job.id,
            extra=job_fields(job, worker_id),
        )
    events.put(outcome)


#: The level of an attempt's line; a failure's comes from the settings (:func:`_level`).
_LEVELS: dict[str, int] = {
    Attempt.COMPLETED: logging.INFO,
    Attempt.CANCELLED: logging.WARNING,
    Attempt.INTERRUPTED: logging.INFO,
}
#: The most of an exception's message a retry's one-line reason keeps.
_REASON_MAX = 300


def _retried(outcome: Outcome) -> bool:
    """Whether the attempt failed and the job will run again (its line has no traceback)."""
    return outcome.outcome == Attempt.RETRIED and outcome.run_after is not None


def _level(outcome: Outcome) -> int:
    level = _LEVELS.get(outcome.outcome)
    if level is not None:
        return level
    return settings.RETRY_LOG_LEVEL if _retried(outcome) else settings.FAILURE_LOG_LEVEL


def _reason(exc: BaseException | None, error: str | None) -> str:
    """``TimeoutError: read timed out``: the exception's class and message, on one line."""
    if exc is None:
        text = (error or "").strip().splitlines()
        return text[-1][:_REASON_MAX] if text else "no exception"
    message = " ".join(str(exc).split())
    if len(message) > _REASON_MAX:
        message = message[: _REASON_MAX - 3] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def log_outcome(job: Job, outcome: Outcome, worker_id: str | None = None) -> None:
    """One line per attempt: what happened, how long it ran, and for a retry when it comes.

    The record carries ``job_id``, ``job_name``, ``queue``, ``attempt``, ``outcome``,
    ``duration`` (seconds) and ``worker_id`` as attributes, for structured (JSON) formatters.

    A failure the job will retry is one line at ``PGQUEUE_RETRY_LOG_LEVEL`` (WARNING): the
    exception's class and message, and when it runs again, without the traceback (kept in
    the job's error history). The last one, the job dead, is at ``PGQUEUE_FAILURE_LOG_LEVEL``
    (ERROR) with the traceback: with Sentry's logging integration, only that is an event.
    """
    level = _level(outcome)
    if not logger.isEnabledFor(level):
        return
    duration = ((outcome.finished_at or conf.now()) - outcome.started_at).total_seconds()
    extra = {**job_fields(job, worker_id), "outcome": outcome.outcome, "duration": duration}
    head = f"{job.name} #{job.id} queue={job.queue} attempt {job.attempts}/{job.max_attempts}"
    ran = f"after {_seconds(duration)}"
    exc_info = outcome.exception
    if exc_info is not None and getattr(exc_info, TRACEBACK_LOGGED, False):
        # A django.tasks task: Django's own logger printed this traceback (one is enough).
        exc_info = None
        ran += f" ({type(outcome.exception).__name__}, traceback in the django.tasks log)"
    if outcome.outcome == Attempt.COMPLETED:
        logger.info("%s completed %s", head, ran, extra=extra)
    elif outcome.outcome == Attempt.CANCELLED:
        logger.warning(
            "%s cancelled %s (asked to stop while it ran%s)",
            head,
            ran,
            f"; {type(outcome.exception).__name__}" if outcome.exception else "",
            extra=extra,
        )
    elif outcome.outcome == Attempt.INTERRUPTED:
        logger.info(
            "%s interrupted %s (%s): handed back, runs again",
            head,
            ran,
            _reason(outcome.exception, outcome.error),
            extra=extra,
        )
    elif outcome.outcome == Attempt.RETRIED and outcome.run_after is not None:
        # The strategy's delay, not run_after - now: the line is written a moment later.
        wait = outcome.retry_delay
        if wait is None:
            wait = max((outcome.run_after - conf.now()).total_seconds(), 0.0)
        logger.log(
            level,
            "%s failed %s (%s); retry %d/%d in %s at %s",
            head,
            ran,
            _reason(outcome.exception, outcome.error),
            job.attempts + 1,
            job.max_attempts,
            _seconds(wait),
            log_time(outcome.run_after),
            extra=extra,
        )
    else:
        logger.log(level, "%s failed %s; now dead", head, ran, exc_info=exc_info, extra=extra)


#: Set (True) on an exception whose traceback another logger already wrote: the attempt's line
#: then names it without repeating the traceback (``tasks.runnable`` sets it when Django's
#: ``django.tasks`` logger logged the failure).
TRACEBACK_LOGGED = "_pgqueue_traceback_logged"


def _seconds(value: float) -> str:
    """``0.8 ms``, ``1.25 s``, ``3 min 20 s``: a duration a person reads at a glance."""
    if value < 1:
        return f"{value * 1000:.1f} ms"
    if value < 120:
        return f"{value:.2f} s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes} min {seconds} s"
