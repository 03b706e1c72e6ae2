"""Job name -> runnable. The worker runs only names registered here.

Nothing is ever imported from a dotted path read out of the table: a name in the table that no
module registered fails that job (with retries, for rolling deploys) and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from django_pgqueue.exceptions import DuplicateJobName, UnknownJob

if TYPE_CHECKING:
    from django_pgqueue.models import Job


class Runnable(Protocol):
    """What the worker needs of a registered job."""

    @property
    def name(self) -> str: ...

    def run(self, job: Job) -> Any:
        """Run one attempt of ``job``; the return value is stored as the job's JSON result."""

    def retry_delay(self, attempt: int) -> float:
        """Seconds to wait before the attempt after failed attempt number ``attempt``."""


_registry: dict[str, Runnable] = {}


def register(runnable: Runnable) -> None:
    existing = _registry.get(runnable.name)
    if existing is not None and not _same(existing, runnable):
        raise DuplicateJobName(
            f"Job name {runnable.name!r} is already registered by {existing!r}; "
            "pass name='...' to @job to register another function under a different name."
        )
    _registry[runnable.name] = runnable


def _origin(runnable: Runnable) -> tuple[str, str] | None:
    func = getattr(runnable, "func", None)
    if func is None:
        return None
    return (func.__module__, func.__qualname__)


def _same(a: Runnable, b: Runnable) -> bool:
    # Re-importing a module (autoreload, tests) registers the same function again: allowed.
    return a is b or (_origin(a) is not None and _origin(a) == _origin(b))


def get(name: str) -> Runnable:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownJob(
            f"No job named {name!r} is registered in this worker. Define it with @job in a "
            "'jobs' module of an installed app (or import it from one) and deploy it to the "
            "workers."
        ) from None


def timeout_of(name: str) -> float | None:
    """Seconds a job of this name may run before it counts as hung (None: no limit)."""
    from django_pgqueue.conf import settings

    timeout = getattr(_registry.get(name), "timeout", None)
    return timeout if timeout is not None else settings.JOB_TIMEOUT


def retry_delay_of(job: Job) -> float:
    """The backoff before the next attempt of ``job``; the default schedule for unknown names."""
    from django_pgqueue.conf import settings
    from django_pgqueue.enqueue import retry_delay

    runnable = _registry.get(job.name)
    if runnable is not None:
        return runnable.retry_delay(job.attempts)
    return retry_delay(
        job.attempts, settings.BACKOFF_BASE, settings.BACKOFF_MAX, settings.BACKOFF_JITTER
    )


def names() -> list[str]:
    return sorted(_registry)
