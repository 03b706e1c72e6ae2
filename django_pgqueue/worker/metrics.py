"""A worker process's Prometheus metrics (``run_jobs --probe-port``; docs/monitoring.md).

Only a worker process whose ``run_jobs`` serves a probe port imports this module (and with it
``prometheus_client``, the ``metrics`` extra); without the port nothing here runs or is
imported. The process writes its figures through ``prometheus_client``'s multiprocess mode
into the directory its supervisor made (``PROMETHEUS_MULTIPROC_DIR``); the supervisor's probe
process adds up every process's files when ``/metrics`` is scraped, so a restarted process's
counters carry on from its predecessors'.

The metric names and labels are a contract: docs/monitoring.md lists them. Label values stay
bounded: a queue name, a registered job name (anything else is ``unregistered``) and an
:class:`~django_pgqueue.states.Attempt` value; never an id or an argument.

Cost: a value written to a multiprocess file costs 1.5 µs (a lock, a pid check, an mmap write),
and ``Histogram.observe`` writes two. So the loop only tallies in memory (a job: a few dict
updates), and :meth:`WorkerMetrics.write` writes the tallies at most once per
:data:`WRITE_INTERVAL`: one increment per counter child and per histogram bucket touched since
(docs/performance.md, "Metrics"). A process killed outright loses at most that interval's
tallies.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, values
from prometheus_client.utils import floatToGoString

from django_pgqueue import registry
from django_pgqueue.operations import Outcome
from django_pgqueue.states import Attempt
from django_pgqueue.worker.counts import attempt_of

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: A job's run: from a few milliseconds to an hour.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: From when a job was due to when it started.
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: The label of a job whose name this process has not registered.
UNREGISTERED = "unregistered"
#: Seconds between writes of the tallies to the metric files (a scrape sees them this late).
WRITE_INTERVAL = 1.0


class WorkerMetrics:
    """The metrics of one worker process, tallied by its loop and written now and then."""

    def __init__(self, threads: int, async_slots: int = 0) -> None:
        # The supervisor set PROMETHEUS_MULTIPROC_DIR before forking this process; values
        # must go to files there even if the project imported prometheus_client before it.
        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        # registry=None: nothing in this process serves them (the probe process reads files).
        self._finished = Counter(
            "pgqueue_jobs_finished",
            "Attempts that ended, by queue, job and outcome.",
            ["queue", "job", "outcome"],
            registry=None,
        )
        self._duration = BatchedHistogram(
            "pgqueue_job_duration_seconds",
            "How long jobs ran (one observation per attempt that ended).",
            ("queue", "job"),
            DURATION_BUCKETS,
        )
        self._pickup = BatchedHistogram(
            "pgqueue_job_pickup_delay_seconds",
            "From when a job was due (run_after) to when it started.",
            ("queue",),
            PICKUP_BUCKETS,
        )
        self._busy = Gauge(
            "pgqueue_worker_busy", "Jobs running now.", registry=None, multiprocess_mode="livesum"
        )
        capacity = Gauge(
            "pgqueue_worker_capacity",
            "Jobs the worker processes can run at once (their threads).",
            registry=None,
            multiprocess_mode="livesum",
        )
        capacity.set(threads)
        # async def jobs (docs/async.md) apart: a thousand slots of the event loop beside two
        # threads would make the threads' busy / capacity meaningless.
        self._async_busy = Gauge(
            "pgqueue_worker_async_busy",
            "async def jobs running now, on the worker processes' event loops.",
            registry=None,
            multiprocess_mode="livesum",
        )
        async_capacity = Gauge(
            "pgqueue_worker_async_capacity",
            "async def jobs the worker processes can run at once (--async-concurrency).",
            registry=None,
            multiprocess_mode="livesum",
        )
        async_capacity.set(async_slots)
        self._async_busy.set(0)
        self._async_now = self._async_written = 0
        claims = Counter(
            "pgqueue_claims",
            "Claim statements, by whether they took jobs.",
            ["result"],
            registry=None,
        )
        self._claims_jobs = claims.labels("jobs")
        self._claims_empty = claims.labels("empty")
        self._busy.set(0)
        self._busy_now = self._busy_written = 0
        self._claims = [0, 0]  # took jobs, found none: not written yet
        self._counts: dict[tuple[str, str, str], int] = {}  # not written yet
        self._finished_children: dict[tuple[str, str, str], Counter] = {}
        self._names: dict[str, str] = {}
        #: When (monotonic) the tallies are written next; None: nothing to write.
        self.due: float | None = None
        self._next_write = 0.0

    # ----- what the loop tells -----------------------------------------------------------------

    def turn(self, now: float, running: int, async_running: int = 0) -> None:
        """A turn of the loop: ``running`` jobs run now on its threads and ``async_running`` on
        its event loop; writes the tallies when due."""
        if running != self._busy_now or async_running != self._async_now:
            self._busy_now = running
            self._async_now = async_running
            self._pending(now)
        if self.due is not None and now >= self.due:
            self.write(now)

    def claimed(self, taken: int) -> None:
        self._claims[0 if taken else 1] += 1
        self._pending(time.monotonic())

    def finished(self, done: Iterable[tuple[Job, Outcome]]) -> None:
        """Attempts whose outcome a flush wrote: counted, their run and pickup observed."""
        counts = self._counts
        duration, pickup = self._duration, self._pickup
        for job, outcome in done:
            queue, name = job.queue, self._label(job.name)
            key = (queue, name, attempt_of(outcome).value)
            counts[key] = counts.get(key, 0) + 1
            if outcome.finished_at is not None:
                duration.observe(
                    (queue, name), (outcome.finished_at - outcome.started_at).total_seconds()
                )
            pickup.observe((queue,), (outcome.started_at - job.run_after).total_seconds())
        self._pending(time.monotonic())

    def interrupted(self, jobs: Iterable[Job]) -> None:
        """Jobs the shutdown timeout handed back while they ran (their run is not observed)."""
        for job in jobs:
            key = (job.queue, self._label(job.name), Attempt.INTERRUPTED.value)
            self._counts[key] = self._counts.get(key, 0) + 1
        self._pending(time.monotonic())

    # ----- writing -----------------------------------------------------------------------------

    def write(self, now: float | None = None) -> None:
        """Write the tallies to the metric files (the loop calls it when :attr:`due`, and once
        at the end).

        The jobs' histograms first, their finished counts last: a scrape between the two (each
        value is its own write to the files) that counts a job finished already has its
        duration and pickup delay, never the other way round."""
        self._duration.write()
        self._pickup.write()
        for key, n in self._counts.items():
            child = self._finished_children.get(key)
            if child is None:
                child = self._finished_children[key] = self._finished.labels(*key)
            child.inc(n)
        self._counts.clear()
        jobs, empty = self._claims
        if jobs:
            self._claims_jobs.inc(jobs)
        if empty:
            self._claims_empty.inc(empty)
        self._claims = [0, 0]
        if self._busy_now != self._busy_written:
            self._busy.set(self._busy_now)
            self._busy_written = self._busy_now
        if self._async_now != self._async_written:
            self._async_busy.set(self._async_now)
            self._async_written = self._async_now
        self.due = None
        self._next_write = (time.monotonic() if now is None else now) + WRITE_INTERVAL

    def _pending(self, now: float) -> None:
        if self.due is None:
            self.due = max(now, self._next_write)

    def _label(self, name: str) -> str:
        label = self._names.get(name)
        if label is None:
            if name not in registry.names():
                return UNREGISTERED  # not cached: the names in the table are not bounded
            label = self._names[name] = name
        return label


class BatchedHistogram:
    """A labelled histogram whose observations are tallied in memory, then written with one
    increment per bucket touched and one of the sum (``Histogram.observe`` writes two values
    per observation). Its values are those ``prometheus_client.Histogram`` writes in
    multiprocess mode (``_bucket`` values labelled ``le``, non-cumulative, and ``_sum``), which
    the multiprocess collector adds up and serves as a histogram with its ``_count``."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = [float(b) for b in buckets] + [math.inf]
        self._le = [floatToGoString(b) for b in self._bounds]  # type: ignore[no-untyped-call]
        #: Label values -> [sum, count per bucket...] observed since the last write.
        self._tallies: dict[tuple[str, ...], list[float]] = {}
        #: Label values -> the sum's value, then each bucket's.
        self._values: dict[tuple[str, ...], tuple[Any, list[Any]]] = {}

    def observe(self, labels: tuple[str, ...], amount: float) -> None:
        tally = self._tallies.get(labels)
        if tally is None:
            tally = self._tallies[labels] = [0.0] * (len(self._bounds) + 1)
        amount = max(0.0, amount)
        tally[0] += amount
        tally[1 + bisect_left(self._bounds, amount)] += 1

    def write(self) -> None:
        for labels, tally in self._tallies.items():
            total, buckets = self._values_of(labels)
            total.inc(tally[0])
            for bucket, n in zip(buckets, tally[1:], strict=True):
                if n:
                    bucket.inc(n)
        self._tallies.clear()

    def _values_of(self, labels: tuple[str, ...]) -> tuple[Any, list[Any]]:
        found = self._values.get(labels)
        if found is None:
            value = values.ValueClass
            total = value(
                "histogram",
                self._name,
                self._name + "_sum",
                self._labelnames,
                labels,
                self._documentation,
            )
            buckets = [
                value(
                    "histogram",
                    self._name,
                    self._name + "_bucket",
                    (*self._labelnames, "le"),
                    (*labels, le),
                    self._documentation,
                )
                for le in self._le
            ]
            found = self._values[labels] = (total, buckets)
        return found
