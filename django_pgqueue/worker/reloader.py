"""``run_jobs --reload``: restart the worker when the code changes, for development.

Django's autoreloader (``django.utils.autoreload``, what ``runserver`` uses), arranged for a
worker. ``runserver``'s own arrangement (``run_with_reloader``) doesn't fit one: it runs the
program in a side thread, where the supervisor cannot install its signal handlers, it restarts
by exiting at once, and a SIGTERM to it kills the child process outright; a worker must let its
jobs finish, or hand them back, first. So:

* The command's process is only a restart loop: it runs the same command line again in a
  child process (``DJANGO_AUTORELOAD_ENV=true``, as ``runserver`` does), forwards SIGTERM and
  SIGINT to it, and starts it again each time it exits with :data:`RESTART` (a code change).
* In the child, the supervisor runs as it always does, in the main thread, and Django's
  reloader (StatReloader, or Watchman where installed) watches its modules in a side thread.
  On a change it sends the process a SIGTERM: the supervisor's graceful shutdown (running
  jobs finish within the shutdown timeout, the rest are handed back), then the child exits
  with :data:`RESTART` and a new one starts with the new code.
* A child that fails on its own (a syntax error just saved) is started again at the next
  change of a file the restart loop's process has loaded.

The child's worker processes are forked from it, so they run the code it loaded. A module that
only a job imports, inside the job, is not watched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from django.utils import autoreload

from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

#: The child's exit status after a code change (``runserver``'s, too).
RESTART = 3
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds between two looks at the code while a child that failed waits for a fix.
POLL_INTERVAL = 1.0


def run_with_reloader(main: Callable[[], int]) -> int:
    """Run ``main`` (the supervisor) again in a new process each time the code changes."""
    if os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true":
        return _run_watched(main)
    return _restart_loop()


# ----- the child: the supervisor, and the reloader in a thread -----------------------------------


def _run_watched(main: Callable[[], int]) -> int:
    reloader = autoreload.get_reloader()
    changed = threading.Event()

    def on_change(sender: Any, file_path: Any, **kwargs: Any) -> bool:
        if not changed.is_set():
            changed.set()
            logger.info("%s changed: stopping the workers to restart them (--reload)", file_path)
            reloader.stop()
            os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's graceful shutdown
        return True  # handled: Django's reloader must not exit this process itself

    def on_started(sender: Any, **kwargs: Any) -> None:
        # Said once the reloader runs: a file saved before its first look is not a change.
        logger.info("Watching the code for changes (%s, --reload)", type(sender).__name__)

    autoreload.file_changed.connect(on_change, dispatch_uid="django_pgqueue.reloader")
    autoreload.autoreload_started.connect(on_started, dispatch_uid="django_pgqueue.reloader")
    thread = threading.Thread(
        target=reloader.run,
        args=(threading.main_thread(),),
        name="pgqueue-reloader",
        daemon=True,
    )
    thread.start()
    try:
        code = main()
    finally:
        reloader.stop()
        autoreload.file_changed.disconnect(dispatch_uid="django_pgqueue.reloader")
        autoreload.autoreload_started.disconnect(dispatch_uid="django_pgqueue.reloader")
    return RESTART if changed.is_set() else code


# ----- the command's process: start the child again after each change ----------------------------


def _restart_loop() -> int:
    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)  # the supervisor in there tells a second signal apart

    previous = {s: signal.signal(s, forward) for s in _STOP_SIGNALS}
    env = dict(os.environ, **{autoreload.DJANGO_AUTORELOAD_ENV: "true"})
    try:
        while True:
            mtimes = _code_mtimes()
            child = subprocess.Popen(autoreload.get_child_arguments(), env=env, close_fds=False)
            if stopping:  # the signal came while it was starting
                child.send_signal(signal.SIGTERM)
            code = child.wait()
            if stopping:
                return 0 if code == RESTART else code  # stopped while restarting: stopped
            if code == 0:  # --max-jobs with one process: done, as without --reload
                return code
            if code == RESTART:
                logger.info("Restarting run_jobs with the new code (--reload)")
                continue
            logger.error(
                "run_jobs exited with status %d; it starts again when a file changes (--reload)",
                code,
            )
            if not _wait_for_change(mtimes, lambda: stopping):
                return code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _code_mtimes() -> dict[Path, float]:
    """The modification times of the files Django's reloader watches in this process."""
    mtimes = {}
    for path in autoreload.StatReloader().watched_files():
        with contextlib.suppress(OSError):
            mtimes[path] = path.stat().st_mtime
    return mtimes


def _wait_for_change(since: dict[Path, float], stopped: Callable[[], bool]) -> bool:
    """Block until a watched file differs from ``since`` (True) or a stop signal came (False).

    Against the times taken when the failed child started, so a fix saved while it was
    failing counts too."""
    while not stopped():
        if _code_mtimes() != since:
            return True
        time.sleep(POLL_INTERVAL)
    return False
