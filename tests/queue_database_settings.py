"""tests.settings with the queue in its own database, "queue" (tests/test_queue_database.py's
worker and command subprocesses; the test process itself turns it on with override_settings)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

PGQUEUE_DATABASE = "queue"
DATABASE_ROUTERS = ["django_pgqueue.routers.QueueRouter"]
