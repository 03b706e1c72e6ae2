"""django_pgqueue: a fast, crash-safe background job queue on PostgreSQL's SKIP LOCKED.

Importing this package does not import models, so ``from django_pgqueue import job`` works in
any module, at any time.
"""

from __future__ import annotations

from django_pgqueue.context import CurrentJob, current_job
from django_pgqueue.decorators import JobFunction, job
from django_pgqueue.exceptions import (
    InvalidJobArguments,
    JobInterrupted,
    PgQueueError,
    UnknownJob,
    UnknownParent,
)
from django_pgqueue.queues import limit_queue, pause_queue, resume_queue
from django_pgqueue.spec import JobSpec
from django_pgqueue.states import JobStatus
from django_pgqueue.workflows import Signature, batch, chain

__version__ = "0.2.0.dev0"

__all__ = [
    "CurrentJob",
    "InvalidJobArguments",
    "JobFunction",
    "JobInterrupted",
    "JobSpec",
    "JobStatus",
    "PgQueueError",
    "Signature",
    "UnknownJob",
    "UnknownParent",
    "__version__",
    "batch",
    "chain",
    "current_job",
    "job",
    "limit_queue",
    "pause_queue",
    "resume_queue",
]
