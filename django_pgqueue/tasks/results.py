"""A job row, as Django's ``TaskResult``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError

from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: Our status -> Django's.
STATUS_MAP: dict[str, TaskResultStatus] = {
    JobStatus.PENDING: TaskResultStatus.READY,
    # Django has no word for a task waiting for others (workflows are not in its API).
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


def result_from_job[**P, R](job: Job, task: Task[P, R], alias: str) -> TaskResult[P, R]:
    """The ``TaskResult`` of ``job``, a row of ``task``, for the backend ``alias``."""
    result: TaskResult[P, R] = TaskResult(
        task=task,
        id=str(job.pk),
        status=STATUS_MAP[job.status],
        enqueued_at=job.created_at,
        # The table keeps the start of the latest attempt only.
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=[
            TaskError(
                exception_class_path=str(entry.get("exception_class", "")),
                traceback=str(entry.get("traceback", "")),
            )
            for entry in job.errors or []
        ],
        worker_ids=worker_ids(job),
    )
    if job.status == JobStatus.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def worker_ids(job: Job) -> list[str]:
    """One worker id per attempt of the current run (a manual retry starts a new run).

    Every failed attempt left an entry in ``errors`` (a lost worker's too, added when its job
    is reclaimed); a running or completed job's latest attempt is ``locked_by``'s.
    """
    finished_attempt = job.status in (JobStatus.RUNNING, JobStatus.COMPLETED)
    failed = max(job.attempts - 1, 0) if finished_attempt else job.attempts
    entries = (job.errors or [])[-failed:] if failed else []
    ids = [str(entry.get("worker_id") or "") for entry in entries]
    ids = [""] * (failed - len(ids)) + ids
    if finished_attempt and job.attempts:
        ids.append(job.locked_by or "")
    return ids
