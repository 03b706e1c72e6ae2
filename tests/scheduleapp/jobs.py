"""Periodic jobs declared in code, for worker subprocesses started with
``tests.schedule_settings`` only (the test process itself never imports this module, so its
schedules exist only where a test asks for them)."""

from __future__ import annotations

from datetime import timedelta

from django_pgqueue import job


@job(every=timedelta(seconds=2), schedule_args=("tick",))
def every_two_seconds(label: str) -> str:
    return label
