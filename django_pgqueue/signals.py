"""Signals for monitoring. Receivers get ``job`` (a ``Job`` instance) and ``worker_id``.

- ``job_started``: an attempt is about to run.
- ``job_finished``: an attempt ended; ``outcome`` is ``"completed"``, ``"retried"`` or
  ``"dead"``, and ``exception`` the exception of a failed attempt (else None).

A receiver that raises is logged and ignored: monitoring never breaks a job or the worker.
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
    for receiver, response in signal.send_robust(sender=type(job), **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "Signal receiver %r failed for job %s", receiver, job.pk, exc_info=response
            )
