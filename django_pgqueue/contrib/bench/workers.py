"""The workers a benchmark measures: the real ``run_jobs`` command, in forked children (and,
for ``--compare``, the floor's and pgqueuer's drains, each a function in a forked child)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from django.core.management import call_command

from django_pgqueue.pools import close_pools


class ForkedProcess:
    """:meth:`main` in a forked child, reaped with its CPU time (``wait4``'s rusage)."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.cpu_seconds = 0.0

    def main(self) -> None:
        """The child's work; returning is exit status 0, an exception 1."""
        raise NotImplementedError

    def start(self) -> None:
        # Never share a database connection (or a pool) across fork.
        close_pools()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: run the command, never return into the caller
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                self.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        self.pid = pid

    def poll(self) -> int | None:
        if self.exit_code is None and self.pid is not None:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.exit_code = os.waitstatus_to_exitcode(status)
                # The child's and its reaped children's (the supervisor reaps its workers).
                self.cpu_seconds = rusage.ru_utime + rusage.ru_stime
        return self.exit_code

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.exit_code

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a graceful stop), then SIGKILL if it has not exited in ``timeout``."""
        if self.pid is None or self.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        if self.wait(timeout) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(5.0)

    def rss_kib(self, key: str = "VmRSS") -> int:
        """``VmRSS`` (or ``VmHWM``...) of the child from /proc, in KiB; 0 when unavailable."""
        with contextlib.suppress(OSError), open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0


class WorkerProcess(ForkedProcess):
    """``manage.py run_jobs`` in a forked child: the real command, with the bench jobs known."""

    def __init__(self, **run_jobs_options: Any) -> None:
        super().__init__()
        self.options = run_jobs_options

    def main(self) -> None:
        call_command("run_jobs", verbosity=0, **self.options)


class FunctionProcess(ForkedProcess):
    """``target(*args)`` in a forked child (it opens its own connections: none is inherited)."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        super().__init__()
        self.target = target
        self.args = args

    def main(self) -> None:
        self.target(*self.args)
