"""How a benchmark phase reports itself: nothing, or a one-line bar on a terminal."""

from __future__ import annotations

import time
from typing import Protocol, TextIO

from django_pgqueue.printable import printable


class Progress(Protocol):
    """How a phase reports itself; ``live`` asks for ``update`` calls (costs a query each)."""

    live: bool

    def start(self, phase: str, total: int | None = None) -> None: ...

    def update(self, done: int) -> None: ...

    def finish(self, summary: str) -> None: ...


class NoProgress:
    live = False

    def start(self, phase: str, total: int | None = None) -> None:
        pass

    def update(self, done: int) -> None:
        pass

    def finish(self, summary: str) -> None:
        pass


class BarProgress:
    """A one-line progress bar on a terminal; one line per phase anywhere else."""

    width = 24

    def __init__(self, stream: TextIO, enabled: bool = True) -> None:
        self.stream = stream
        self.enabled = enabled
        self.live = enabled and stream.isatty()
        self.phase = ""
        self.total: int | None = None
        self.started = 0.0

    def start(self, phase: str, total: int | None = None) -> None:
        phase = printable(phase)  # a warning names worker ids from rows
        self.phase, self.total, self.started = phase, total, time.monotonic()
        if self.live:
            self._draw(0)
        elif self.enabled:
            self.stream.write(f"{phase} ...\n")
            self.stream.flush()

    def update(self, done: int) -> None:
        if self.live:
            self._draw(done)

    def finish(self, summary: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        line = f"{self.phase:<40} {summary} ({elapsed:.1f} s)"
        self.stream.write(f"\r\033[K{line}\n" if self.live else f"  {line}\n")
        self.stream.flush()

    def _draw(self, done: int) -> None:
        elapsed = time.monotonic() - self.started
        if self.total:
            filled = min(self.width, int(self.width * done / self.total))
            bar = "#" * filled + "-" * (self.width - filled)
            status = f"[{bar}] {done:,}/{self.total:,}"
        else:
            status = "[" + "." * (int(elapsed * 4) % (self.width + 1)) + "]"
        self.stream.write(f"\r\033[K{self.phase:<40} {status} {elapsed:.1f} s")
        self.stream.flush()
