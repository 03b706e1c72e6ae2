"""Job name -> runnable. The worker runs only names registered here.

Nothing is ever imported from a dotted path read out of the table: a name in the table that no
module registered fails that job (with retries, for rolling deploys) and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from django_pgqueue.exceptions import DuplicateJobName, UnknownJob
from django_pgqueue.spec import JobSpec

if TYPE_CHECKING:
    from django_pgqueue.models import Job


class Runnable(Protocol):
    """What the worker needs of a registered job: ``@job``'s handle, or a task's entry."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> JobSpec:
        """Its settings: retries, timeout, defaults for enqueue."""

    @property
    def func(self) -> Callable[..., Any]:
        """The function itself (re-registering the same one, on a re-import, is allowed)."""

    def run(self, job: Job) -> Any:
        """Run one attempt of ``job``; the return value is stored as the job's JSON result."""


_registry: dict[str, Runnable] = {}


def register(runnable: Runnable) -> None:
    existing = _registry.get(runnable.name)
    if existing is not None and not _same(existing, runnable):
        raise DuplicateJobName(
            f"Job name {runnable.name!r} is already taken by {_describe(existing)}, so "
            f"{_describe(runnable)} cannot have it too. Give one of them another name: "
            "@job(name='...'), or a different function or module name for a task."
        )
    _registry[runnable.name] = runnable


def _origin(runnable: Runnable) -> tuple[str, str]:
    return (runnable.func.__module__, runnable.func.__qualname__)


def _describe(runnable: Runnable) -> str:
    """``the @job function shop.jobs.send`` / ``the task shop.tasks.send``: no internals."""
    kind = getattr(runnable, "kind", "job")
    return f"the {kind} {'.'.join(_origin(runnable))}"


def _same(a: Runnable, b: Runnable) -> bool:
    # Re-importing a module (autoreload, tests) registers the same function again: allowed.
    return a is b or _origin(a) == _origin(b)


def get(name: str) -> Runnable:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownJob(
            f"No job named {name!r} is registered in this worker. Define it with @job in a "
            "'jobs' module of an installed app (or import it from one) and deploy it to the "
            "workers."
        ) from None


def spec_for(name: str) -> JobSpec:
    """The spec of the job registered as ``name``; the defaults for a name none registered
    (its attempt fails as :class:`UnknownJob` and is retried like any other)."""
    runnable = _registry.get(name)
    return runnable.spec if runnable is not None else _UNREGISTERED


# Settings-only defaults (a name read from the table may be anything: it is never validated).
_UNREGISTERED = JobSpec(name="unregistered")


def names() -> list[str]:
    return sorted(_registry)
