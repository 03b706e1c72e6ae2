"""Periodic jobs declared in code, for worker subprocesses started with
``tests.schedule_settings`` only (the test process itself never imports this module, so its
schedules exist only where a test asks for them)."""

from __future__ import annotations

from datetime import timedelta

from django_pgqueue import job


@job(every=timedelta(seconds=2), schedule_args=("tick",))
def every_two_seconds(label: str) -> str:
    return label


@job(every=timedelta(seconds=2), schedule_args=("async tick",))
async def every_two_seconds_async(label: str) -> str:
    """The same, an ``async def`` job: its ticks are stored as async and run on the loop."""
    import asyncio

    await asyncio.sleep(0)
    return label
