"""Jobs the tests enqueue; autodiscovered like any app's ``jobs`` module."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_pgqueue import current_job, job


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def noop() -> None:
    return None


@job(queue="emails", priority=10, max_attempts=5)
def send_welcome(user_id: int) -> None:
    return None


@job(max_attempts=3)
def always_fails(message: str = "boom") -> None:
    raise RuntimeError(message)


@job(max_attempts=5)
def fails_until(marker: str, succeed_on: int) -> int:
    """Fails until the file ``marker`` counts ``succeed_on`` calls."""
    path = Path(marker)
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    if count < succeed_on:
        raise ValueError(f"attempt {count} fails")
    return count


@job
def record(path: str, value: str, sleep: float = 0.0) -> str:
    """Appends ``value`` and the worker's pid to a file, optionally after sleeping."""
    if sleep:
        time.sleep(sleep)
    with open(path, "a") as fh:
        fh.write(f"{value} {os.getpid()}\n")
    return value


@job
def returns_set() -> object:
    return {1, 2}


@job(timeout=1.0, max_attempts=2)
def hangs(seconds: float) -> None:
    """Sleeps past its 1 s timeout: the worker must give up on it and carry on."""
    time.sleep(seconds)


@job(max_attempts=3)
def until_cancelled(marker: str, fail: bool = False) -> str:
    """Reports progress every 0.1 s until cancelled (at most ~10 min), then stops: returns, or
    raises with ``fail``. Writes what it saw to ``marker``."""
    me = current_job()
    Path(marker).write_text(f"started {me.id} attempt {me.attempt}\n")
    for step in range(6000):
        me.set_progress(step, 6000, "working")
        if me.cancel_requested:
            with open(marker, "a") as fh:
                fh.write("saw cancel\n")
            if fail:
                raise RuntimeError("stopping because I was cancelled")
            return "stopped"
        time.sleep(0.1)
    return "never cancelled"


@job(max_attempts=3)
def ignores_cancel(marker: str, seconds: float) -> str:
    """Sleeps ``seconds`` without ever looking at ``cancel_requested``."""
    Path(marker).write_text("started\n")
    time.sleep(seconds)
    with open(marker, "a") as fh:
        fh.write("finished\n")
    return "done"
