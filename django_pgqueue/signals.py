"""Signals for monitoring. Receivers get ``job`` (a ``Job`` instance) and ``worker_id``.

- ``job_started``: an attempt is about to run.
- ``job_finished``: an attempt ended; ``outcome`` is ``"completed"``, ``"retried"`` or
  ``"dead"``, and ``exception`` the exception of a failed attempt (else None).

A receiver that raises (anything, ``SystemExit`` included) is logged and ignored: monitoring
never breaks a job or the worker.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.signals")

job_started = Signal()
job_finished = Signal()


def send(signal: Signal, **kwargs: Any) -> None:
    if not signal.receivers:
        return
    job = kwargs["job"]
    try:
        responses = signal.send_robust(sender=type(job), **kwargs)
    except BaseException:
        # send_robust catches Exception only: a receiver that raised SystemExit or
        # KeyboardInterrupt must not turn a job's outcome into a failure (the receivers after it
        # are skipped for this job).
        logger.exception("A signal receiver raised for job %s; ignored", job.pk)
        return
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "Signal receiver %r failed for job %s", receiver, job.pk, exc_info=response
            )
