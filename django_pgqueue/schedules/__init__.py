"""Periodic jobs: ``@job(cron=...)`` / ``@job(every=...)`` and schedules made in the admin.

===============  ==========================================================================
module           owns
===============  ==========================================================================
``timing``       when ticks fall: cron (cronsim, per-schedule time zone, DST) and intervals
``declaration``  what ``@job`` declares (one schedule per job, named after it)
``models``       the ``Schedule`` row: its values in use, the code's values kept apart
``sync``         code declarations -> rows, never overwriting an admin edit
``firing``       the worker's side: fire due ticks, know when to look again
===============  ==========================================================================

Firing runs :func:`django_pgqueue.operations.fire_schedules`: the tick's job is inserted in
the transaction that advances ``next_run_at``, on rows locked with SKIP LOCKED, so any number
of workers enqueue each tick exactly once.
"""

from __future__ import annotations
