"""A ``django.tasks`` backend (Django 6.0+) whose tasks run on ``manage.py run_jobs`` workers.

::

    TASKS = {"default": {"BACKEND": "django_pgqueue.tasks.PgQueueBackend"}}

A task is a row of the job table like any ``@job``: same claim, retries, dead jobs and admin.
Its job name is the task's ``module_path``. Workers run only names in
:mod:`django_pgqueue.registry`: each task registers itself there when it is created (the
backend's ``task_class``), and :func:`autodiscover` (called from the app's ``ready()``) imports
every installed app's ``tasks`` module, so a worker knows the same tasks as the web processes.
See ``docs/django-tasks.md``.

Modules: ``base`` (the Task class, its options, its JobSpec and registry entry, ``@task``),
``backend`` (enqueue, results, checks), ``attempt`` (one attempt on a worker, Django's
signals), ``results`` (job row -> TaskResult), ``discovery``. Imports run one way:
backend -> base -> attempt -> results.
"""

from __future__ import annotations

try:
    import django.tasks
    import django.utils.json
except ImportError as exc:  # Django < 6.0
    import django

    # A ModuleNotFoundError for this module's own name: tools that import every app's
    # ``tasks`` module and skip missing ones (Celery's autodiscovery) skip this one too.
    raise ModuleNotFoundError(
        f"django_pgqueue.tasks is a backend for django.tasks, which needs Django 6.0 or later "
        f"(this is Django {django.get_version()}). On this version, use @job from "
        "django_pgqueue, or upgrade Django.",
        name=__name__,
    ) from exc

from django_pgqueue.tasks.backend import PgQueueBackend
from django_pgqueue.tasks.base import OPTION_NAMES, PgQueueTask, task
from django_pgqueue.tasks.discovery import autodiscover, uses_pgqueue_backend
from django_pgqueue.tasks.results import STATUS_MAP

__all__ = [
    "OPTION_NAMES",
    "STATUS_MAP",
    "PgQueueBackend",
    "PgQueueTask",
    "autodiscover",
    "task",
    "uses_pgqueue_backend",
]
