"""The workers seen lately, from the ``pgqueue_worker`` table each worker updates on heartbeat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_pgqueue.conf import settings
from django_pgqueue.states import WorkerState

#: Workers seen within this window are listed.
WORKER_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: str
    hostname: str
    pid: int
    queues: list[str]
    threads: int
    started_at: datetime
    last_seen_at: datetime
    jobs_done: int
    stopped_at: datetime | None
    #: ``running``, ``stopped`` or ``lost`` (no heartbeat for longer than the visibility timeout).
    state: str

    def serves(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


def recent_workers(db: str, now: datetime) -> list[WorkerInfo]:
    """The workers seen within ``WORKER_WINDOW`` of ``now``: running ones first, then by id."""
    from django_pgqueue.models import Worker

    lost_after = timedelta(seconds=settings.VISIBILITY_TIMEOUT)
    workers = []
    for w in Worker.objects.using(db).filter(last_seen_at__gte=now - WORKER_WINDOW):
        if w.stopped_at is not None:
            state = WorkerState.STOPPED
        elif now - w.last_seen_at > lost_after:
            state = WorkerState.LOST
        else:
            state = WorkerState.RUNNING
        workers.append(
            WorkerInfo(
                worker_id=w.worker_id,
                hostname=w.hostname,
                pid=w.pid,
                queues=[str(q) for q in (w.queues or [])],
                threads=w.threads,
                started_at=w.started_at,
                last_seen_at=w.last_seen_at,
                jobs_done=w.jobs_done,
                stopped_at=w.stopped_at,
                state=state,
            )
        )
    workers.sort(key=lambda w: (w.state != WorkerState.RUNNING, w.worker_id))
    return workers
