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

Cost: the loop calls these once per flush, claim and turn; label children are cached, the
counter is incremented once per (queue, job, outcome) in a flush, and each job costs two
histogram observations (about 2 µs each on an mmap'ed file).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, values

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


class WorkerMetrics:
    """The metrics of one worker process, written to its supervisor's multiprocess directory."""

    def __init__(self, threads: int) -> None:
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
        self._duration = Histogram(
            "pgqueue_job_duration_seconds",
            "How long jobs ran (one observation per attempt that ended).",
            ["queue", "job"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self._pickup = Histogram(
            "pgqueue_job_pickup_delay_seconds",
            "From when a job was due (run_after) to when it started.",
            ["queue"],
            buckets=PICKUP_BUCKETS,
            registry=None,
        )
        self._busy = Gauge(
            "pgqueue_worker_busy",
            "Jobs running now.",
            registry=None,
            multiprocess_mode="livesum",
        )
        capacity = Gauge(
            "pgqueue_worker_capacity",
            "Jobs the worker processes can run at once (their threads).",
            registry=None,
            multiprocess_mode="livesum",
        )
        capacity.set(threads)
        claims = Counter(
            "pgqueue_claims",
            "Claim statements, by whether they took jobs.",
            ["result"],
            registry=None,
        )
        self._claims_jobs = claims.labels("jobs")
        self._claims_empty = claims.labels("empty")
        self._busy_now = 0
        self._busy.set(0)
        self._finished_children: dict[tuple[str, str, str], Counter] = {}
        self._duration_children: dict[tuple[str, str], Histogram] = {}
        self._pickup_children: dict[str, Histogram] = {}
        self._names: dict[str, str] = {}

    def claimed(self, taken: int) -> None:
        (self._claims_jobs if taken else self._claims_empty).inc()

    def busy(self, running: int) -> None:
        """Jobs running now (called each turn of the loop; writes only a change)."""
        if running != self._busy_now:
            self._busy_now = running
            self._busy.set(running)

    def finished(self, done: Iterable[tuple[Job, Outcome]]) -> None:
        """Attempts whose outcome a flush wrote: counted, their run and pickup observed."""
        counts: dict[tuple[str, str, str], int] = {}
        for job, outcome in done:
            queue, name = job.queue, self._label(job.name)
            key = (queue, name, attempt_of(outcome).value)
            counts[key] = counts.get(key, 0) + 1
            if outcome.finished_at is not None:
                duration = self._duration_children.get((queue, name))
                if duration is None:
                    duration = self._duration.labels(queue, name)
                    self._duration_children[(queue, name)] = duration
                duration.observe(
                    max(0.0, (outcome.finished_at - outcome.started_at).total_seconds())
                )
            pickup = self._pickup_children.get(queue)
            if pickup is None:
                pickup = self._pickup_children[queue] = self._pickup.labels(queue)
            pickup.observe(max(0.0, (outcome.started_at - job.run_after).total_seconds()))
        self._count(counts)

    def interrupted(self, jobs: Iterable[Job]) -> None:
        """Jobs the shutdown timeout handed back while they ran (their run is not observed)."""
        counts: dict[tuple[str, str, str], int] = {}
        for job in jobs:
            key = (job.queue, self._label(job.name), Attempt.INTERRUPTED.value)
            counts[key] = counts.get(key, 0) + 1
        self._count(counts)

    def _count(self, counts: dict[tuple[str, str, str], int]) -> None:
        for key, n in counts.items():
            child = self._finished_children.get(key)
            if child is None:
                child = self._finished_children[key] = self._finished.labels(*key)
            child.inc(n)

    def _label(self, name: str) -> str:
        label = self._names.get(name)
        if label is None:
            if name not in registry.names():
                return UNREGISTERED  # not cached: the names in the table are not bounded
            label = self._names[name] = name
        return label
