"""Tasks the tests enqueue. Worker subprocesses find this module by autodiscovery."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import django
from django.dispatch import receiver
from django.tasks import TaskContext, task
from django.tasks.signals import task_enqueued, task_finished, task_started

from django_pgqueue.tasks import task as pgqueue_task

# Retry options: Django 6.1's own @task forwards them to the backend's task_class; on 6.0,
# django_pgqueue.tasks.task takes them.
task_with_options = task if django.VERSION >= (6, 1) else pgqueue_task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(value: Any) -> Any:
    return value


@task
def pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Returns a tuple: stored, like Django does, as a list."""
    return (a, b)


@task
def record(path: str, value: str) -> str:
    with open(path, "a") as fh:
        fh.write(value + "\n")
    return value


@task(queue_name="emails")
def send_email(path: str, to: str) -> str:
    with open(path, "a") as fh:
        fh.write(f"email {to}\n")
    return to


@task_with_options(max_attempts=3)
def always_fails(message: str) -> None:
    raise ValueError(message)


@task_with_options(takes_context=True, max_attempts=5)
def flaky(context: TaskContext, path: str, succeed_on: int) -> int:
    """Appends ``context.attempt`` to ``path``; fails until attempt ``succeed_on``."""
    attempt = context.attempt
    with open(path, "a") as fh:
        fh.write(f"{attempt}\n")
    if attempt < succeed_on:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


@task_with_options(max_attempts=1)
def needs_file(path: str) -> str:
    return Path(path).read_text()


@task_with_options(max_attempts=1)
def returns_set() -> object:
    return {1, 2}


@task_with_options(max_attempts=2, backoff_base=3600)
def fails_slow_retry() -> None:
    raise ValueError("retry me in an hour")


@task_with_options(timeout=1.0, max_attempts=1)
def hangs(seconds: float) -> None:
    """Sleeps past its 1 s timeout: the worker fails it and carries on."""
    time.sleep(seconds)


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
async def async_where() -> str:
    """Where an async task runs: the worker's event loop thread, not an executor thread."""
    await asyncio.sleep(0)
    import threading

    return threading.current_thread().name


# ----- signals: worker subprocesses write what they receive to $PGQUEUE_TEST_SIGNAL_LOG ----------


def _log_signal(name: str, task_result: Any) -> None:
    path = os.environ.get("PGQUEUE_TEST_SIGNAL_LOG")
    if not path:
        return
    exc = sys.exc_info()[1]
    line = {
        "signal": name,
        "id": task_result.id,
        "path": task_result.task.module_path,
        "status": str(task_result.status),
        "attempts": task_result.attempts,
        "errors": len(task_result.errors),
        "handling": None if exc is None else f"{type(exc).__name__}: {exc}",
        "pid": os.getpid(),
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


@receiver(task_enqueued, dispatch_uid="taskapp-enqueued")
def _on_enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("enqueued", task_result)


@receiver(task_started, dispatch_uid="taskapp-started")
def _on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("started", task_result)


@receiver(task_finished, dispatch_uid="taskapp-finished")
def _on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("finished", task_result)
