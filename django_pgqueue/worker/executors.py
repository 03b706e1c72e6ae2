"""The threads that run jobs, and what each of them is running.

Executors take claimed jobs from a queue, run them (each thread with its own Django
connections) and report outcomes to the worker loop's event queue. A job that runs past its
timeout is failed by the loop and its thread replaced: Python cannot kill a thread, so the hung
one is abandoned and its late result dropped. A job asked to stop (``Job.cancel()``) sees
``current_job().cancel_requested``; one that runs on past the cancel timeout is treated the same
way (its outcome is ``cancelled``). An executor never dies of a job: everything a job
raises is its failed attempt, an error in our own code around it fails that job, and a thread
that dies anyway is noticed by the loop (:meth:`Executors.replace_dead`), its job failed and the
thread replaced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connections

from django_pgqueue import conf, registry
from django_pgqueue.conf import settings
from django_pgqueue.context import CurrentJob, bind
from django_pgqueue.exceptions import CancelTimeout, ExecutorDied, JobTimeout
from django_pgqueue.logs import job_fields
from django_pgqueue.operations import Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.states import Attempt, JobStatus
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.handoff import Handoff
from django_pgqueue.worker.journal import Journal
from django_pgqueue.worker.performer import (
    cancelled,
    decide,
    failed,
    log_outcome,
    perform,
    report,
)

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = get_logger("django_pgqueue.worker")

#: How often running jobs with a timeout are checked.
TIMEOUT_CHECK_INTERVAL = 0.25


@dataclass(frozen=True)
class Dropped:
    """Event: a claimed job was not run because another worker owns it now, or (``unconfirmed``)
    may own it soon: its lock went unconfirmed too long (the loop hands it back if it is still
    this worker's)."""

    job_id: int
    unconfirmed: bool = False


@dataclass
class _Running:
    job: Job
    started_at: datetime
    deadline: float | None  # monotonic time after which the job counts as hung
    context: CurrentJob
    thread: threading.Thread = field(default_factory=threading.current_thread)
    #: Monotonic time after which a job asked to stop is abandoned (None: not asked, or wait).
    cancel_deadline: float | None = None

    def overdue(self, now: float) -> bool:
        return any(d is not None and now > d for d in (self.deadline, self.cancel_deadline))

    @property
    def attempt(self) -> tuple[int, int]:
        return (self.job.id, self.job.attempts)


def failure_outcome(job: Job, exc: BaseException, started_at: datetime, worker_id: str) -> Outcome:
    """``failed(...)`` for errors outside the job body; if even that fails, a plain retry."""
    try:
        return failed(job, exc, started_at, worker_id, decide(job))
    except Exception:
        logger.exception(
            "Job #%d: could not build its failure outcome",
            job.id,
            extra=job_fields(job, worker_id),
        )
        return Outcome(
            job_id=job.id,
            claim_token=job.claim_token,
            status=JobStatus.PENDING,
            started_at=started_at,
            finished_at=None,
            run_after=conf.now() + timedelta(seconds=60),
            error=f"{type(exc).__name__} (worker error while recording this failure)",
            outcome=Attempt.RETRIED,
            exception=exc,
        )


class Executors:
    def __init__(
        self,
        worker_id: str,
        count: int,
        events: Events,
        journal: Journal | None = None,
        cancel_timeout: float | None = None,
        *,
        shutdown: threading.Event | None = None,
    ) -> None:
        self.worker_id = worker_id
        #: The worker's shutdown flag, which every job's ``current_job()`` reads.
        self.shutdown = shutdown if shutdown is not None else threading.Event()
        self.cancel_timeout = cancel_timeout
        self.journal = journal
        self.count = count
        self.events = events
        #: Claimed jobs whose lock another worker took over: skipped if not started yet.
        self.lost: set[int] = set()
        #: When the lock of each claimed job not started yet was last confirmed (its claim, or
        #: a heartbeat the database answered; ``time.monotonic()``): see :meth:`confirm`.
        self._confirmed: dict[int, float] = {}
        self._work = Handoff()
        self._running: dict[tuple[int, int], _Running] = {}  # (id, attempt) -> running
        self._abandoned: set[tuple[int, int]] = set()  # attempts failed by the loop
        self._asked_to_stop: set[int] = set()  # job ids cancelled while claimed
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._started = 0
        self._timeouts: dict[str, float | None] = {}

    def start(self) -> None:
        for _ in range(self.count):
            self._start_thread()

    def stop(self) -> None:
        """Let every thread finish its current job and exit (hung ones never will)."""
        for _ in self._threads:
            self._work.put(None)

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue a claim's jobs for the threads, in the order to run them.

        Then the calling thread (the loop) lets go of the GIL for a moment: a thread woken for
        these jobs takes it and starts the first at once, instead of waiting for the loop's
        next statement to release it (measured on a pickup after an idle pause: 0.19 ms from
        the hand-over to the job's thread running, 0.07 ms with it).
        """
        self._work.put_all(jobs)
        if jobs:
            time.sleep(0)

    def take_unstarted(self) -> list[Job]:
        """Take back the jobs no thread has started yet."""
        return list(self._work.take_all())

    def abandoned(self, job: Job) -> bool:
        return (job.id, job.attempts) in self._abandoned

    def abandoned_alive(self) -> list[int]:
        """The jobs whose abandoned attempt's thread is still running the job function (it
        leaves the list when the function returns: the thread ends)."""
        with self._lock:
            return sorted(
                {
                    run.job.id
                    for attempt, run in self._running.items()
                    if attempt in self._abandoned and run.thread.is_alive()
                }
            )

    @property
    def has_deadlines(self) -> bool:
        return any(
            r.deadline is not None or r.cancel_deadline is not None
            for r in list(self._running.values())
        )

    def request_cancel(self, job_ids: set[int]) -> None:
        """Tell the jobs ``job_ids`` (claimed by this worker) that they were cancelled.

        A running one sees ``current_job().cancel_requested``, and has ``cancel_timeout``
        seconds to return; one not started yet is not started.
        """
        now = time.monotonic()
        with self._lock:
            self._asked_to_stop |= job_ids
            for run in self._running.values():
                if run.job.id in job_ids and not run.context.cancel_requested:
                    run.context.request_cancel()
                    if self.cancel_timeout is not None:
                        run.cancel_deadline = now + self.cancel_timeout

    @property
    def running(self) -> int:
        """How many attempts are running now."""
        return len(self._running)

    def running_ids(self) -> list[int]:
        with self._lock:
            return [job_id for job_id, _ in self._running]

    def take_progress(self) -> dict[int, str]:
        """The progress running jobs reported since the last call (JSON by job id)."""
        with self._lock:
            runs = list(self._running.values())
        progress = {}
        for run in runs:
            text = run.context.take_progress()
            if text is not None:
                progress[run.job.id] = text
        return progress

    def fail_overdue(self) -> list[Outcome]:
        """Fail the attempts running past their timeout (or, asked to stop, past the cancel
        timeout) and replace their threads."""
        now = time.monotonic()
        with self._lock:
            overdue = [
                r
                for r in self._running.values()
                if r.overdue(now) and r.attempt not in self._abandoned
            ]
            self._abandoned.update(r.attempt for r in overdue)
            self._asked_to_stop.difference_update(r.job.id for r in overdue)
        outcomes = []
        for running in overdue:
            job = running.job
            if running.cancel_deadline is not None and now > running.cancel_deadline:
                exc: BaseException = CancelTimeout(
                    f"Job {job.name!r} #{job.id} was cancelled and still ran "
                    f"{self.cancel_timeout:g}s later: its thread was abandoned, its result will "
                    "be dropped"
                )
            else:
                timeout = self._timeout(job.name) or 0
                exc = JobTimeout(
                    f"Job {job.name!r} #{job.id} ran longer than its {timeout:g}s timeout"
                )
            outcomes.append(self._fail(running, exc))
            self._start_thread()
        return outcomes

    def replace_dead(self) -> list[Outcome]:
        """Fail the jobs of executor threads that died, and start threads in their place."""
        with self._lock:
            dead = [t for t in self._threads if not t.is_alive()]
            for thread in dead:
                self._threads.remove(thread)
            orphans = [
                r
                for r in self._running.values()
                if r.thread in dead and r.attempt not in self._abandoned
            ]
            self._abandoned.update(r.attempt for r in orphans)
        outcomes = []
        for running in orphans:
            exc = ExecutorDied(
                f"The executor thread running job {running.job.name!r} #{running.job.id} died"
            )
            outcomes.append(self._fail(running, exc))
        for thread in dead:
            # A job it had taken but not started goes back to the queue.
            in_hand = self._work.in_hand(thread)
            if in_hand is not None and (in_hand.id, in_hand.attempts) not in self._running:
                self._work.put(in_hand)
        for thread in dead:
            logger.error(
                "Worker %s: executor thread %s died; starting another", self.worker_id, thread.name
            )
            self._start_thread()
        return outcomes

    def _fail(self, running: _Running, exc: BaseException) -> Outcome:
        outcome = failure_outcome(running.job, exc, running.started_at, self.worker_id)
        if running.context.cancel_requested:
            outcome = cancelled(outcome)
        log_outcome(running.job, outcome, self.worker_id)
        if self.journal is not None:
            self.journal.ended(outcome)
        return outcome

    def _timeout(self, name: str) -> float | None:
        """The job's timeout, looked up once per job name for this worker's life."""
        try:
            return self._timeouts[name]
        except KeyError:
            timeout = self._timeouts[name] = registry.spec_for(name).resolved_timeout
            return timeout

    def _start_thread(self) -> None:
        self._started += 1
        thread = threading.Thread(
            target=self._run, name=f"pgqueue-executor-{self._started}", daemon=True
        )
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        """Take jobs and run them until told to stop.

        Nothing raised here ends the thread: an exception in our own code around a job (a bug,
        ``MemoryError``, an asynchronous exception) is logged and the job this thread had in
        hand is set right by :meth:`_rescue`.
        """
        while True:
            job: Job | None = None
            outcome: Outcome | None = None
            abandoned = False
            try:
                job = self._work.take()
                if job is None:
                    connections.close_all()
                    return
                lost = job.id in self.lost
                if lost or self._unconfirmed(job):
                    self._confirmed.pop(job.id, None)
                    self.events.put(Dropped(job.id, unconfirmed=not lost))
                    self._work.done()
                    continue
                outcome, abandoned = self._run_one(job)
                if abandoned:
                    self._end_abandoned(job)
                    return
                self._report(job, outcome)
                self._work.done()
            except BaseException as exc:
                if abandoned:
                    self._end_abandoned(job)
                    return
                self._rescue(self._work.in_hand() or job, outcome, exc)

    def confirm(self, job_ids: Iterable[int], *, claimed: bool = False) -> None:
        """The database confirmed this worker's locks of ``job_ids`` now: claimed them, or (not
        ``claimed``) answered a heartbeat that kept them (jobs started since are left out)."""
        now = time.monotonic()
        confirmed = self._confirmed
        for job_id in job_ids:
            if claimed or job_id in confirmed:
                confirmed[job_id] = now

    def _unconfirmed(self, job: Job) -> bool:
        """Whether ``job``, about to start, has gone without its lock confirmed for half the
        visibility timeout (one and a half heartbeat intervals, if more): this worker's
        heartbeats have not got through (a network cut, a frozen process), and past the timeout
        another worker takes the job over and runs it. Started here too, it would run twice: it
        is dropped instead, and the loop hands it back (pending, no attempt spent) if it is still
        this worker's, or leaves it to the worker that took it."""
        confirmed = self._confirmed.pop(job.id, None)
        if confirmed is None:
            return False
        age = time.monotonic() - confirmed
        timeout = settings.VISIBILITY_TIMEOUT
        if age <= min(timeout, max(timeout / 2, 1.5 * settings.HEARTBEAT_INTERVAL)):
            return False
        logger.warning(
            "Worker %s: job #%d not started: its lock was last confirmed %.1f s ago (visibility "
            "timeout %g s), another worker may run it",
            self.worker_id,
            job.id,
            age,
            settings.VISIBILITY_TIMEOUT,
        )
        return True

    def _run_one(self, job: Job) -> tuple[Outcome, bool]:
        """Run ``job``: its outcome, and whether the loop abandoned it meanwhile (timeout)."""
        attempt = (job.id, job.attempts)
        started_at = conf.now()
        context = CurrentJob(job, shutdown=self.shutdown, worker_id=self.worker_id)
        try:
            timeout = self._timeout(job.name)
            with self._lock:
                self._running[attempt] = _Running(
                    job, started_at, time.monotonic() + timeout if timeout else None, context
                )
                if job.id in self._asked_to_stop:
                    context.request_cancel()
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
                bind(context)
                try:
                    outcome = perform(job, self.worker_id)
                finally:
                    bind(None)
        except BaseException as exc:
            logger.exception(
                "Worker %s: error around job #%d",
                self.worker_id,
                job.id,
                extra=job_fields(job, self.worker_id),
            )
            outcome = failure_outcome(job, exc, started_at, self.worker_id)
        if context.cancel_requested:
            outcome = cancelled(outcome)
        # The attempt ends here: from the moment its entry leaves _running, only this thread
        # reports it (nothing between here and the return calls Python code).
        with self._lock:
            self._running.pop(attempt, None)
            abandoned = attempt in self._abandoned
            self._abandoned.discard(attempt)
            self._asked_to_stop.discard(job.id)
        return outcome, abandoned

    def _end_abandoned(self, job: Job | None) -> None:
        """This thread's job was failed by the loop (timeout): a new thread took its place."""
        self._work.done()
        with self._lock:
            if threading.current_thread() in self._threads:
                self._threads.remove(threading.current_thread())
        logger.warning(
            "Worker %s: job #%s finished after its timeout; result dropped",
            self.worker_id,
            job.id if job is not None else "?",
            extra=job_fields(job, self.worker_id) if job is not None else None,
        )
        connections.close_all()

    def _report(self, job: Job, outcome: Outcome) -> None:
        report(job, outcome, self.worker_id, self.journal, self.events)

    def _rescue(self, job: Job | None, outcome: Outcome | None, exc: BaseException) -> None:
        """After an exception in our own code around ``job`` (the job this thread had in hand, or
        None): the job is never left in limbo.

        Its outcome, if it ran to one, is reported; an attempt that started is failed
        (``ExecutorDied``); a job taken from the queue but not started is queued again, to run
        as if nothing happened.
        """
        logger.error(
            "Worker %s: error in the executor around job #%s; the thread carries on",
            self.worker_id,
            job.id if job is not None else "-",
            exc_info=exc,
            extra=job_fields(job, self.worker_id) if job is not None else None,
        )
        if job is None:
            return
        if outcome is not None and outcome.job_id == job.id:
            self._report(job, outcome)
            return
        attempt = (job.id, job.attempts)
        with self._lock:
            running = self._running.pop(attempt, None)
            abandoned = attempt in self._abandoned
            self._abandoned.discard(attempt)
        if abandoned:
            return  # the loop has failed it already
        if running is None:
            self._work.put(job)
            return
        self._asked_to_stop.discard(job.id)
        died = ExecutorDied(
            f"The executor running job {job.name!r} #{job.id} failed around it: "
            f"{type(exc).__name__}: {exc}"
        )
        self.events.put(self._fail(running, died))
