"""Pausing and resuming queues at runtime, for every worker at once (docs/control.md).

``pause_queue("emails")``: within a second no worker anywhere starts a job of ``emails``;
running jobs finish, enqueueing keeps working, the jobs wait. ``resume_queue("emails")`` lets
them run again. The queue's row in ``pgqueue_queue`` holds the setting (no row: running).
"""

from __future__ import annotations

from django_pgqueue import rules
from django_pgqueue.conf import settings


def _checked(name: str) -> str:
    rules.check({"queue": rules.Text(rules.QUEUE_NAME_MAX)}, "queue", name)
    return name


def pause_queue(name: str) -> None:
    """Stop every worker from starting jobs of the queue ``name`` (running ones finish).

    Takes effect when the caller's transaction commits (at once outside one).
    """
    from django_pgqueue import operations

    operations.set_paused(operations.DjangoDatabase(settings.DATABASE), _checked(name), True)


def resume_queue(name: str) -> None:
    """Let workers start jobs of the queue ``name`` again."""
    from django_pgqueue import operations

    operations.set_paused(operations.DjangoDatabase(settings.DATABASE), _checked(name), False)


def limit_queue(
    name: str, *, concurrency_limit: int | None = None, rate_limit: str | None = None
) -> None:
    """Set the queue's limits across every worker; ``None`` removes that limit.

    ``concurrency_limit``: most of its jobs running at once. ``rate_limit``: most job starts per
    period, ``"10/s"`` (or ``m``, ``h``, ``d``; ``"5/2s"``). Raises before writing anything if
    one is out of range.
    """
    from django_pgqueue import operations

    rules.check(rules.JOB_OPTIONS, "concurrency_limit", concurrency_limit)
    rules.check(rules.JOB_OPTIONS, "rate_limit", rate_limit)
    operations.set_limits(
        operations.DjangoDatabase(settings.DATABASE), _checked(name), concurrency_limit, rate_limit
    )
