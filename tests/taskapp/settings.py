"""Settings for worker subprocesses that run tasks: the test settings, TASKS using our backend,
this app installed (its ``tasks`` module is found by autodiscovery, nothing else imports it in
the worker) and Django's task logging on stderr."""

from __future__ import annotations

from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, LOGGING
from tests.taskapp.config import TASKS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.taskapp"]

TASKS = TASKS

LOGGING: dict[str, Any] = {
    **LOGGING,
    "loggers": {
        **LOGGING["loggers"],
        "django.tasks": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
