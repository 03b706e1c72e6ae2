"""Importing the modules that define tasks, so every process registers the same ones."""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.utils.module_loading import autodiscover_modules, import_string

from django_pgqueue.tasks.backend import PgQueueBackend


def uses_pgqueue_backend() -> bool:
    """Whether any ``TASKS`` backend is a :class:`PgQueueBackend` (or a subclass)."""
    configured = getattr(settings, "TASKS", {})
    if not isinstance(configured, Mapping):
        return False
    for params in configured.values():
        path = params.get("BACKEND") if isinstance(params, Mapping) else None
        if not isinstance(path, str):
            continue
        try:
            backend_class = import_string(path)
        except ImportError:
            continue  # Django reports it when that backend is used
        if isinstance(backend_class, type) and issubclass(backend_class, PgQueueBackend):
            return True
    return False


def autodiscover() -> None:
    """Import every installed app's ``tasks`` module when a ``TASKS`` backend is ours.

    Called from ``PgQueueConfig.ready()``: this is how a worker learns the ``@task`` functions
    (each registers itself as it is created), like ``jobs`` modules for ``@job``.
    """
    if uses_pgqueue_backend():
        autodiscover_modules("tasks")
