"""The worker loop's periodic work (heartbeat, prune...): timers the loop runs when due.

To run something else periodically in every worker (a schedule ticker, say), add a task
where the loop builds its housekeeping (``Worker.__init__``)::

    self.housekeeping.add("schedule", self._tick_schedule, interval=1.0)

A task runs on the loop's thread, with the loop's database error handling around it (an error
is logged, the loop backs off and the task runs again at its next turn). It returns the seconds
until its next run, or ``None`` for its ``interval``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import Database


@dataclass
class Periodic:
    name: str
    run: Callable[[], float | None]
    interval: float
    #: When it runs next (``time.monotonic()``).
    next_at: float = 0.0
    #: Whether the loop wakes up for it; if not, it runs at the loop's next turn after it is due.
    wakes: bool = True


class Housekeeping:
    """Named periodic tasks, run in the order they were added."""

    def __init__(self) -> None:
        self.tasks: list[Periodic] = []

    def add(
        self,
        name: str,
        run: Callable[[], float | None],
        interval: float,
        *,
        first_in: float = 0.0,
        wakes: bool = True,
    ) -> Periodic:
        """Run ``run`` ``first_in`` seconds from now, then every ``interval`` seconds (or as
        long as it returns)."""
        task = Periodic(name, run, interval, time.monotonic() + first_in, wakes)
        self.tasks.append(task)
        return task

    def run_due(self, now: float) -> None:
        """Run every task that is due; each is rescheduled from ``now`` once it returned."""
        for task in self.tasks:
            if now >= task.next_at:
                delay = task.run()
                task.next_at = now + (task.interval if delay is None else delay)

    def next_wake(self) -> float | None:
        """The earliest time a task wants the loop awake for (``None``: none)."""
        times = [task.next_at for task in self.tasks if task.wakes]
        return min(times) if times else None


def prune(db: Database) -> float:
    """Delete expired history in bounded batches; returns seconds until the next prune."""
    pruned = operations.prune(db)
    # A full batch means more is due: come back soon, without hogging the loop.
    return 1.0 if pruned.more else settings.PRUNE_INTERVAL
