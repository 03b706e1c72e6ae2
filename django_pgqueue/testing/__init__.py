"""Helpers for testing code that uses the queue (docs/testing.md).

* :func:`capture_jobs`: a context manager that lists the jobs enqueued inside it, with their
  name, arguments, queue and options, for assertions without a worker;
* :func:`run_jobs`: runs the pending jobs in the test's thread through the worker's own code,
  retries included, and returns what happened;
* pytest fixtures ``captured_jobs`` and ``run_jobs`` (:mod:`.fixtures`, a pytest plugin).

Importing this module imports no model: it works in a conftest.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_pgqueue.testing.capture import CapturedJob, CapturedJobs, capture_jobs
    from django_pgqueue.testing.runner import JobsRun, RanAttempt, run_jobs

__all__ = ["CapturedJob", "CapturedJobs", "JobsRun", "RanAttempt", "capture_jobs", "run_jobs"]

_WHERE = {
    "CapturedJob": "capture",
    "CapturedJobs": "capture",
    "capture_jobs": "capture",
    "JobsRun": "runner",
    "RanAttempt": "runner",
    "run_jobs": "runner",
}


def __getattr__(name: str) -> Any:
    # Lazy: the runner imports the worker, which needs Django's apps ready.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
