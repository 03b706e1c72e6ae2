"""tests.settings without the optional ``django_pgqueue.contrib.bench`` app: a project that
runs the queue and nothing else (tests/test_contrib_bench.py, tests/test_architecture.py)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if not app.startswith("django_pgqueue.contrib")]
