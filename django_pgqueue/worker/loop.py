"""The worker: one process's claim / run / record loop.

Threads of one worker process:

* the **loop** (the caller's thread), the scheduler: decides when to claim and how many, when
  to flush outcomes, heartbeat and prune, and handles shutdown. Every queue statement is an
  :mod:`django_pgqueue.operations` call on the worker's own connection, made from here.
* ``threads`` **executors**: run one job at a time each, with their own Django connections.
* the **listener** (unless ``PGQUEUE_LISTEN = False``): keeps a LISTEN connection open.

Everything reaches the loop through one queue of :mod:`.events`, so it sleeps in one place and
wakes for whichever comes first: an outcome, a NOTIFY (it waits on the listener's socket), a
signal, or its own timers.

The :class:`Worker` is one object: its loop, its shutdown and its heartbeat are its methods,
here. Its collaborators each get what they need when the worker builds them (its connection,
its id, a callback) and know nothing of the worker: :class:`~.capacity.Capacity` (how many to
claim), :class:`~.claims.Claimer` (the claim statements), :class:`~.writeback.WriteBack` (the
outcomes, from buffered to on disk), :class:`~.housekeeping.Housekeeping` (periodic work),
:class:`~django_pgqueue.schedules.firing.ScheduleFirer` (periodic schedules),
:class:`~.control.RunningControl` and :class:`~.control.QueueSettings` (runtime control),
:class:`~.executors.Executors`, :class:`~.listener.Listener` and
:class:`~.signals.ShutdownSignals` (the threads and the signals).
"""

from __future__ import annotations

import os
import queue as queue_module
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django_pgqueue import logs, operations, rules
from django_pgqueue.conf import settings
from django_pgqueue.operations import DATABASE_ERRORS, Outcome
from django_pgqueue.printable import get_logger
from django_pgqueue.schedules.firing import ScheduleFirer
from django_pgqueue.worker.aio import AsyncJobs, Stuck, split
from django_pgqueue.worker.capacity import Capacity
from django_pgqueue.worker.claims import REPAIR_GAP, Claimer
from django_pgqueue.worker.connection import (
    Backoff,
    QueueConnection,
    log_database_back,
    log_database_error,
)
from django_pgqueue.worker.control import (
    QUEUE_SETTINGS_LISTENING,
    QUEUE_SETTINGS_POLL,
    ControlEvent,
    QueueSettings,
    RunningControl,
)
from django_pgqueue.worker.counts import WorkerStats
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.executors import TIMEOUT_CHECK_INTERVAL, Dropped, Executors
from django_pgqueue.worker.housekeeping import Housekeeping, Periodic, prune
from django_pgqueue.worker.journal import Journal
from django_pgqueue.worker.listener import Listener
from django_pgqueue.worker.relay import RelayAddress, Relayed
from django_pgqueue.worker.rota import REFRESH as ROTA_REFRESH
from django_pgqueue.worker.rota import Rota, Wake
from django_pgqueue.worker.signals import ShutdownSignals
from django_pgqueue.worker.writeback import WriteBack

if TYPE_CHECKING:
    from django_pgqueue.models import Job
    from django_pgqueue.worker.metrics import WorkerMetrics

logger = get_logger("django_pgqueue.worker")

#: The exit status of a worker process that stopped to end a job thread or an async job's task it
#: abandoned (a job past its timeout or cancel timeout that ignores them): its supervisor starts a
#: fresh process in its place at once, whatever ``--processes``. The stuck code stops with the
#: process.
REPLACE_ME = 75

#: After a short claim that took jobs, the look for when to claim next (``Claimer.idle_until``:
#: the next due job, the poll) waits for their outcomes to be written, then ``LOOK_GRACE`` more
#: for the wake-ups those writes cause (a dependent released, docs/workflows.md), or
#: ``LOOK_AFTER`` at most (a long job). Looking at once put a round trip between a fast job and
#: the write of its outcome, and between a chain's step and the claim of the next.
LOOK_AFTER = 0.1
LOOK_GRACE = 0.002

