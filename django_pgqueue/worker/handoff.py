"""The queue between the worker loop and its executor threads, which never drops a job in hand.

A claimed job is always somewhere the worker can find it: waiting in the queue, or in the hand
of the executor thread that took it, from the moment it leaves the queue until its outcome is
handed to the loop. A thread that gets an exception in our own code (even one raised
asynchronously, in the middle of taking a job) can ask which job it had in hand
(:meth:`Handoff.in_hand`) and set it right: a plain ``queue.Queue.get()`` interrupted after
taking an item loses that item.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_pgqueue.models import Job


class Handoff:
    def __init__(self) -> None:
        self._ready = threading.Condition(threading.Lock())
        self._queue: deque[Job | None] = deque()  # None: the taking thread is to stop
        # Thread -> the job it took and has not reported (threads, not idents: an ident is
        # reused once its thread has ended).
        self._in_hand: dict[threading.Thread, Job] = {}

    def put(self, item: Job | None) -> None:
        with self._ready:
            self._queue.append(item)
            self._ready.notify()

    def put_all(self, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` in order: one lock and one wake-up per claim, not per job."""
        with self._ready:
            self._queue.extend(jobs)
            self._ready.notify(len(jobs))

    def take(self) -> Job | None:
        """The next job (None: stop), in the calling thread's hand until :meth:`done`."""
        thread = threading.current_thread()
        with self._ready:
            while not self._queue:
                self._ready.wait()
            # In hand before it leaves the queue: an exception between the two leaves it in both
            # places, never in neither.
            item = self._queue[0]
            if item is not None:
                self._in_hand[thread] = item
            self._queue.popleft()
            return item

    def done(self) -> None:
        """The calling thread has handed its job's outcome (or drop) to the loop."""
        with self._ready:
            self._in_hand.pop(threading.current_thread(), None)

    def in_hand(self, thread: threading.Thread | None = None) -> Job | None:
        """The job the calling thread (or ``thread``) took and has not reported, out of its hand
        from now on (None if it had none in hand, or the job is still queued)."""
        with self._ready:
            job = self._in_hand.pop(thread or threading.current_thread(), None)
            if job is None or any(item is job for item in self._queue):
                return None
            return job

    def take_all(self) -> list[Job]:
        """Take every queued job (not the stop markers)."""
        with self._ready:
            jobs = [item for item in self._queue if item is not None]
            self._queue = deque(item for item in self._queue if item is None)
            return jobs
