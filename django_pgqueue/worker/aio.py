"""The event loop that runs ``async def`` jobs, many at once, beside the executor threads.

One thread of the worker process runs an asyncio event loop; each claimed async job is a task
on it, with its own ``current_job()`` (a context variable: each task runs in a context of its
own). The worker loop bounds how many run at once (``PGQUEUE_ASYNC_CONCURRENCY``,
``run_jobs --async-concurrency``): it claims no more async jobs than there is room for.

What a sync job has, an async job has, through the same parts: its outcome goes to the worker
loop's event queue and the same write-back (fenced by its claim token, journaled); the loop
heartbeats it while it is claimed; progress and ``cancel_requested`` are read and set the same
way. Where threads differ:

* a timeout cancels the job's task where it awaits (``asyncio.timeout``): its ``finally``
  blocks run and the attempt fails as ``JobTimeout``; nothing is abandoned.
* a cancel (``Job.cancel()``) sets ``cancel_requested`` and cancels the task: the job sees
  ``CancelledError`` where it awaits and ends ``cancelled``.
* a task that does not end when cancelled (the job catches ``CancelledError`` and carries on,
  or never awaits: it blocks the loop) is stuck, as a thread that ignores its timeout is: past
  its timeout and then the cancel timeout (``PGQUEUE_CANCEL_TIMEOUT``), or the cancel timeout
  after a cancel request, the watchdog fails its attempt (``JobTimeout``, ``CancelTimeout``),
  abandons the task (whatever it reports later is dropped) and tells the worker loop
  (:class:`Stuck`), which replaces the process as for an abandoned thread: the stuck code
  stops with it.
* the shutdown: the worker waits for async jobs as for threads, up to its shutdown timeout,
  then hands them back interrupted (:meth:`AsyncJobs.abandon`): their tasks are cancelled (their
  ``finally`` blocks run) and nothing they report afterwards is written or journaled.
* a job that blocks the loop (``time.sleep``, a sync ORM call inside ``async def``) stops every
  other async job with it: a watchdog thread sees the loop stuck past
  ``PGQUEUE_ASYNC_BLOCKED_WARNING`` seconds and names the job in a warning. A job with a
  timeout that blocks it past the timeout and the cancel timeout is stuck (above); one
  without a timeout blocks it until it returns, a cancel request (the cancel timeout) or the
  shutdown (the shutdown timeout: the process exits) ends it, or another job of the loop runs
  past its own deadline because of it.

Database access from async jobs goes through Django's async ORM or ``sync_to_async``, which run
on Django's one thread for sync code: its connections are tidied (closed when old or broken, a
transaction left open rolled back) once a second while async jobs run (:func:`end_connections`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async

from django_pgqueue import conf, registry
from django_pgqueue.conf import settings
from django_pgqueue.context import CurrentJob, bind_async
from django_pgqueue.exceptions import CancelTimeout, ExecutorDied, JobTimeout
from django_pgqueue.logs import job_fields
from django_pgqueue.operations import Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.states import JobStatus
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.executors import failure_outcome
from django_pgqueue.worker.journal import Journal
from django_pgqueue.worker.performer import aperform, cancelled, end_connections, report

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.worker")

#: How often the loop says it is alive to the watchdog (seconds).
BEAT = 0.05
#: How often the connections of Django's sync thread are tidied while async jobs run.
TIDY_INTERVAL = 1.0
#: How long :meth:`AsyncJobs.abandon` waits for cancelled tasks to unwind; and the least time
#: a cancelled task gets before it counts as stuck, whatever the cancel timeout.
UNWIND = 1.0


def is_async(job: Job) -> bool:
    """Whether ``job`` runs on the event loop: its function is ``async def`` in this worker's
    registry (its row's ``is_async`` only sized the claim). A name none registered runs on a
    thread, where its attempt fails as ``UnknownJob``."""
    return registry.spec_for(job.name).is_async


@dataclass(frozen=True)
class Stuck:
    """Event: async jobs whose tasks could not be stopped (cancelled, they ran on past the
    cancel timeout, or blocked the loop): their attempts were failed and reported, their tasks
    abandoned; the worker process stops claiming and is replaced."""

    job_ids: tuple[int, ...]


@dataclass
class _Task:
    job: Job
    context: CurrentJob
    task: asyncio.Task[None] | None = None
    #: When the attempt started (None: not yet, the loop has not run its task).
    started_at: datetime | None = None
    #: Monotonic time past which a task still running is stuck: its timeout, then the cancel
    #: timeout for its cancelled task to end (None: no timeout, or no cancel timeout).
    deadline: float | None = None
    #: The same after a cancel request: when it was heard plus the cancel timeout.
    cancel_deadline: float | None = None

    def overdue(self, now: float) -> bool:
        deadline, cancel_deadline = self.deadline, self.cancel_deadline
        return (deadline is not None and now > deadline) or (
            cancel_deadline is not None and now > cancel_deadline
        )


class AsyncJobs:
    """The event loop's thread and the async jobs running on it."""

    def __init__(
        self,
        worker_id: str,
        events: Events,
        journal: Journal | None,
        *,
        shutdown: threading.Event,
        cancel_timeout: float | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.events = events
        self.journal = journal
        self.shutdown = shutdown
        #: How long a cancelled task (timeout, cancel request) may take to end (None: for ever):
        #: the cancel timeout, and never under :data:`UNWIND` (a cancel reaches a task in
        #: microseconds: a task that ends at once is not abandoned for a watchdog's early look).
        self.cancel_timeout = None if cancel_timeout is None else max(cancel_timeout, UNWIND)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        #: Running jobs by id (read by the worker loop's thread: replaced whole, never mutated
        #: in place by another thread while it iterates a copy).
        self._running: dict[int, _Task] = {}
        #: Tasks the watchdog abandoned (stuck), by job id, until they end if ever: their
        #: attempts were reported failed; whatever they report now is dropped.
        self._stuck: dict[int, _Task] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        #: Set by :meth:`abandon`: outcomes reported from then on are dropped.
        self._abandoned = False
        self._beat = time.monotonic()
        self._finished_since_tidy = 0
        self._tidying = False
        self._timeouts: dict[str, float | None] = {}

    # ----- the worker loop's side ----------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_loop, name="pgqueue-asyncio", daemon=True)
        self._thread.start()
        self._ready.wait()
        self._watchdog = threading.Thread(
            target=self._watch, name="pgqueue-asyncio-watchdog", daemon=True
        )
        self._watchdog.start()

    def stop(self) -> None:
        """Stop the loop once its tasks are done (the worker waited for them, or abandoned)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=UNWIND)
        self._stopped.set()

    def submit(self, jobs: Sequence[Job]) -> None:
        """Start a task for each of ``jobs`` (claimed async jobs) on the loop, started with the
        first of them: a worker that never gets an async job has no loop thread, no beat every
        50 ms and no watchdog waking it (idle workers of a sync-only project stay asleep, and
        their pickups do not share the GIL with them)."""
        if self._thread is None:
            self.start()
        loop = self._loop
        assert loop is not None, "start() first"
        for job in jobs:
            entry = _Task(job, CurrentJob(job, shutdown=self.shutdown, worker_id=self.worker_id))
            with self._lock:
                self._running = {**self._running, job.id: entry}
            loop.call_soon_threadsafe(self._start, entry)

    @property
    def running(self) -> int:
        return len(self._running)

    def abandoned_alive(self) -> list[int]:
        """The jobs whose abandoned (stuck) task still runs: they leave the list when it ends."""
        return sorted(self._stuck)

    def request_cancel(self, job_ids: set[int]) -> None:
        """Cancel the running async jobs among ``job_ids``: ``cancel_requested`` is set, and the
        task is cancelled (``CancelledError`` where the job awaits; it ends ``cancelled``). A
        task still running ``cancel_timeout`` seconds later is stuck (:meth:`_abandon_overdue`)."""
        loop = self._loop
        for job_id in job_ids:
            entry = self._running.get(job_id)
            if entry is None or entry.context.cancel_requested:
                continue
            entry.context.request_cancel()
            if self.cancel_timeout is not None:
                entry.cancel_deadline = time.monotonic() + self.cancel_timeout
            if loop is not None:
                loop.call_soon_threadsafe(self._cancel, entry)

    def take_progress(self) -> dict[int, str]:
        progress = {}
        for job_id, entry in self._running.items():
            text = entry.context.take_progress()
            if text is not None:
                progress[job_id] = text
        return progress

    def abandon(self) -> None:
        """The worker's shutdown timeout ran out and it handed these jobs back interrupted:
        cancel their tasks (their ``finally`` blocks run, for a second at most) and drop
        whatever they report now."""
        self._abandoned = True
        loop = self._loop
        if loop is None or not self._running:
            return
        done = threading.Event()

        def cancel_all() -> None:
            tasks = [e.task for e in self._running.values() if e.task is not None]
            for task in tasks:
                task.cancel()
            if not tasks:
                done.set()
                return
            gathered = asyncio.gather(*tasks, return_exceptions=True)
            gathered.add_done_callback(lambda _: done.set())

        try:
            loop.call_soon_threadsafe(cancel_all)
        except RuntimeError:
            return
        done.wait(UNWIND)

    # ----- the loop's thread ---------------------------------------------------------------

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop.call_soon(self._tick)
        loop.call_later(TIDY_INTERVAL, self._tidy_when_due)
        self._ready.set()
        try:
            loop.run_forever()
        except BaseException:
            logger.exception("Worker %s: the event loop of async jobs died", self.worker_id)
            self._fail_all()
        finally:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _tick(self) -> None:
        """The loop's pulse, every :data:`BEAT` seconds, for the watchdog."""
        self._beat = time.monotonic()
        assert self._loop is not None
        self._loop.call_later(BEAT, self._tick)

    def _start(self, entry: _Task) -> None:
        assert self._loop is not None
        entry.task = self._loop.create_task(
            self._run_one(entry), name=f"pgqueue-job-{entry.job.id}"
        )

    def _cancel(self, entry: _Task) -> None:
        if entry.task is not None:
            entry.task.cancel("cancelled: Job.cancel()")

    async def _run_one(self, entry: _Task) -> None:
        job, context = entry.job, entry.context
        bind_async(context)  # this task's own context: current_job() in the job
        started_at = entry.started_at = conf.now()
        timeout = self._timeout(job.name)
        if timeout is not None and self.cancel_timeout is not None:
            # Its timeout cancels it; the cancel timeout is for it to end then (its finally
            # blocks run). Checked by the watchdog: a stuck task or a blocked loop alike.
            entry.deadline = time.monotonic() + timeout + self.cancel_timeout
        try:
            if self.journal is not None:
                self.journal.started(job.id)
            if context.cancel_requested:  # cancelled before it started: not started
                outcome = Outcome(
                    job.id,
                    JobStatus.CANCELLED,
                    started_at,
                    conf.now(),
                    claim_token=job.claim_token,
                )
            else:
                try:
                    outcome = await aperform(job, self.worker_id, timeout)
                except asyncio.CancelledError as exc:
                    if self._abandoned:
                        raise  # handed back by the worker's shutdown: nothing to report
                    # Job.cancel() (or a cancellation the job did not own): it ends cancelled.
                    outcome = cancelled(
                        Outcome(
                            job.id,
                            JobStatus.CANCELLED,
                            started_at,
                            conf.now(),
                            claim_token=job.claim_token,
                            exception=exc,
                        )
                    )
            if context.cancel_requested:
                outcome = cancelled(outcome)
        except asyncio.CancelledError:
            self._forget(job)
            raise
        except BaseException as exc:  # our own code around the job: never a lost job
            logger.exception(
                "Worker %s: error around async job #%d",
                self.worker_id,
                job.id,
                extra=job_fields(job, self.worker_id),
            )
            outcome = failure_outcome(job, exc, started_at, self.worker_id)
        self._finished_since_tidy += 1
        if self._forget(job):
            self._report(job, outcome)

    def _tidy_when_due(self) -> None:
        """Every :data:`TIDY_INTERVAL` seconds: tidy if jobs finished since the last time."""
        assert self._loop is not None
        if self._finished_since_tidy and not self._tidying:
            self._tidying = True
            self._finished_since_tidy = 0
            self._loop.create_task(self._tidy())
        self._loop.call_later(TIDY_INTERVAL, self._tidy_when_due)

    async def _tidy(self) -> None:
        """Close the connections of Django's sync thread that are old or broken (and roll back
        a transaction a job left open there), as the executor threads do after each job."""
        try:
            await sync_to_async(end_connections, thread_sensitive=True)()
        except Exception:
            logger.exception(
                "Worker %s: could not tidy the sync thread's connections", self.worker_id
            )
        finally:
            self._tidying = False

    def _forget(self, job: Job) -> bool:
        """The job's task ends: whether its attempt is still its own to report (False: the
        watchdog abandoned it as stuck, and reported it already)."""
        with self._lock:
            if job.id not in self._running:
                stuck = self._stuck.pop(job.id, None) is not None
            else:
                running = dict(self._running)
                running.pop(job.id, None)
                self._running = running
                return True
        if stuck and not self._abandoned:
            logger.warning(
                "Worker %s: job #%d ended after its task was abandoned; result dropped",
                self.worker_id,
                job.id,
                extra=job_fields(job, self.worker_id),
            )
        return False

    def _report(self, job: Job, outcome: Outcome) -> None:
        if not self._abandoned:
            report(job, outcome, self.worker_id, self.journal, self.events)

    def _fail_all(self) -> None:
        """The loop itself died (a bug of ours): every job on it fails, retried as usual."""
        for entry in list(self._running.values()):
            exc = ExecutorDied(f"The event loop running async job #{entry.job.id} died")
            self._report(entry.job, failure_outcome(entry.job, exc, conf.now(), self.worker_id))
        with self._lock:
            self._running = {}

    def _timeout(self, name: str) -> float | None:
        try:
            return self._timeouts[name]
        except KeyError:
            timeout = self._timeouts[name] = registry.spec_for(name).resolved_timeout
            return timeout

    # ----- the watchdog ----------------------------------------------------------------------

    def _watch(self) -> None:
        """Warn, naming the job, when the loop has not turned for ``ASYNC_BLOCKED_WARNING``
        seconds: a job blocks it (``time.sleep``, sync database calls in ``async def``), and
        every other async job of the process waits meanwhile. Once per block, and once more
        when it ends, with how long it lasted. And abandon the tasks past their deadlines
        (:meth:`_abandon_overdue`): this thread runs whether the loop turns or not."""
        threshold = settings.ASYNC_BLOCKED_WARNING
        blocked_by: str | None = None
        blocked_since = 0.0
        while not self._stopped.wait(min(threshold / 2, 0.25)):
            loop = self._loop
            if loop is None or loop.is_closed():
                return
            lag = time.monotonic() - self._beat - BEAT
            if lag < threshold:
                if blocked_by is not None:
                    logger.warning(
                        "Worker %s: the event loop ran again after %.2f s blocked by %s",
                        self.worker_id,
                        time.monotonic() - blocked_since,
                        blocked_by,
                    )
                    blocked_by = None
            elif blocked_by is None:
                blocked_since = self._beat + BEAT
                entry = self._entry_of(asyncio.current_task(loop))
                if entry is None:
                    blocked_by = "code outside any job"
                    extra = None
                else:
                    job = entry.job
                    blocked_by = f"job {job.name} #{job.id}"
                    extra = job_fields(job, self.worker_id)
                logger.warning(
                    "Worker %s: %s has blocked the event loop for %.2f s: every async job of "
                    "this process waits meanwhile. Inside async def, await instead of blocking: "
                    "asyncio.sleep, the async ORM (aget, acreate...) or sync_to_async for sync "
                    "code (docs/async.md)",
                    self.worker_id,
                    blocked_by,
                    lag,
                    extra=extra,
                )
            if self._running and not self._abandoned:
                blocked = (
                    None if blocked_by is None else (blocked_by, time.monotonic() - blocked_since)
                )
                try:
                    self._abandon_overdue(blocked)
                except Exception:  # a bug of ours: logged, and the watchdog carries on
                    logger.exception(
                        "Worker %s: error in the event loop's watchdog", self.worker_id
                    )

    def _abandon_overdue(self, blocked: tuple[str, float] | None) -> None:
        """Abandon the tasks running past their deadline: cancelled (their timeout, or a cancel
        request) and still running the cancel timeout later, whether the job caught
        ``CancelledError`` and carried on or blocks the loop (``blocked``: by what, for how
        long), where no cancel reaches it. Their attempts fail (``JobTimeout``,
        ``CancelTimeout``; ``cancelled`` if asked to stop), reported as any outcome; whatever
        the tasks report later is dropped; the worker loop is told to replace the process."""
        now = time.monotonic()
        overdue = [entry for entry in self._running.values() if entry.overdue(now)]
        if not overdue:
            return
        with self._lock:
            running = dict(self._running)
            overdue = [entry for entry in overdue if running.pop(entry.job.id, None) is entry]
            self._running = running
            self._stuck.update((entry.job.id, entry) for entry in overdue)
        for entry in overdue:
            self._report(entry.job, self._stuck_outcome(entry, now, blocked))
        if overdue:
            self.events.put(Stuck(tuple(entry.job.id for entry in overdue)))

    def _stuck_outcome(
        self, entry: _Task, now: float, blocked: tuple[str, float] | None
    ) -> Outcome:
        job = entry.job
        if blocked is None:
            why = "its task went on after it was cancelled (a CancelledError caught, not raised)"
        elif blocked[0] == f"job {job.name} #{job.id}":
            why = (
                f"it blocked the event loop for {blocked[1]:.1f} s, and no cancel reaches a job "
                "that does not await"
            )
        else:
            why = f"the event loop was blocked by {blocked[0]} for {blocked[1]:.1f} s"
        how = f"{why}; its task was abandoned and its worker process is replaced"
        if entry.cancel_deadline is not None and now > entry.cancel_deadline:
            ran = "still ran" if entry.started_at is not None else "had not started"
            exc: BaseException = CancelTimeout(
                f"Job {job.name!r} #{job.id} was cancelled and {ran} "
                f"{self.cancel_timeout:g}s later: {how}"
            )
        else:
            exc = JobTimeout(
                f"Job {job.name!r} #{job.id} ran longer than its "
                f"{self._timeout(job.name) or 0:g}s timeout and the {self.cancel_timeout:g}s "
                f"cancel timeout after it: {how}"
            )
        outcome = failure_outcome(job, exc, entry.started_at or conf.now(), self.worker_id)
        return cancelled(outcome) if entry.context.cancel_requested else outcome

    def _entry_of(self, task: asyncio.Task[object] | None) -> _Task | None:
        if task is None:
            return None
        with self._lock:
            entries = [*self._running.values(), *self._stuck.values()]
        for entry in entries:
            if entry.task is task:
                return entry
        return None


def split(jobs: Iterable[Job]) -> tuple[list[Job], list[Job]]:
    """``jobs`` as (sync, async): which run on threads, which on the event loop."""
    sync: list[Job] = []
    asynchronous: list[Job] = []
    for job in jobs:
        (asynchronous if is_async(job) else sync).append(job)
    return sync, asynchronous