_WAKE = object()
_STOP = object()
_SCHEDULES_CHANGED = object()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    """Claims and runs jobs until stopped (or, with ``burst``, until none is runnable).

    Usable without ``call_command``::

        Worker(queues=["emails", "default"], threads=4).run()
    """

    def __init__(
        self,
        queues: Sequence[str] | None = None,
        *,
        threads: int = 1,
        batch_size: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str | None = None,
        listen: bool | None = None,
        journal: Journal | None = None,
        cancel_timeout: float | None = None,
        schedules: bool | None = None,
        pulse: Callable[[float, bool], None] | None = None,
        metrics: WorkerMetrics | None = None,
        async_concurrency: int | None = None,
        relay: RelayAddress | None = None,
    ) -> None:
        rules.check_worker_options(
            queues,
            threads=threads,
            async_concurrency=async_concurrency,
            batch_size=batch_size,
            max_jobs=max_jobs,
            shutdown_timeout=shutdown_timeout,
            cancel_timeout=cancel_timeout,
            worker_id=worker_id,
        )
        self.queues = list(queues) if queues else None
        self.threads = threads
        #: How many async jobs run at once on the event loop, beside the threads.
        self.async_concurrency = (
            async_concurrency if async_concurrency is not None else settings.ASYNC_CONCURRENCY
        )
        self.batch_size = batch_size if batch_size is not None else settings.BATCH_SIZE
        self.burst = burst
        self.max_jobs = max_jobs
        self.shutdown_timeout = (
            shutdown_timeout if shutdown_timeout is not None else settings.SHUTDOWN_TIMEOUT
        )
        self.worker_id = worker_id or default_worker_id()
        self.listen = settings.LISTEN if listen is None else listen
        #: Where its supervisor's relay listens for it (None: it listens itself).
        self.relay = relay
        self.alias = settings.DATABASE
        self.stats = WorkerStats()
        #: With a probe port (:mod:`.probe`): told at each turn of the loop whether the worker
        #: is ready (connected and claiming); and the process's metrics (:mod:`.metrics`).
        self._pulse = pulse
        self._metrics = metrics
        self._ready = False

        self._events = Events()
        self._connection = QueueConnection(self.alias, f"pgqueue worker {self.worker_id}")
        self._claimed: dict[int, Job] = {}  # claimed and not yet written back
        #: The outcomes, from reported to on disk.
        self._writeback = WriteBack(self._connection, self.worker_id, self.stats, journal)
        self._stopping = False
        #: A job thread was abandoned: this process stops claiming, ends and is replaced.
        self._replace = False
        #: Async jobs whose tasks the event loop's watchdog abandoned (:class:`~.aio.Stuck`):
        #: the same, at the loop's next turn.
        self._stuck: list[int] = []
        #: Set once the shutdown starts: what ``current_job().shutdown_requested`` reads.
        self._shutdown_requested = threading.Event()
        self._woken = False
        #: Some wake-up of this turn may be about async jobs (or of an unknown kind).
        self._woken_for_async = False
        self.cancel_timeout = (
            cancel_timeout if cancel_timeout is not None else settings.CANCEL_TIMEOUT
        )
        self._executors = Executors(
            self.worker_id,
            threads,
            self._events,
            journal,
            self.cancel_timeout,
            shutdown=self._shutdown_requested,
        )
        #: The event loop of async jobs (:mod:`.aio`), and the claimed jobs that run on it.
        self._async = AsyncJobs(
            self.worker_id,
            self._events,
            journal,
            shutdown=self._shutdown_requested,
            cancel_timeout=self.cancel_timeout,
        )
        self._async_ids: set[int] = set()
        #: What the claim in progress took of each kind (sync, async), as its rows say.
        self._taken = [0, 0]
        #: Until when claims without sync room, and claims that answer wake-ups about sync jobs
        #: alone, leave async jobs out (the last look found none): the statement without the
        #: async jobs' branch (``sql.ready.by_kind``). A wake-up about async jobs, a poll, a
        #: timer (a scheduled job due) look for them again.
        self._async_idle_until = 0.0
        self._listener: Listener | None = None
        self._control = RunningControl(self._executors, self._listening, self._async)
        self._signals = ShutdownSignals(self.worker_id, self.stop)
        self._capacity = Capacity(threads, self.batch_size)
        #: The live workers: which notifications are this worker's, how often it polls (a
        #: burst only drains: it neither listens nor waits).
        self._rota = None if burst else Rota(self.worker_id, self.queues)
        #: Job notifications that picked this worker, until the claim they woke it for: passed
        #: on to the next worker of the rota unless it took all there was.
        self._wakes: list[Wake] = []
        #: Claimed jobs an executor dropped unstarted, their locks unconfirmed too long: handed
        #: back (fenced: only while still this worker's claim) at the loop's next statement.
        self._unstarted: list[Job] = []
        self._claimer = Claimer(
            self._connection, self.worker_id, self.queues, burst=burst, rota=self._rota
        )
        #: Periodic work, run by the loop when due; the first heartbeat registers the worker.
        self.housekeeping = Housekeeping()
        self._heartbeat_task = self.housekeeping.add(
            "heartbeat", self._heartbeat, settings.HEARTBEAT_INTERVAL
        )
        # The prune does not wake the loop: it runs at the loop's next turn once due.
        self.housekeeping.add(
            "prune", lambda: prune(self._connection), settings.PRUNE_INTERVAL, wakes=False
        )
        # Repair rounds follow claims while jobs come; an idle worker's come from here.
        self.housekeeping.add("repair", self._claimer.repair_when_due, REPAIR_GAP, first_in=1.0)
        if self._rota is not None:
            rota = self._rota
            self.housekeeping.add("rota", lambda: rota.refresh(self._connection), ROTA_REFRESH)
        # Periodic schedules: any worker fires them (not a burst, which only drains), unless
        # firing is off for it (PGQUEUE_FIRE_SCHEDULES, run_jobs --no-schedules).
        fire = settings.FIRE_SCHEDULES if schedules is None else schedules
        self._schedules_task: Periodic | None = None
        if fire and not burst:
            firer = ScheduleFirer(self.worker_id, self.alias)
            self._schedules_task = self.housekeeping.add(
                "schedules", lambda: self._fire_schedules(firer), settings.POLL_INTERVAL
            )
        # Queue settings (paused, limits): read at start, on NOTIFY, and polled as a fallback.
        self._queue_settings = QueueSettings()
        self._queue_settings_task = self.housekeeping.add(
            "queue settings", self._read_queue_settings, QUEUE_SETTINGS_POLL
        )

    # ----- public API ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to shut down gracefully (thread-safe)."""
        self._events.put(_STOP)

    def run(self) -> int:
        """Run until stopped; returns the process exit status (0 for a clean stop)."""
        self._signals.install()
        logs.install()  # the job's fields on every record about it (django_pgqueue.logs)
        try:
            self._start_threads()
            logger.info(
                "Worker %s started: queues=%s threads=%d async_concurrency=%d batch_size=%d%s",
                self.worker_id,
                ",".join(self.queues) if self.queues else "(all)",
                self.threads,
                self.async_concurrency,
                self.batch_size,
                " burst" if self.burst else "",
            )
            self._loop()
            self._shutdown()
        finally:
            if self._metrics is not None:
                self._metrics.write()  # what the last second tallied
            self._signals.restore()
            if self._listener is not None:
                self._listener.stop()
            self._executors.stop()
            self._async.stop()
            self._connection.close()
            self._events.close()
        if self._replace or self._stuck:
            logger.warning(
                "Worker %s exits to stop the job threads or tasks it abandoned; its supervisor "
                "starts a fresh process",
                self.worker_id,
            )
            return REPLACE_ME
        logger.info(
            "Worker %s stopped: %d completed, %d retried, %d dead, %d handed back, %d interrupted",
            self.worker_id,
            self.stats.completed,
            self.stats.retried,
            self.stats.dead,
            self.stats.released,
            self.stats.interrupted,
        )
        return 0

    # ----- threads ---------------------------------------------------------------------------

    def _start_threads(self) -> None:
        self._executors.start()  # the event loop starts with the first async job
        if self.listen and not self.burst:
            self._listener = Listener(
                self.alias,
                self.worker_id,
                self.queues,
                self._wake,
                self._on_control,
                self._on_schedules_changed if self._schedules_task else None,
                self._on_jobs,
                source=None if self.relay is None else Relayed(self.relay, self.worker_id),
            )
            self._listener.start()

    def _wake(self) -> None:
        self._events.put(_WAKE)

    def _on_jobs(self, wake: Wake) -> None:
        self._events.put(wake)

    def _on_control(self, payload: str) -> None:
        self._events.put(ControlEvent(payload))

    def _on_schedules_changed(self) -> None:
        """The listener heard that schedules changed: the loop fires them at its next turn."""
        self._events.put(_SCHEDULES_CHANGED)

    def _fire_schedules(self, firer: ScheduleFirer) -> float:
        """The schedules' housekeeping task: fire what is due, claim what it enqueued at once;
        returns the seconds until it is due again."""
        if firer.fire(self._connection):
            self._wake()
        return firer.wait()

    def _read_queue_settings(self) -> float:
        """Read the queues' settings; claim at once if they changed (a queue resumed, say)."""
        if self._queue_settings.read(self._connection):
            self._claimer.path.changed()
            self._wake()
        # With LISTEN, a change is heard at once; reading now and then is only a safety net.
        return QUEUE_SETTINGS_LISTENING if self._listening() else QUEUE_SETTINGS_POLL

    def _listening(self) -> bool:
        return self._listener is not None and self._listener.listening.is_set()

    # ----- the loop --------------------------------------------------------------------------

    def _loop(self) -> None:
        now = time.monotonic()
        flush_deadline: float | None = None
        next_claim: float = now  # when idle, when to look for jobs again
        look_due: float | None = None  # when to ask when to claim next (LOOK_AFTER)
        backoff = Backoff()
        budget = self.max_jobs

        while True:
            # 1. Collect events: wait only when there is nothing to do right now.
            timeout = self._wait_time(next_claim, flush_deadline, look_due)
            self._drain_events(timeout)
            if self._stopping:
                return
            now = time.monotonic()
            if self._pulse is not None:
                self._pulse(now, self._ready)
            if self._metrics is not None:
                self._metrics.turn(now, self._executors.running, self._async.running)
            sync_wake = False  # this turn's claim answers wake-ups about sync jobs alone
            if self._woken:
                self._woken = False
                next_claim = now
                if self._woken_for_async:
                    self._async_idle_until = now  # new jobs may be async ones: look for them
                else:
                    sync_wake = True
                self._woken_for_async = False
            if self._executors.has_deadlines and (overdue := self._executors.fail_overdue()):
                self._writeback.extend(overdue)
                self._replace_process([o.job_id for o in overdue], "thread")
                return  # the shutdown writes their outcomes and waits for the other jobs
            if self._stuck:  # their outcomes came as events: written by the shutdown too
                self._replace_process(self._stuck, "task of the event loop")
                return
            self._writeback.extend(self._executors.replace_dead())
            outcomes = self._writeback.buffered
            if outcomes and flush_deadline is None:
                flush_deadline = now + settings.FLUSH_INTERVAL

            try:
                if self._claimer.unsettled and self._claimer.settle(self._ids_in_hand()):
                    next_claim = now  # the jobs a lost claim answer left: claimable again
                if self._unstarted:  # dropped as their locks went unconfirmed: still ours?
                    operations.release(self._connection, self.worker_id, self._unstarted)
                    self._unstarted = []
                # 2. Write outcomes back in one statement when enough are buffered or due.
                if outcomes and (
                    len(outcomes) >= settings.FLUSH_SIZE
                    or now >= (flush_deadline or now)
                    or len(outcomes) >= len(self._claimed)  # nothing else in flight
                ):
                    unblocking = self._claimer.may_unblock(self._claimed, outcomes)
                    retry_at = self._flush()
                    flush_deadline = None
                    if retry_at is not None and not self.burst:  # burst: retries aren't waited for
                        next_claim = min(next_claim, retry_at)
                    if unblocking:
                        next_claim = min(next_claim, now)
                    if look_due is not None:  # from now: the write may have taken a while
                        look_due = min(look_due, time.monotonic() + LOOK_GRACE)

                self.housekeeping.run_due(now)
                if self._claimed:  # cancellations and progress of the jobs we have in hand
                    self._control.tick(self._connection, self.worker_id, self._heartbeat_ids(), now)
                if self._writeback.durable_due(now):  # no claim made them durable: one statement
                    self._writeback.make_durable()

                # 3. Claim when executors are about to run dry.
                if budget is not None and budget <= 0:
                    if not self._claimed and not self._writeback.buffered:
                        return
                    next_claim = float("inf")
                    continue
                if look_due is not None and now >= look_due:
                    look_due = None
                    next_claim = min(next_claim, self._claimer.idle_until())
                want, async_want = self._claim_sizes(sync_wake)
                if budget is not None:
                    want = min(want, budget)
                    async_want = min(async_want, budget - want)
                got = 0
                drained = False  # a claim came back short: nothing left this worker can take
                if want + async_want > 0 and now >= next_claim:
                    got, (sync_got, async_got) = self._claim(want, async_want)
                    if want:
                        self._capacity.claimed(want, sync_got, time.monotonic() - now)
                    if budget is not None:
                        budget -= got
                    sync_short = sync_got < want
                    async_short = async_got < async_want
                    if async_want and async_short:
                        # No more async jobs for now: left out until a wake-up about them, the
                        # poll or a sync claim of this worker's own (``_claim_sizes``).
                        self._async_idle_until = now + settings.POLL_INTERVAL
                    # Every kind asked for came back short: nothing left this worker can take.
                    nothing_left = (async_short or not async_want) and (sync_short or not want)
                    if (
                        nothing_left
                        and self.burst
                        and not self._claimed
                        and not self._writeback.buffered
                    ):
                        return
                    if want and nothing_left:
                        drained = True
                        if got:  # the look waits for their outcomes (LOOK_AFTER)
                            look_due = now + LOOK_AFTER
                            next_claim = float("inf")
                        else:
                            look_due = None
                            next_claim = self._claimer.idle_until()
                    elif want or not async_short:
                        look_due = None  # more to take: the claim comes again at once
                        next_claim = now
                    # (An async claim alone that came back short says nothing of sync jobs:
                    # the next sync room claims at once.)
                if self._wakes:
                    self._pass_on(drained, got)
                log_database_back(self.worker_id, backoff.succeeded())
                if not self._ready:  # said at once, not at the next turn (maybe seconds away)
                    self._ready = True
                    if self._pulse is not None:
                        self._pulse(time.monotonic(), True)
            except DATABASE_ERRORS as exc:
                # Connection lost, server restarting, failover, disk full...: never fatal.
                if self._connection.stop_preparing(exc):
                    continue
                self._ready = False
                if self._pulse is not None:
                    self._pulse(time.monotonic(), False)
                delay = backoff.failed()
                log_database_error(self.worker_id, exc, delay)
                self._connection_lost()
                self._drain_events(delay)
                if self._stopping:
                    return
            except Exception:
                # A bug of ours must not take the worker down with the jobs it has in hand.
                delay = backoff.failed()
                logger.exception(
                    "Worker %s: loop error; carrying on in %.1fs", self.worker_id, delay
                )
                self._drain_events(delay)
                if self._stopping:
                    return

    def _wait_time(
        self, next_claim: float, flush_deadline: float | None, look_due: float | None
    ) -> float:
        now = time.monotonic()
        housekeeping = self.housekeeping.next_wake()
        deadlines = [] if housekeeping is None else [housekeeping]
        if look_due is not None:
            deadlines.append(look_due)
        if self._executors.has_deadlines:
            deadlines.append(now + TIMEOUT_CHECK_INTERVAL)
        if flush_deadline is not None:
            deadlines.append(flush_deadline)
        if self._writeback.durable_deadline is not None:
            deadlines.append(self._writeback.durable_deadline)
        if self._claimed:
            deadlines.append(self._control.next_due(now))
        if self._claim_size() > 0:
            deadlines.append(next_claim)
        if self._metrics is not None and self._metrics.due is not None:
            deadlines.append(self._metrics.due)
        return max(0.0, min(deadlines) - now) if deadlines else settings.POLL_INTERVAL

    def _drain_events(self, timeout: float) -> None:
        """Take every queued event; block up to ``timeout`` seconds for the first (or a NOTIFY)."""
        if self._listener is not None:
            timeout = self._listener.wait(self._events, timeout)
        try:
            event = self._events.get(timeout=timeout) if timeout > 0 else self._events.get_nowait()
        except queue_module.Empty:
            return
        while True:
            if event is _STOP:
                self._stopping = True
                self._shutdown_requested.set()
            elif event is _WAKE:
                self._woken = self._woken_for_async = True
            elif isinstance(event, Wake):
                if self._rota is None or event.ticket is None:
                    self._woken = self._woken_for_async = True
                elif event.direct or self._rota.mine(event.queue, event.ticket):
                    self._woken = True
                    self._woken_for_async |= event.may_be_async
                    self._wakes.append(event)
            elif event is _SCHEDULES_CHANGED:
                if self._schedules_task is not None:
                    self._schedules_task.next_at = 0.0
            elif isinstance(event, ControlEvent):
                if event.payload in ("cancel", "reconnected"):
                    self._control.notified()
                if event.payload == "reconnected":  # listening (again): say so in its row
                    self._heartbeat_task.next_at = 0.0
                if event.payload != "cancel":
                    self._queue_settings_task.next_at = 0.0
            elif isinstance(event, Outcome):
                if event.job_id not in self._async_ids:  # the threads' pace only
                    self._capacity.record(event)
                self._writeback.add(event)
            elif isinstance(event, Stuck):
                self._stuck.extend(event.job_ids)
            elif isinstance(event, Dropped):
                job = self._claimed.pop(event.job_id, None)
                self._executors.lost.discard(event.job_id)
                if event.unconfirmed and job is not None:
                    self._unstarted.append(job)
            try:
                event = self._events.get_nowait()
            except queue_module.Empty:
                return

    def _pass_on(self, drained: bool, got: int) -> None:
        """After the claim notifications woke this worker for (``got`` jobs; none without room
        for any): pass each on, for the jobs it did not take, to the next worker of the rota,
        unless the claim came back short (it took all there was)."""
        wakes, self._wakes = self._wakes, []
        if drained or self._rota is None:
            return
        for wake in {(w.queue, w.ticket): w for w in wakes}.values():
            left = wake.jobs - got
            if left > 0 and self._rota.pass_on(self._connection, wake, left):
                logger.debug(
                    "Worker %s: passed on the wake of queue %r for %d jobs",
                    self.worker_id,
                    wake.queue,
                    left,
                )

    def _claim_size(self) -> int:
        """How many jobs to claim now (0: not yet)."""
        return sum(self._claim_sizes())

    def _claim_sizes(self, sync_wake: bool = False) -> tuple[int, int]:
        """How many sync jobs and how many async jobs to claim now (0: not yet).

        Sync jobs as the threads have room (:class:`~.capacity.Capacity`); async jobs as the
        event loop has room under ``async_concurrency``, once a real batch fits (or the loop is
        idle), so that each claim takes a batch. ``sync_wake``: the claim answers wake-ups
        about sync jobs alone."""
        async_in_hand = len(self._async_ids)
        buffered = self._writeback.buffered
        async_buffered = (
            sum(1 for o in buffered if o.job_id in self._async_ids) if async_in_hand else 0
        )
        sync = self._capacity.claim_size(
            len(self._claimed) - async_in_hand, len(buffered) - async_buffered
        )
        room = self.async_concurrency - async_in_hand
        batch = min(self.batch_size, max(1, self.async_concurrency // 2))
        if room < batch and async_in_hand != async_buffered:
            room = 0  # a real batch at a time, unless the loop is idle
        if (not sync or sync_wake) and time.monotonic() < self._async_idle_until:
            # The last look found none: a wake-up about async jobs, the poll, a timer or a sync
            # claim of its own looks again.
            room = 0
        return sync, room

    def _claim(self, limit: int, async_limit: int = 0) -> tuple[int, tuple[int, int]]:
        """Claim up to ``limit`` sync jobs and ``async_limit`` async ones (more when stale ones
        are taken back) and hand them to the threads and the event loop; returns the rows taken
        (jobs found dead count: not short of work), and the jobs of each kind (sync, async)."""
        self._taken = [0, 0]
        taken = self._claimer.claim(limit, self._take, async_limit=async_limit)
        if taken:  # its commit waited for the disk: so are the outcomes written before it
            self._writeback.confirmed()
        if self._metrics is not None:
            self._metrics.claimed(taken)
        # Rows found dead count as the kind that asked (the claim was not short of work).
        sync_got, async_got = self._taken
        dead = taken - sync_got - async_got
        return taken, (sync_got + dead, async_got) if limit else (sync_got, async_got + dead)

    def _take(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._claimed[job.id] = job
            self._taken[int(job.is_async)] += 1  # by the claim's kind: what it was asked for
        sync, asynchronous = split(jobs)  # by the function's kind: where each runs
        self._executors.confirm((job.id for job in sync), claimed=True)
        self._executors.submit(sync)
        if asynchronous:
            self._async_ids.update(job.id for job in asynchronous)
            self._async.submit(asynchronous)
        self.stats.claimed += len(jobs)

    def _heartbeat(self) -> None:
        """Refresh our locks, notice jobs we no longer own, and report ourselves."""
        owned_ids = self._heartbeat_ids()
        if owned_ids:
            still, asked_to_stop = operations.heartbeat(
                self._connection, self.worker_id, [self._claimed[i] for i in owned_ids]
            )
            self._control.cancel(asked_to_stop)
            self._executors.confirm(still)
            for job_id in set(owned_ids) - still:
                logger.warning(
                    "Worker %s: job #%d is no longer ours: its lock expired", self.worker_id, job_id
                )
                self._executors.lost.add(job_id)
        before = operations.report_worker(
            self._connection,
            self.worker_id,
            self.queues,
            self.threads,
            self.stats.finished,
            sorted({*self._executors.abandoned_alive(), *self._async.abandoned_alive()}),
            listening=self._listening(),
            listener=None if self._listener is None else self._listener.source.listener,
        )
        self._claimer.reported(before)

    def _ids_in_hand(self) -> list[int]:
        """The jobs this worker knows it has in hand: claimed, or finished with an outcome to write
        or not yet known to be on disk (a crash may have put its job back to running)."""
        return [*self._claimed, *self._writeback.job_ids()]

    def _heartbeat_ids(self) -> list[int]:
        # Hung jobs already have their outcome buffered; lost ones belong to another worker.
        return [
            job_id
            for job_id, job in self._claimed.items()
            if job_id not in self._executors.lost and not self._executors.abandoned(job)
        ]

    # ----- writing outcomes back -------------------------------------------------------------

    def _flush(self) -> float | None:
        """Write the buffered outcomes; returns when (monotonic) the earliest retry is due."""
        flushed = self._writeback.flush()
        if self._metrics is not None:
            claimed = self._claimed
            self._metrics.finished(
                (claimed[o.job_id], o) for o in flushed.counted if o.job_id in claimed
            )
        for outcome in flushed.outcomes:
            self._claimed.pop(outcome.job_id, None)
            self._async_ids.discard(outcome.job_id)
        return flushed.retry_at

    def _connection_lost(self) -> None:
        """The queue connection failed: outcomes not known to be on disk are written again, a
        claim may have committed unseen (settled on the next connection), and the next
        statement reconnects."""
        self._writeback.connection_lost()
        self._claimer.unsettled = True
        self._connection.close()

    # ----- the end ---------------------------------------------------------------------------

    def _replace_process(self, abandoned: Sequence[int], where: str) -> None:
        """Jobs ran past their timeout (or cancel timeout) and their threads (or their async
        tasks, cancelled in vain) were abandoned, still running code no one can stop from
        outside. This process stops claiming, writes the outcomes, finishes its other jobs (as
        a shutdown does, within the shutdown timeout) and exits with :data:`REPLACE_ME`: the
        stuck code stops with it, and the supervisor starts a fresh process."""
        logger.warning(
            "Worker %s: job %s still running in an abandoned %s: this process stops "
            "claiming, finishes its other jobs and is replaced",
            self.worker_id,
            ", ".join(f"#{job_id}" for job_id in abandoned),
            where,
        )
        self._replace = True

    def _interrupt_running(self) -> None:
        """The shutdown timeout ran out: hand the jobs still running back, interrupted (their
        attempt not spent, within ``PGQUEUE_MAX_INTERRUPTIONS``). Their threads stop with this
        process, which exits next; an outcome they report meanwhile is never written."""
        running = list(self._claimed.values())
        statuses = operations.interrupt(
            self._connection,
            self.worker_id,
            running,
            f"Handed back: worker {self.worker_id} shut down while the job ran, "
            f"{self.shutdown_timeout:g}s shutdown timeout",
        )
        if self._metrics is not None:
            self._metrics.interrupted(self._claimed[job_id] for job_id in statuses)
        # Async jobs' tasks are cancelled now (their finally blocks run); what they report is
        # dropped: they were handed back.
        self._async.abandon()
        self._claimed.clear()
        self._async_ids.clear()
        self.stats.interrupted += len(statuses)
        logger.warning(
            "Worker %s: shutdown timeout (%gs) with %d jobs still running: handed back as "
            "interrupted (%s); their code stops with this process",
            self.worker_id,
            self.shutdown_timeout,
            len(running),
            ", ".join(f"#{job_id} {status}" for job_id, status in sorted(statuses.items()))
            or "none was still ours",
        )

    def _shutdown(self) -> None:
        """Once the loop has returned: hand back unstarted jobs, wait up to the shutdown
        timeout for running ones (heartbeating them), write every outcome and make it durable,
        and mark the worker stopped."""
        unstarted = self._executors.take_unstarted()
        deadline = time.monotonic() + self.shutdown_timeout
        next_heartbeat = time.monotonic() + settings.HEARTBEAT_INTERVAL
        backoff = Backoff()
        released = False
        while True:
            if self._pulse is not None:
                self._pulse(time.monotonic(), False)
            try:
                if self._claimer.unsettled:  # the loop lost its connection: see Claimer.settle
                    self._claimer.settle(self._ids_in_hand())
                # The jobs still running are served as in the loop: a job past its timeout
                # is failed now (its thread abandoned, stopping with this process), not handed
                # back as interrupted when the shutdown timeout ends, to run and hang again;
                # a cancel request reaches its job, and reported progress is written.
                if self._executors.has_deadlines:
                    self._writeback.extend(self._executors.fail_overdue())
                if self._claimed:
                    self._control.tick(
                        self._connection, self.worker_id, self._heartbeat_ids(), time.monotonic()
                    )
                if unstarted and not released:
                    handed = operations.release(self._connection, self.worker_id, unstarted)
                    released = True
                    self.stats.released += len(handed)
                    for job in unstarted:
                        self._claimed.pop(job.id, None)
                    if handed:
                        logger.info(
                            "Handed %d unstarted jobs back to the queue (worker %s)",
                            len(handed),
                            self.worker_id,
                        )
                if self._writeback.buffered:
                    self._flush()
                if not self._claimed:
                    self._writeback.make_durable()
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._interrupt_running()
                    break
                now = time.monotonic()
                wait = min(deadline, next_heartbeat, self._control.next_due(now)) - now
                if self._executors.has_deadlines:
                    wait = min(wait, TIMEOUT_CHECK_INTERVAL)
                self._drain_events(max(wait, 0))
                now = time.monotonic()
                if self._claimed and now < deadline and now >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = now + settings.HEARTBEAT_INTERVAL
            except DATABASE_ERRORS as exc:
                logger.warning(
                    "Worker %s: queue database error during shutdown (%s)", self.worker_id, exc
                )
                self._connection_lost()
                if time.monotonic() >= deadline:
                    break
                time.sleep(backoff.failed())
        try:
            self._writeback.make_durable()  # after a timeout; else done above
            operations.stop_worker(self._connection, self.worker_id, self.stats.finished)
        except DATABASE_ERRORS:
            logger.warning("Could not mark worker %s stopped", self.worker_id)
