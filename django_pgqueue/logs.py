"""The job's context on log records: ``job_id``, ``job_name``, ``queue``, ``attempt`` and
``worker_id`` as attributes, which any structured formatter (python-json-logger, structlog's
``ProcessorFormatter``) writes as fields (docs/tracing.md, "Logs").

* The worker's own lines about a job pass them as ``extra`` (:func:`job_fields`).
* :class:`JobContext`, a ``logging.Filter`` on a handler, adds them to every record that handler
  takes while a job runs in the thread that logs it: the user's own loggers inside the job
  included, and under OpenTelemetry the current span's ``trace_id`` and ``span_id`` (the run's,
  or one the job made). A record that has one of them already (its own ``extra``) keeps it. The
  worker puts the filter on the handlers logging is configured with when it starts
  (:func:`install`); a handler made later needs it named in ``LOGGING``.

A filter on the handler, not a log record factory: a factory's attributes would make a job's
own ``logger.info(..., extra={"queue": ...})`` raise ``KeyError`` (``extra`` may not overwrite
an attribute); a handler's filter runs after ``extra`` and fills in only what is missing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django_pgqueue import tracing
from django_pgqueue.context import bound

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: The attributes, in the order the docs list them.
FIELDS = ("job_id", "job_name", "queue", "attempt", "worker_id")


def job_fields(job: Job, worker_id: str | None) -> dict[str, Any]:
    """The ``extra`` of a worker's line about ``job``."""
    return {
        "job_id": job.id,
        "job_name": job.name,
        "queue": job.queue,
        "attempt": job.attempts,
        "worker_id": worker_id,
    }


class JobContext(logging.Filter):
    """Adds the running job's fields to the records of the thread that runs it (never drops a
    record). Outside a job (or a job function called directly), records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        job = bound()
        if job is None or job.id is None:
            return True
        fields = record.__dict__
        for key, value in (
            ("job_id", job.id),
            ("job_name", job.name),
            ("queue", job.queue),
            ("attempt", job.attempt),
            ("worker_id", job.worker_id),
        ):
            if key not in fields:
                fields[key] = value
        if tracing.active():
            ids = tracing.current_ids()
            if ids is not None:
                fields.setdefault("trace_id", ids[0])
                fields.setdefault("span_id", ids[1])
        return True


def install() -> None:
    """Put a :class:`JobContext` on every handler of the root logger and of every logger that
    has handlers, unless it has one already (the worker, at start; idempotent)."""
    loggers: list[logging.Logger] = [logging.root]
    for candidate in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(candidate, logging.Logger) and candidate.handlers:
            loggers.append(candidate)
    for each in loggers:
        for handler in each.handlers:
            if not any(isinstance(f, JobContext) for f in handler.filters):
                handler.addFilter(JobContext())
