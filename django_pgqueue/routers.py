"""A database router for a dedicated queue database (docs/settings.md#a-dedicated-queue-database).

::

    DATABASES = {"default": {...}, "queue": {...}}
    PGQUEUE_DATABASE = "queue"
    DATABASE_ROUTERS = ["django_pgqueue.routers.QueueRouter"]

It sends the app's models (jobs, workers, queues, schedules, rate windows) to
``PGQUEUE_DATABASE`` for reads and writes, lets their migrations run there and nowhere else,
and says nothing about other apps' models (the next router, or Django's default, decides).
The queue's own code reads ``PGQUEUE_DATABASE`` directly; the router is for what Django does
with the models on its own: ``migrate``, the admin's saves and deletes, ``Model.save()``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from django_pgqueue.conf import settings

#: The app label of the models this router sends to the queue's database.
APP_LABEL = "django_pgqueue"


def _ours(model: type[Model] | Model) -> bool:
    return bool(model._meta.app_label == APP_LABEL)


class QueueRouter:
    """Send django_pgqueue's models to ``PGQUEUE_DATABASE``; leave other apps' to the rest."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return settings.DATABASE if _ours(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return settings.DATABASE if _ours(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        """Between two of the queue's rows: yes (one database). A queue row and another app's
        row: the rest of the routers decide (Django's default: only within one database)."""
        if _ours(obj1) and _ours(obj2):
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        """The queue's tables in ``PGQUEUE_DATABASE`` only; other apps: not this router's say."""
        if app_label == APP_LABEL:
            return db == settings.DATABASE
        return None
