from __future__ import annotations

from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The benchmark and chaos commands; ``ready()`` does nothing, so installing the app costs
    a project's processes (the worker's too) only this module."""

    name = "django_pgqueue.contrib.bench"
    # Not "bench", the last part of the name: a project may well have an app of that name.
    label = "pgqueue_bench"
    verbose_name = "Job queue benchmarks"
