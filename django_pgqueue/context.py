"""``current_job()``: what a running job knows about itself, from inside its own thread.

The worker's executor makes a :class:`CurrentJob` for each attempt and binds it to the thread
running it. The job reads its id and attempt, asks whether it was cancelled
(``cancel_requested``, set by the worker loop when ``Job.cancel()`` reaches it) and reports
progress, which the loop writes to the job's row about once a second (never from the job's own
connection or transaction), where the admin shows it.
"""

from __future__ import annotations

import math
import threading
from datetime import datetime
from typing import TYPE_CHECKING

from django_pgqueue.arguments import jsonb_storable
from django_pgqueue.sql import dumps

if TYPE_CHECKING:
    from django_pgqueue.models import Job

_local = threading.local()


class CurrentJob:
    """The running attempt of a job, as the job itself sees it."""

    __slots__ = (
        "_cancel",
        "_progress",
        "_written",
        "attempt",
        "claimed_at",
        "id",
        "max_attempts",
        "name",
        "queue",
    )

    def __init__(self, job: Job) -> None:
        self.id: int = job.pk
        self.name: str = job.name
        self.queue: str = job.queue
        #: The attempt running, from 1.
        self.attempt: int = job.attempts
        self.max_attempts: int = job.max_attempts
        #: When the claim took it (the database's clock): what rate limits count.
        self.claimed_at: datetime | None = job.started_at
        # Plain attributes, no locks: this is made for every job a worker runs. A bool and a
        # tuple are each replaced whole (one reference), which the loop's thread reads safely.
        self._cancel = False
        self._progress: tuple[int, str] | None = None  # (version, JSON) last reported
        self._written = 0  # the version the worker last took

    def __repr__(self) -> str:
        return f"<CurrentJob {self.name} #{self.id} attempt {self.attempt}>"

    @property
    def cancel_requested(self) -> bool:
        """Whether this job was cancelled while it ran: stop soon, at a point of your choosing.

        Whatever the attempt then returns or raises, the job ends ``cancelled`` and is not
        retried.
        """
        return self._cancel

    def set_progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report how far the job is (``done`` of ``total``, and a short message).

        Cheap: the value is kept in memory and written by the worker about once a second.
        """
        for label, value in (("done", done), ("total", total)):
            if value is None and label == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"set_progress: {label} must be a number, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"set_progress: {label} must be finite, got {value!r}")
        if not isinstance(message, str):
            raise TypeError(f"set_progress: message must be a string, not {message!r}")
        text = dumps({"done": done, "total": total, "message": message[:500]})
        if not jsonb_storable(text):
            raise ValueError("set_progress: message must not hold NULs or lone surrogates")
        version = self._progress[0] + 1 if self._progress is not None else 1
        self._progress = (version, text)

    # ----- the worker's side -----------------------------------------------------------------

    def request_cancel(self) -> None:
        self._cancel = True

    def take_progress(self) -> str | None:
        """The progress reported since the last call (JSON), if any (the worker's thread)."""
        progress = self._progress
        if progress is None or progress[0] == self._written:
            return None
        self._written = progress[0]
        return progress[1]


def current_job() -> CurrentJob:
    """The job running in this thread (``RuntimeError`` outside a job run by a worker)."""
    job: CurrentJob | None = getattr(_local, "job", None)
    if job is None:
        raise RuntimeError("current_job() is only available inside a job run by a worker")
    return job


def bind(job: CurrentJob | None) -> None:
    """Make ``job`` what ``current_job()`` returns in the calling thread (None: no job)."""
    _local.job = job
