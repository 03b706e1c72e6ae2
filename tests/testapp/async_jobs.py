"""``async def`` jobs the tests enqueue (imported by ``jobs``, which is autodiscovered)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

from asgiref.sync import sync_to_async

from django_pgqueue import JobInterrupted, current_job, job


def _mark(directory: str | None, line: str) -> None:
    """Append ``line`` to ``directory``/marks (one write: lines of processes never mix)."""
    if directory:
        fd = os.open(Path(directory) / "marks", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


@job
async def async_noop() -> None:
    return None


@job
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@job(max_attempts=1)
async def async_sleep(seconds: float, marks: str | None = None) -> dict[str, object]:
    """Awaits ``seconds``; returns when it started and ended (wall clock) and its own id as
    ``current_job()`` says it, after the await (another task ran meanwhile)."""
    started = time.time()
    _mark(marks, f"start {current_job().id}")
    await asyncio.sleep(seconds)
    _mark(marks, f"done {current_job().id}")
    return {"start": started, "end": time.time(), "id": current_job().id}


@job(max_attempts=3)
async def async_sleep_retried(seconds: float, marks: str | None = None) -> dict[str, object]:
    """:func:`async_sleep` with attempts to spare (a reclaimed attempt runs again)."""
    return await async_sleep.func(seconds, marks)


@job(max_attempts=1)
async def async_fails(message: str = "async boom") -> None:
    await asyncio.sleep(0.01)
    raise RuntimeError(message)


@job(max_attempts=1, timeout=0.5)
async def async_too_slow(marks: str | None = None) -> None:
    try:
        await asyncio.sleep(30)
    finally:
        _mark(marks, f"finally {current_job().id}")


@job
async def async_waits_to_be_cancelled(marks: str) -> str:
    """Reports progress, then awaits until its task is cancelled; marks that it saw it."""
    current_job().set_progress(1, 2, "waiting")
    _mark(marks, f"start {current_job().id}")
    try:
        while True:
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        _mark(marks, f"cancelled {current_job().id} {current_job().cancel_requested}")
        raise


@job(max_attempts=1)
async def async_blocks_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the mistake the worker warns about


@job
async def async_reads_the_database(job_id: int) -> str:
    from django_pgqueue.models import Job

    row = await Job.objects.aget(pk=job_id)
    count = await sync_to_async(Job.objects.filter(pk=job_id).count)()
    return f"{row.name} {count}"


@job
async def async_backend_pid() -> int:
    """The server process of the connection its query ran on (the async ORM's thread's)."""
    from django.db import connection

    def pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    return await sync_to_async(pid)()


@job(max_attempts=3)
async def async_fails_until(marks: str, succeed_on: int) -> int:
    """Fails until its attempt ``succeed_on``; marks each attempt."""
    attempt = current_job().attempt
    _mark(marks, f"attempt {current_job().id} {attempt}")
    await asyncio.sleep(0)
    if attempt < succeed_on:
        raise ConnectionError(f"attempt {attempt} failed")
    return attempt


@job
async def async_hands_itself_back(marks: str) -> None:
    """Awaits until its worker shuts down, then hands itself back (``JobInterrupted``)."""
    _mark(marks, f"start {current_job().id}")
    while not current_job().shutdown_requested:
        await asyncio.sleep(0.05)
    raise JobInterrupted("the worker is shutting down: run me again elsewhere")


async def _swallow_cancels(marks: str) -> None:
    """Awaits for ever, catching every ``CancelledError``: its task cannot be cancelled."""
    _mark(marks, f"start {current_job().id}")
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            _mark(marks, f"swallowed {current_job().id}")


@job(max_attempts=1, timeout=1)
async def async_swallows_cancel(marks: str) -> None:
    """Past its timeout its task is cancelled, and it carries on: the worker abandons it."""
    await _swallow_cancels(marks)


@job(max_attempts=1)
async def async_ignores_cancel(marks: str) -> None:
    """No timeout; a cancel request cancels its task, and it carries on."""
    await _swallow_cancels(marks)


def _block(marks: str, seconds: float) -> None:
    _mark(marks, f"start {current_job().id}")
    time.sleep(seconds)  # blocks the event loop: no cancel reaches it
    _mark(marks, f"done {current_job().id}")


@job(max_attempts=1, timeout=1)
async def async_blocks_past_its_timeout(marks: str, seconds: float) -> None:
    """Blocks the event loop (``time.sleep``) past its timeout."""
    _block(marks, seconds)


@job(max_attempts=1)
async def async_blocks_until_cancelled(marks: str, seconds: float) -> None:
    """Blocks the event loop (``time.sleep``); no timeout: only a cancel request bounds it."""
    _block(marks, seconds)


@job(max_attempts=1)
async def async_ignores_cancel_until(marks: str, release: str) -> str:
    """Catches every ``CancelledError`` and awaits on until the file ``release`` exists (at most
    ~10 min), then returns."""
    _mark(marks, f"start {current_job().id}")
    for _ in range(12000):
        if Path(release).exists():
            break
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            _mark(marks, f"swallowed {current_job().id}")
    _mark(marks, f"finished {current_job().id}")
    return "done"


@job
async def async_batch_report(path: str, callback: str) -> None:
    """An ``async def`` batch callback: appends which one ran, its id, and the thread it ran on
    (the worker's event loop runs in ``pgqueue-asyncio``)."""
    await asyncio.sleep(0)
    line = {
        "callback": callback,
        "job": current_job().id,
        "thread": threading.current_thread().name,
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")
