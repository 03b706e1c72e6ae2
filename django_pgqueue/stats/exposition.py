"""The queues' numbers as Prometheus metrics: what ``GET /pgqueue/metrics`` serves
(:mod:`django_pgqueue.views`; names and labels documented in docs/monitoring.md).

Read from the database by :func:`~django_pgqueue.stats.queue_snapshot`, the dashboard's own
bounded statements, so they stay the same whichever worker restarts and cost the same on a
table of any size. Needs ``prometheus_client`` (the ``metrics`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from django_pgqueue.states import JobStatus, WorkerState
from django_pgqueue.stats.report import QueueSnapshot

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

#: ``pgqueue_queue_jobs``' ``status`` label: the count of the snapshot each value reads.
STATUSES = {
    "runnable": "runnable",
    "scheduled": "scheduled",
    JobStatus.RUNNING.value: JobStatus.RUNNING.value,
    JobStatus.DEAD.value: JobStatus.DEAD.value,
    JobStatus.WAITING.value: JobStatus.WAITING.value,
}


def metrics_text(snapshot: QueueSnapshot) -> tuple[bytes, str]:
    """The snapshot in Prometheus' text format, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    class Collector:
        def collect(self) -> Iterator[Metric]:
            return families(snapshot)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


def families(snapshot: QueueSnapshot) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    jobs = GaugeMetricFamily(
        "pgqueue_queue_jobs",
        "Jobs per queue and status (running: in a worker's hand, its lock fresh; on a big "
        "table exact up to 10,000 per queue and status, then the planner's estimate).",
        labels=["queue", "status"],
    )
    oldest = GaugeMetricFamily(
        "pgqueue_queue_oldest_runnable_age_seconds",
        "How long the oldest runnable job of the queue has waited since it was due (0: none).",
        labels=["queue"],
    )
    for stats in snapshot.queues:
        for status, attribute in STATUSES.items():
            jobs.add_metric([stats.queue, status], getattr(stats, attribute).value)
        age = stats.oldest_runnable_age
        oldest.add_metric([stats.queue], 0.0 if age is None else age.total_seconds())
    yield jobs
    yield oldest
    yield GaugeMetricFamily(
        "pgqueue_workers_alive",
        "Worker processes that heartbeat within the visibility timeout.",
        value=sum(1 for w in snapshot.workers if w.state == WorkerState.RUNNING),
    )
    yield GaugeMetricFamily(
        "pgqueue_queue_counts_exact",
        "1 when every pgqueue_queue_jobs value is exact (a small table), else 0.",
        value=1.0 if snapshot.exact else 0.0,
    )
