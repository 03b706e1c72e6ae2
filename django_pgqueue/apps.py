from __future__ import annotations

from typing import Any

import django
from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules


class PgQueueConfig(AppConfig):
    name = "django_pgqueue"
    label = "django_pgqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_pgqueue import checks  # noqa: F401  (registers the system checks)

        # Like the admin: import every installed app's ``jobs`` module so its @job functions
        # are registered before a worker claims anything.
        autodiscover_modules("jobs")

        # django.tasks (Django 6.0+ only): when a TASKS backend is ours, import every app's
        # ``tasks`` module too, so workers know the @task functions. See docs/django-tasks.md.
        if django.VERSION >= (6, 0):
            from django_pgqueue.tasks import autodiscover as autodiscover_tasks

            autodiscover_tasks()

        # ``migrate`` brings the periodic schedules declared with @job(cron=/every=) along.
        post_migrate.connect(sync_schedules_after_migrate, sender=self)


def sync_schedules_after_migrate(using: str, **kwargs: Any) -> None:
    from django.db import connections

    from django_pgqueue.conf import settings
    from django_pgqueue.schedules.sync import sync
    from django_pgqueue.sql import SCHEDULE_TABLE

    if using != settings.DATABASE:
        return
    if SCHEDULE_TABLE not in connections[using].introspection.table_names():
        return  # migrated back before the schedules
    sync(using)
