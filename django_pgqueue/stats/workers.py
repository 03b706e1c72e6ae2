"""The workers seen lately, from the ``pgqueue_worker`` table each worker updates on heartbeat."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_pgqueue.conf import settings
from django_pgqueue.states import ABANDONABLE, WorkerState

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
    #: Jobs whose abandoned attempt's thread still runs in this worker, as it last reported.
    abandoned: list[int]
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
                abandoned=[i for i in (w.abandoned or []) if isinstance(i, int)],
                state=state,
            )
        )
    workers.sort(key=lambda w: (w.state != WorkerState.RUNNING, w.worker_id))
    return workers


def still_running(db: str | None, job_ids: Iterable[int], now: datetime) -> dict[int, str]:
    """Of ``job_ids``, those a live worker (not stopped, seen within the visibility timeout)
    reports as still running an attempt it abandoned (cancel timeout, job timeout): the worker's
    id by job id. The worker stops reporting a job when its thread returns."""
    from django_pgqueue.models import Worker

    wanted = set(job_ids)
    if not wanted:
        return {}
    lost_after = timedelta(seconds=settings.VISIBILITY_TIMEOUT)
    rows = (
        Worker.objects.using(db)
        .filter(stopped_at__isnull=True, last_seen_at__gte=now - lost_after)
        .exclude(abandoned=[])
        .order_by("worker_id")
        .values_list("worker_id", "abandoned")
    )
    found: dict[int, str] = {}
    for worker_id, abandoned in rows:
        for job_id in abandoned if isinstance(abandoned, list) else []:
            if isinstance(job_id, int) and job_id in wanted:
                found.setdefault(job_id, worker_id)
    return found


def still_running_label(label: str, worker_id: str) -> str:
    """``cancelled — still running in worker X, abandoned``: a finished job's status while its
    abandoned attempt's thread still runs."""
    return f"{label} — still running in worker {worker_id}, abandoned"


@dataclass(frozen=True)
class AbandonedJob:
    """A finished job whose abandoned attempt still runs in a live worker's thread."""

    job_id: int
    name: str
    status: str
    worker_id: str

    @property
    def label(self) -> str:
        return still_running_label(self.status, self.worker_id)


def abandoned_jobs(db: str | None, workers: Iterable[WorkerInfo]) -> list[AbandonedJob]:
    """The finished jobs (``ABANDONABLE``) the running ones of ``workers`` report as still running
    an abandoned attempt, by id."""
    from django_pgqueue.models import Job

    by_job: dict[int, str] = {}
    for worker in workers:
        if worker.state == WorkerState.RUNNING:
            for job_id in worker.abandoned:
                by_job.setdefault(job_id, worker.worker_id)
    if not by_job:
        return []
    rows = (
        Job.objects.using(db)
        .filter(pk__in=list(by_job), status__in=ABANDONABLE)
        .order_by("pk")
        .values_list("pk", "name", "status")
    )
    return [AbandonedJob(pk, name, status, by_job[pk]) for pk, name, status in rows]
