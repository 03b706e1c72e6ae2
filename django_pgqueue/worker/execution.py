"""Running one attempt of a claimed job and deciding what becomes of it."""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections
from django.utils import timezone

from django_pgqueue import registry, signals, sql

if TYPE_CHECKING:
    from django_pgqueue.models import Job

logger = logging.getLogger("django_pgqueue.worker")


@dataclass(slots=True)
class Outcome:
    """The end of one attempt, as the worker writes it back (implements ``sql.Finish``)."""

    job_id: int
    status: str  # completed | pending (retry later) | dead
    started_at: datetime
    finished_at: datetime | None
    run_after: datetime | None = None
    result_json: str | None = None
    error: str | None = None
    error_entry_json: str | None = None
    #: For logging and signals; not written.
    outcome: str = "completed"  # completed | retried | dead
    exception: BaseException | None = None


def _exception_path(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def failed(
    job: Job, exc: BaseException, started_at: datetime, worker_id: str, delay: float | None
) -> Outcome:
    """The outcome of a failed attempt: retry after ``delay`` seconds, or dead when out of
    attempts (or when ``delay`` is None, for failures no retry can fix)."""
    now = timezone.now()
    text = "".join(traceback.format_exception(exc))
    entry = {
        "attempt": job.attempts,
        "worker_id": worker_id,
        "exception_class": _exception_path(exc),
        "traceback": text,
        "at": now.isoformat(),
    }
    if delay is not None and job.attempts < job.max_attempts:
        return Outcome(
            job_id=job.pk,
            status="pending",
            started_at=started_at,
            finished_at=None,
            run_after=now + timedelta(seconds=delay),
            error=text,
            error_entry_json=sql.dumps(entry),
            outcome="retried",
            exception=exc,
        )
    return Outcome(
        job_id=job.pk,
        status="dead",
        started_at=started_at,
        finished_at=now,
        error=text,
        error_entry_json=sql.dumps(entry),
        outcome="dead",
        exception=exc,
    )


def _result_json(value: Any) -> str:
    """JSON for a return value; raises TypeError/ValueError for values JSON can't hold."""
    text = sql.dumps(value)
    if json.loads(text) != value:
        raise TypeError(
            f"the return value {value!r} of type {type(value).__name__} does not survive a JSON "
            "round trip"
        )
    return text


class ResultNotJSON(TypeError):
    """A job returned a value that cannot be stored as its JSON result."""


def execute(job: Job, worker_id: str) -> Outcome:
    """Run one attempt of ``job`` (already claimed, ``running``) and return its outcome.

    Never raises for the job's own failures: an exception, an unknown name or a return value
    that is not JSON all become a failed attempt of that job.
    """
    close_old_connections()
    started_at = timezone.now()
    signals.send(signals.job_started, job=job, worker_id=worker_id)
    runnable: registry.Runnable | None = None
    try:
        runnable = registry.get(job.name)
        value = runnable.run(job)
        try:
            result_json = _result_json(value)
        except (TypeError, ValueError) as exc:
            raise ResultNotJSON(
                f"Job {job.name!r} #{job.pk} returned a non-JSON value: {exc}"
            ) from exc
        outcome = Outcome(
            job_id=job.pk,
            status="completed",
            started_at=started_at,
            finished_at=timezone.now(),
            result_json=result_json,
        )
    except Exception as exc:
        # An unknown name retries with the default backoff (a newer deploy may know it).
        outcome = failed(job, exc, started_at, worker_id, registry.retry_delay_of(job))
    finally:
        close_old_connections()
    signals.send(
        signals.job_finished,
        job=job,
        worker_id=worker_id,
        outcome=outcome.outcome,
        exception=outcome.exception,
    )
    return outcome


def log_outcome(job: Job, outcome: Outcome) -> None:
    duration_ms = (
        (outcome.finished_at or timezone.now()) - outcome.started_at
    ).total_seconds() * 1000
    if outcome.outcome == "completed":
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s #%d queue=%s attempt=%d/%d completed in %.1fms",
                job.name,
                job.pk,
                job.queue,
                job.attempts,
                job.max_attempts,
                duration_ms,
            )
        return
    logger.error(
        "%s #%d queue=%s attempt=%d/%d %s in %.1fms%s",
        job.name,
        job.pk,
        job.queue,
        job.attempts,
        job.max_attempts,
        "failed, will retry" if outcome.outcome == "retried" else "failed, now dead",
        duration_ms,
        f" (next attempt at {outcome.run_after.isoformat()})" if outcome.run_after else "",
        exc_info=outcome.exception,
    )
