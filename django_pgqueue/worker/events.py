"""The worker loop's events: one queue every thread puts into, and one place the loop waits.

The loop waits for whichever comes first: an event put here (an outcome, a signal, a stop), its
own timer, or the listener's socket becoming readable (a ``NOTIFY``). Waiting on the socket in
the loop's own thread, not in a thread that then wakes the loop, saves a thread wake-up and a
GIL hand-over on every pickup: after an idle pause each costs a tenth of a millisecond or more
on a small virtual machine (docs/performance.md, "The pickup after an idle pause").

While the loop waits on a socket, :meth:`Events.put` also writes a byte to a pipe the loop
waits on too, so an event never waits for the timeout; the rest of the time ``put`` is only
the queue's.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
from typing import Any


class Events:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pipe: tuple[int, int] | None = None  # (read, write), made on the first wait
        self._waiting = False

    def put(self, event: Any) -> None:
        """Queue ``event`` (any thread, or a signal handler)."""
        self._queue.put(event)
        if self._waiting and self._pipe is not None:
            # Full: the loop is being woken already.
            with contextlib.suppress(BlockingIOError):
                os.write(self._pipe[1], b"\0")

    def get(self, timeout: float) -> Any:
        """The next event, blocking up to ``timeout`` seconds (``queue.Empty`` if none)."""
        return self._queue.get(timeout=timeout)

    def get_nowait(self) -> Any:
        return self._queue.get_nowait()

    def wait(self, timeout: float, socket: int) -> None:
        """Block up to ``timeout`` seconds, until an event is queued or ``socket`` (a file
        descriptor) is readable; events are left in the queue."""
        pipe = self._pipe
        if pipe is None:
            pipe = self._pipe = os.pipe()
            for end in pipe:
                os.set_blocking(end, False)
        # Waiting before looking: an event put after the look writes to the pipe.
        self._waiting = True
        try:
            if not self._queue.empty():
                return
            poll = select.poll()
            poll.register(socket, select.POLLIN)
            poll.register(pipe[0], select.POLLIN)
            for fd, _ in poll.poll(timeout * 1000):
                if fd == pipe[0]:
                    self._empty_pipe()
        finally:
            self._waiting = False

    def _empty_pipe(self) -> None:
        assert self._pipe is not None
        with contextlib.suppress(BlockingIOError):
            while os.read(self._pipe[0], 4096):
                pass

    def close(self) -> None:
        """Close the pipe (the worker has stopped; later events only go to the queue)."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            for end in pipe:
                os.close(end)
