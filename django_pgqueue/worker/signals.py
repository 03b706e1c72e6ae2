"""SIGTERM / SIGINT for a worker process: the first asks for a graceful stop, a second one
(not a duplicate of the first) exits at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

# Signals this close to the first are one request arriving twice (systemd and terminals signal
# the whole process group, and the supervisor forwards the same signal).
SIGNAL_DEDUPE_WINDOW = 1.0


class ShutdownSignals:
    """While installed, SIGTERM and SIGINT call ``stop`` once; a later second signal exits the
    process (the supervisor, or the visibility timeout, recovers its running jobs)."""

    def __init__(self, worker_id: str, stop: Callable[[], None]) -> None:
        self.worker_id = worker_id
        self.stop = stop
        self.first_signal_at: float | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers (only the main thread may; elsewhere this does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self.on_signal)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first_signal_at is None:
            self.first_signal_at = now
            logger.info(
                "Worker %s received %s: finishing running jobs",
                self.worker_id,
                signal.Signals(signum).name,
            )
            self.stop()
        elif now - self.first_signal_at > SIGNAL_DEDUPE_WINDOW:
            logger.warning(
                "Worker %s: second signal, exiting now; running jobs are recovered by the "
                "supervisor (or after the visibility timeout)",
                self.worker_id,
            )
            os._exit(1)
        # Else the same shutdown request delivered twice (to the process group and forwarded
        # by the supervisor): nothing more to do.
