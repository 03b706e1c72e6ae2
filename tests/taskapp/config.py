"""The TASKS setting of the tests: worker subprocesses get it from ``tests.taskapp.settings``,
the test process through ``override_settings``."""

from __future__ import annotations

from typing import Any

TASKS: dict[str, Any] = {
    "default": {
        "BACKEND": "django_pgqueue.tasks.PgQueueBackend",
        "QUEUES": ["default", "emails"],
    },
}
