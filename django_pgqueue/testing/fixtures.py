"""pytest fixtures for the test helpers; a pytest plugin (entry point ``pytest11``), so they
are there in any project with django_pgqueue installed and pytest-django. Without the entry
point (a vendored copy): ``from django_pgqueue.testing.fixtures import *`` in a conftest.py.

* ``captured_jobs``: the jobs enqueued during the test (:func:`capture_jobs` around it);
* ``run_jobs``: :func:`django_pgqueue.testing.run_jobs`, with database access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["captured_jobs", "run_jobs"]


@pytest.fixture
def captured_jobs() -> Iterator[Any]:
    """Every job enqueued during the test, by any path (a ``CapturedJobs`` list)."""
    from django_pgqueue.testing.capture import capture_jobs

    with capture_jobs() as jobs:
        yield jobs


@pytest.fixture
def run_jobs(db: None) -> Callable[..., Any]:
    """``run_jobs(queue=None, *, scheduled=False, limit=1000)``: run the pending jobs in the
    test, retries included; returns every attempt (a ``JobsRun``)."""
    from django_pgqueue.testing.runner import run_jobs as run

    return run
