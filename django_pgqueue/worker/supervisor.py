"""Several worker processes under one supervisor (``run_jobs --processes P``).

The supervisor forks P children, each running a :class:`Worker`, and restarts a child that dies
(immediately after a clean ``--max-jobs`` exit, with growing delays after crashes so a crash
loop doesn't spin). SIGTERM/SIGINT are forwarded to the children for a graceful shutdown; a
second signal kills them at once. Children get SIGTERM if the supervisor itself dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import signal
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.db import connections

from django_pgqueue.worker.loop import SIGNAL_DEDUPE_WINDOW, Worker

logger = logging.getLogger("django_pgqueue.worker")

RESTART_DELAY_MAX = 30.0
# A child that ran this long before dying counts as healthy: its restart delay starts over.
HEALTHY_RUN = 60.0
_PR_SET_PDEATHSIG = 1


@dataclass
class _Child:
    index: int
    pid: int
    started: float
    failures: int = 0


class Supervisor:
    def __init__(self, processes: int, **worker_options: Any) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.processes = processes
        self.worker_options = worker_options
        self.burst = bool(worker_options.get("burst"))
        self.base_id = worker_options.pop("worker_id", None)
        self.children: dict[int, _Child] = {}
        self.restarts: list[tuple[float, int, int]] = []  # (when, index, failures)
        self.stopping = False
        self.first_signal_at: float | None = None
        self.failed = False

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            logger.info("Supervisor %d starting %d worker processes", os.getpid(), self.processes)
            for index in range(self.processes):
                self._spawn(index, failures=0)
            self._watch()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 1 if self.failed and self.burst else 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first_signal_at is None:
            self.first_signal_at = now
            logger.info("Supervisor received %s: stopping workers", signal.Signals(signum).name)
            self.stopping = True
            self._signal_children(signal.SIGTERM)
        elif now - self.first_signal_at > SIGNAL_DEDUPE_WINDOW:
            logger.warning("Second signal: killing workers now")
            self._signal_children(signal.SIGKILL)
            os._exit(1)

    def _signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _spawn(self, index: int, failures: int) -> None:
        # Never share a database connection across fork.
        connections.close_all()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with_parent()
                random.seed()
                worker_id = f"{self.base_id}.{index}" if self.base_id else None
                code = Worker(worker_id=worker_id, **self.worker_options).run()
            except BaseException:
                logger.exception("Worker process crashed")
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = _Child(
            index=index, pid=pid, started=time.monotonic(), failures=failures
        )

    def _watch(self) -> None:
        while self.children or (self.restarts and not self.stopping):
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
            if pid == 0:
                self._restart_due()
                time.sleep(0.1)
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self._child_exited(child, status)

    def _child_exited(self, child: _Child, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        if self.stopping:
            logger.info("Worker process %d exited (%d)", child.pid, code)
            return
        if code == 0 and self.burst:
            logger.info("Worker process %d finished", child.pid)
            return
        if code == 0:
            # Reached --max-jobs: a fresh process at once.
            self.restarts.append((time.monotonic(), child.index, 0))
            return
        self.failed = True
        lived = time.monotonic() - child.started
        failures = 1 if lived >= HEALTHY_RUN else child.failures + 1
        delay = min(RESTART_DELAY_MAX, 0.5 * 2 ** (failures - 1))
        how = f"signal {-code}" if code < 0 else f"status {code}"
        logger.error(
            "Worker process %d died (%s) after %.1fs; restarting in %.1fs",
            child.pid,
            how,
            lived,
            delay,
        )
        self.restarts.append((time.monotonic() + delay, child.index, failures))

    def _restart_due(self) -> None:
        if self.stopping:
            self.restarts.clear()
            return
        now = time.monotonic()
        due = [r for r in self.restarts if r[0] <= now]
        self.restarts = [r for r in self.restarts if r[0] > now]
        for _, index, failures in due:
            self._spawn(index, failures)


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the supervisor dies, so no worker outlives it unsupervised."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
