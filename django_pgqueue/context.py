"""``current_job()``: what a running job knows about itself, from inside its own thread (or,
for an ``async def`` job, its own asyncio task).

The worker's executor makes a :class:`CurrentJob` for each attempt and binds it to the thread
running it. The job reads its id and attempt, asks whether it was cancelled
(``cancel_requested``, set by the worker loop when ``Job.cancel()`` reaches it) or its worker is
shutting down (``shutdown_requested``: raise ``JobInterrupted`` to be handed back) and reports
progress, which the loop writes to the job's row about once a second (never from the job's own
connection or transaction), where the admin shows it.

Outside a worker (a job function called directly, as in a unit test), ``current_job()`` returns
a standalone :class:`CurrentJob`: no id, attempt 1, never cancelled, its progress kept in
memory only (``progress``), no shutdown (``request_shutdown()`` makes one, for a test).
"""

from __future__ import annotations

import contextvars
import json
import math
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_pgqueue.arguments import jsonb_storable
from django_pgqueue.sql import dumps

if TYPE_CHECKING:
    from django_pgqueue.models import Batch, Job

#: The job running: a context variable, so that it is each thread's own (a new thread starts
#: with none) and each asyncio task's own (a task runs in a copy of the context it was made
#: in): right for a sync job in its executor thread and for every async job on the event loop.
_current: contextvars.ContextVar[CurrentJob | None] = contextvars.ContextVar(
    "pgqueue_current_job", default=None
)


class CurrentJob:
    """The running attempt of a job, as the job itself sees it."""

    __slots__ = (
        "_cancel",
        "_progress",
        "_shutdown",
        "_written",
        "attempt",
        "claimed_at",
        "id",
        "max_attempts",
        "name",
        "queue",
        "worker_id",
    )

    def __init__(
        self,
        job: Job | None = None,
        *,
        name: str = "",
        queue: str = "",
        max_attempts: int = 1,
        shutdown: threading.Event | None = None,
        worker_id: str | None = None,
    ) -> None:
        """The attempt of ``job`` a worker runs; without one, a standalone context with
        ``name``, ``queue`` and ``max_attempts`` (:meth:`standalone`). ``shutdown``: the
        worker's, set when its shutdown starts (one per context without it). ``worker_id``: the
        worker running it (its log records say so, :mod:`django_pgqueue.logs`)."""
        #: The job's row; None outside a worker.
        self.id: int | None = None if job is None else job.id
        self.name: str = name if job is None else job.name
        self.queue: str = queue if job is None else job.queue
        #: The attempt running, from 1.
        self.attempt: int = 1 if job is None else job.attempts
        self.max_attempts: int = max_attempts if job is None else job.max_attempts
        #: When the claim took it (the database's clock): what rate limits count. None outside
        #: a worker.
        self.claimed_at: datetime | None = None if job is None else job.started_at
        #: The worker running it; None outside a worker.
        self.worker_id: str | None = worker_id
        # Plain attributes, no locks: this is made for every job a worker runs. A bool and a
        # tuple are each replaced whole (one reference), which the loop's thread reads safely.
        self._cancel = False
        self._progress: tuple[int, str] | None = None  # (version, JSON) last reported
        self._written = 0  # the version the worker last took
        self._shutdown = shutdown if shutdown is not None else threading.Event()

    @classmethod
    def standalone(cls, name: str = "", queue: str = "", max_attempts: int = 1) -> CurrentJob:
        """What ``current_job()`` returns outside a worker: a job function called directly.

        No row (``id`` None, ``claimed_at`` None), attempt 1, ``cancel_requested`` False
        (``request_cancel()`` sets it, for a test), progress kept in memory (``progress``).
        """
        return cls(name=name, queue=queue, max_attempts=max_attempts)

    def __repr__(self) -> str:
        if self.id is None:
            return f"<CurrentJob {self.name or '(standalone)'} outside a worker>"
        return f"<CurrentJob {self.name} #{self.id} attempt {self.attempt}>"

    @property
    def cancel_requested(self) -> bool:
        """Whether this job was cancelled while it ran: stop soon, at a point of your choosing.

        Whatever the attempt then returns or raises, the job ends ``cancelled`` and is not
        retried.
        """
        return self._cancel

    @property
    def shutdown_requested(self) -> bool:
        """Whether the worker running this job is shutting down (SIGTERM: a deploy, a scale
        down). A long job checks it at safe points and raises ``JobInterrupted`` there: it is
        handed back and runs again on another worker, without spending an attempt. A job that
        runs on past the worker's shutdown timeout is handed back the same way; its code is
        stopped with its process."""
        return self._shutdown.is_set()

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

    @property
    def parent_results(self) -> dict[int, Any]:
        """``{parent id: its stored result}`` of the jobs this one was enqueued after
        (``using(after=)``, a chain's previous step); ``{}`` outside a worker. Read from the
        queue's database at each access."""
        if self.id is None:
            return {}
        from django_pgqueue import operations
        from django_pgqueue.conf import settings

        return operations.parent_results(operations.DjangoDatabase(settings.DATABASE), self.id)

    @property
    def batch(self) -> Batch | None:
        """The batch this job is a member of, or whose callback it is (its ``id``,
        ``counts()``, ``description``); None outside one or outside a worker."""
        if self.id is None:
            return None
        from django_pgqueue import operations
        from django_pgqueue.conf import settings
        from django_pgqueue.models import Batch

        db = operations.DjangoDatabase(settings.DATABASE)
        batch_id = operations.batch_of(db, self.id)
        if batch_id is None:
            return None
        return Batch.objects.using(db.alias).filter(pk=batch_id).first()

    @property
    def progress(self) -> dict[str, object] | None:
        """The progress last reported (``{"done", "total", "message"}``), or None."""
        progress = self._progress
        return None if progress is None else json.loads(progress[1])

    # ----- the worker's side -----------------------------------------------------------------

    def request_cancel(self) -> None:
        self._cancel = True

    def request_shutdown(self) -> None:
        """Set ``shutdown_requested`` (the worker sets its shared flag instead; for a test)."""
        self._shutdown.set()

    def take_progress(self) -> str | None:
        """The progress reported since the last call (JSON), if any (the worker's thread)."""
        progress = self._progress
        if progress is None or progress[0] == self._written:
            return None
        self._written = progress[0]
        return progress[1]


def current_job() -> CurrentJob:
    """The job running in this thread; outside a worker (a job function called directly), a
    standalone one (:meth:`CurrentJob.standalone`), the same for the whole call when the
    function is a ``@job`` (its name, queue and ``max_attempts``), else a new one."""
    job = _current.get()
    if job is None:
        return CurrentJob.standalone()
    return job


def bound() -> CurrentJob | None:
    """The job bound to the calling thread (or asyncio task), if any."""
    return _current.get()


def bind(job: CurrentJob | None) -> None:
    """Make ``job`` what ``current_job()`` returns in the calling thread (None: no job)."""
    _current.set(job)


def bind_async(job: CurrentJob) -> contextvars.Token[CurrentJob | None]:
    """Make ``job`` current in the running context (an asyncio task's); give the token back to
    :func:`unbind_async` when it ends."""
    return _current.set(job)


def unbind_async(token: contextvars.Token[CurrentJob | None]) -> None:
    _current.reset(token)
