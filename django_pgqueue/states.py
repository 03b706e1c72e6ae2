"""Job states, their named sets and priority bounds (importable before the app registry).

Every module, the SQL included, names states through this module: ``JobStatus.RUNNING`` in
Python, ``sql_list(ACTIVE)`` inside a statement. See ``docs/lifecycle.md`` for the transitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from django.db import models

PRIORITY_MIN = -100
PRIORITY_MAX = 100


class JobStatus(models.TextChoices):
    """A job's state."""

    PENDING = "pending", "Pending"
    #: Waits for the jobs it was enqueued after (``using(after=...)``, ``chain``): never
    #: runnable, no ready row; its last parent's completion makes it pending (docs/workflows.md).
    WAITING = "waiting", "Waiting"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


class Attempt(StrEnum):
    """How one attempt ended (``job_finished``'s ``outcome``, the worker's logs)."""

    COMPLETED = "completed"
    RETRIED = "retried"
    DEAD = "dead"
    #: Asked to stop while it ran (``Job.cancel()``): the job ends cancelled, never retried.
    CANCELLED = "cancelled"
    #: Handed back because its worker shut down (``JobInterrupted``, the shutdown timeout): the
    #: job is pending again, its attempt not counted (up to ``PGQUEUE_MAX_INTERRUPTIONS``).
    INTERRUPTED = "interrupted"


class Event(StrEnum):
    """What the dashboard counts per minute (and the job list filters by)."""

    COMPLETED = "completed"
    #: An attempt failed (the job was retried or is dead).
    FAILED = "failed"
    #: The row saying how many finished jobs the last hour's statement read.
    SCANNED = "scanned"


class WorkerState(StrEnum):
    """A worker as the dashboard shows it."""

    RUNNING = "running"
    STOPPED = "stopped"
    #: No heartbeat for longer than the visibility timeout.
    LOST = "lost"


class QueueState(StrEnum):
    """A queue as ``pgqueue_queue list`` shows it."""

    RUNNING = "running"
    PAUSED = "paused"


#: Jobs whose unique key is still in use: waiting for their parents, for a worker, or being run.
ACTIVE: tuple[str, ...] = (
    JobStatus.PENDING.value,
    JobStatus.RUNNING.value,
    JobStatus.WAITING.value,
)
#: Jobs that ended badly: a dependent of one is cancelled, a batch with one fails.
FAILED: tuple[str, ...] = (JobStatus.DEAD.value, JobStatus.CANCELLED.value)
#: Jobs that ended; they carry ``finished_at`` and are pruned after their retention.
FINISHED: tuple[str, ...] = (
    JobStatus.COMPLETED.value,
    JobStatus.DEAD.value,
    JobStatus.CANCELLED.value,
)
#: Finished jobs pruned after ``PGQUEUE_RETENTION`` (dead ones have their own retention).
PRUNED_AFTER_RETENTION: tuple[str, ...] = (JobStatus.COMPLETED.value, JobStatus.CANCELLED.value)
#: Finished jobs a manual retry applies to (pending jobs that failed at least once, too).
RETRYABLE: tuple[str, ...] = (JobStatus.DEAD.value, JobStatus.CANCELLED.value)
#: Finished jobs an attempt of which the worker may have abandoned (cancel timeout, job
#: timeout) while its thread still runs: the admin and ``pgqueue_status`` say so.
ABANDONABLE: tuple[str, ...] = (JobStatus.CANCELLED.value, JobStatus.DEAD.value)


def is_retryable(status: str, attempts: int) -> bool:
    """Whether a manual retry applies: a finished job that did not complete, or a pending job
    that failed at least once (``operations.RETRYABLE_Q`` is the same rule as a filter)."""
    return status in RETRYABLE or (status == JobStatus.PENDING and attempts > 0)


def sql_list(statuses: Iterable[str]) -> str:
    """``'a', 'b'`` for ``status IN (...)`` in a SQL constant (the values are our own names)."""
    return ", ".join(f"'{JobStatus(s).value}'" for s in statuses)
