"""The offered load: a producer that enqueues at a fixed rate, and the job it enqueues."""

from __future__ import annotations

import bisect
import functools
import threading
import time
from typing import Any

from django.db import connections

from django_pgqueue.conf import settings
from django_pgqueue.decorators import JobFunction, job

#: The producer enqueues this often (one ``enqueue_many`` per tick).
TICK_SECONDS = 0.01
#: How far behind its schedule the producer catches up; ticks later than that are skipped.
MAX_CATCH_UP = 1.0


SLEEP = "django_pgqueue.bench.sleep"


def sleep(ms: float) -> None:
    """The scenarios' job: sleeps ``ms`` milliseconds (1 ms by default), returns nothing."""
    time.sleep(ms / 1000)


@functools.cache
def register() -> JobFunction[[float], None]:
    """Register the scenarios' job in this process (and so in the worker it forks)."""
    return job(name=SLEEP, max_attempts=1)(sleep)


class Producer:
    """Enqueues ``rate`` jobs per second in a thread: ``enqueue_many`` every 10 ms.

    The schedule is fixed: a tick that comes late enqueues what the missed ticks owed, so the
    offered load does not fall when the database slows down; more than ``MAX_CATCH_UP``
    seconds behind (the machine cannot produce that fast), the missed ticks are skipped and
    counted, rather than offered later in one burst. ``rate`` may be changed while it
    runs. :meth:`produced_at` says how many jobs had been committed at a given wall time.
    """

    def __init__(self, queue: str, rate: float, job_ms: float) -> None:
        self.handle = register().using(queue=queue)
        self.rate = rate
        self.job_ms = job_ms
        self.produced = 0
        self.late_ticks = 0
        self.skipped_ticks = 0
        self.error: str | None = None
        self._times: list[float] = [0.0]
        self._counts: list[int] = [0]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def produced_at(self, wall_time: float) -> int:
        """Jobs committed by ``wall_time`` (``time.time()``)."""
        index = bisect.bisect_right(self._times, wall_time) - 1
        return self._counts[max(index, 0)]

    def _run(self) -> None:
        owed = 0.0
        next_tick = time.monotonic()
        try:
            while not self._stop.is_set():
                owed += self.rate * TICK_SECONDS
                count = int(owed)
                if count:
                    owed -= count
                    self.handle.enqueue_many([(self.job_ms,)] * count)
                    self.produced += count
                    self._times.append(time.time())
                    self._counts.append(self.produced)
                next_tick += TICK_SECONDS
                behind = time.monotonic() - next_tick
                if behind > MAX_CATCH_UP:
                    skipped = int(behind / TICK_SECONDS)
                    self.skipped_ticks += skipped
                    next_tick += skipped * TICK_SECONDS
                pause = next_tick - time.monotonic()
                if pause > 0:
                    self._stop.wait(pause)
                else:
                    self.late_ticks += 1
        except Exception as exc:  # reported with the figures, never a hang
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            connections[settings.DATABASE].close()

    def describe(self) -> dict[str, Any]:
        return {
            "produced": self.produced,
            "late_ticks": self.late_ticks,
            "skipped_ticks": self.skipped_ticks,
            "error": self.error,
        }
