"""Exceptions raised by django_pgqueue."""

from __future__ import annotations


class PgQueueError(Exception):
    """Base class of every django_pgqueue error."""


class InvalidJobArguments(PgQueueError, TypeError):
    """Arguments that would not survive a JSON round trip unchanged, or don't fit the signature."""


class UnknownJob(PgQueueError, LookupError):
    """A job name that no ``@job`` (or task) in this process registered."""


class DuplicateJobName(PgQueueError, ValueError):
    """Two different functions registered under one job name."""


class WorkerLost(PgQueueError):
    """Recorded on a job whose worker stopped heartbeating (killed, frozen or cut off)."""


class JobTimeout(PgQueueError):
    """Recorded on a job that ran longer than its ``timeout``: its thread was abandoned (or, an
    ``async def`` job, its task was cancelled; abandoned if it still ran the cancel timeout
    later)."""


class ResultNotStorable(PgQueueError, TypeError):
    """A job returned a value that cannot be stored as its JSON result (the job is not retried)."""


class ExecutorDied(PgQueueError):
    """Recorded on a job whose executor thread died under it (the thread was replaced)."""


class PoisonJob(PgQueueError):
    """A job row the worker cannot run as stored (undecodable or malformed arguments)."""


class TransactionLeftOpen(PgQueueError):
    """A job returned with a database transaction still open; its writes were rolled back."""


class WorkerCrashed(PgQueueError):
    """Recorded on a job whose worker process died while running it (os._exit, a signal...)."""


class JobInterrupted(PgQueueError):
    """Raise it from a job to be handed back: typically once ``current_job().shutdown_requested``
    says the worker is shutting down. The job goes back to ``pending`` and runs again on the
    next worker without spending an attempt (``PGQUEUE_MAX_INTERRUPTIONS`` bounds how often);
    the message is kept in its history. The worker also records this on a job still running
    when its shutdown timeout ran out, or when its process was stopped under it."""


class CancelTimeout(PgQueueError):
    """A job asked to stop ran on past the cancel timeout: its thread (or its async task) was
    abandoned."""


class UnknownParent(PgQueueError, LookupError):
    """``using(after=...)`` names a job that does not exist (never, or pruned since)."""
