"""Job states and priority bounds (importable before the app registry is ready)."""

from __future__ import annotations

from django.db import models

PRIORITY_MIN = -100
PRIORITY_MAX = 100


class JobStatus(models.TextChoices):
    """A job's state. See ``docs/lifecycle.md`` for the transitions."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_STATUSES = (JobStatus.PENDING.value, JobStatus.RUNNING.value)
FINISHED_STATUSES = (JobStatus.COMPLETED.value, JobStatus.DEAD.value, JobStatus.CANCELLED.value)
