"""LISTEN for committed jobs and wake the worker loop.

A committed enqueue sends one ``NOTIFY pgqueue, '<queue> <ticket> <jobs>'`` per queue and
transaction (after it: ``sql.enqueue.WAKE``; the INSERT trigger for other writers), which wakes
the worker of the rota the ticket picks (:mod:`~django_pgqueue.worker.rota`); runtime control
(``Job.cancel()`` of a running job) sends ``NOTIFY pgqueue_control``, a change of periodic
schedules ``NOTIFY pgqueue_schedules``. The listener has a connection of its own, and turns each
relevant notification into an event for the worker loop.

The listener's thread opens the connection, subscribes, and reconnects with backoff when it is
lost; once it listens, the worker loop waits on its socket itself and reads what arrives
(:meth:`Listener.wait`), so a ``NOTIFY`` wakes the thread that claims, with no hand-over
between threads. A connection the loop finds broken goes back to the thread.

Where the notifications come from is the listener's :class:`Source`: a PostgreSQL connection
of the worker's own (:class:`OwnConnection`), or the relay that listens once for every process
of its ``run_jobs --processes`` (:class:`~.relay.Relayed`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from django_pgqueue import operations
from django_pgqueue.operations import CONNECTION_ERRORS
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import NOTIFY_CHANNEL, SCHEDULE_CHANNEL
from django_pgqueue.sql.control import CONTROL_CHANNEL
from django_pgqueue.sql.rota import channel, listener_name
from django_pgqueue.worker.connection import Backoff, QueueConnection
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.rota import Wake

logger = get_logger("django_pgqueue.worker")

#: What a source raises when it is lost or cannot be reached: reconnect with backoff.
SOURCE_ERRORS: tuple[type[Exception], ...] = (*CONNECTION_ERRORS, OSError)


class Source(Protocol):
    """Where a listener's notifications come from."""

    #: The tag of the listening connection when it is another process's (``listener`` in the
    #: worker's row), None for the worker's own.
    listener: str | None

    def open(self, channels: Sequence[str], own: str) -> None:
        """Subscribe to ``channels`` and the worker's ``own`` channel, and mark the worker
        listening (raises :data:`SOURCE_ERRORS` when it cannot)."""

    def fileno(self) -> int:
        """What to wait on for notifications (raises when broken)."""

    def read(self) -> Iterable[tuple[str, str]]:
        """The notifications that arrived, as (channel, payload) (raises when broken)."""

    def close(self) -> None: ...


class OwnConnection:
    """A PostgreSQL connection of the worker's own, named for the rota (``listener_name``)."""

    listener: str | None = None

    def __init__(self, alias: str, worker_id: str) -> None:
        self.worker_id = worker_id
        self.connection = QueueConnection(alias, listener_name(worker_id))

    def open(self, channels: Sequence[str], own: str) -> None:
        # Marked first (a wake sent in between waits for a poll): the connection's last
        # statement stays the LISTEN, which is how pg_stat_activity shows a listener.
        operations.mark_listening(self.connection, self.worker_id)
        operations.listen(self.connection, channels, own=own)

    def fileno(self) -> int:
        return self.connection.raw.pgconn.socket

    def read(self) -> list[tuple[str, str]]:
        conn = self.connection.raw
        pgconn = conn.pgconn
        pgconn.consume_input()
        encoding = conn.info.encoding
        arrived = []
        while (notify := pgconn.notifies()) is not None:
            arrived.append((notify.relname.decode(encoding), notify.extra.decode(encoding)))
        return arrived

    def close(self) -> None:
        self.connection.close()


#: How often a busy loop (one that never waits) reads the listener's socket: its notifications
#: only wake a loop that is awake anyway, and reading costs a system call.
READ_INTERVAL = 0.01


class Listener(threading.Thread):
    def __init__(
        self,
        alias: str,
        worker_id: str,
        queues: Sequence[str] | None,
        wake: Callable[[], None],
        control: Callable[[str], None] | None = None,
        on_schedules: Callable[[], None] | None = None,
        on_jobs: Callable[[Wake], None] | None = None,
        source: Source | None = None,
    ) -> None:
        super().__init__(name=f"pgqueue-listener-{worker_id}", daemon=True)
        self.worker_id = worker_id
        self.source: Source = source or OwnConnection(alias, worker_id)
        self.queues = frozenset(queues) if queues else None
        self.wake = wake
        self.control = control
        self.on_schedules = on_schedules
        #: A job notification with a ticket, for the rota to decide (None: wake for each).
        self.on_jobs = on_jobs
        #: This worker's own channel: a notification there picked it (``sql.enqueue.WAKE``).
        self.channel = channel(worker_id)
        self.stopping = threading.Event()
        self.listening = threading.Event()
        #: The source, while the loop reads it (None: being (re)connected).
        self._handed: Source | None = None
        #: Set when the loop found the connection broken (``_lost_by``), or to stop.
        self._lost = threading.Event()
        self._lost_by: BaseException | None = None
        self._read_at = 0.0  # when a busy loop reads the socket next
        self._reconnecting = False

    def stop(self) -> None:
        self.stopping.set()
        self._lost.set()

    def wait(self, events: Events, timeout: float) -> float:
        """In the loop's thread: wait up to ``timeout`` seconds for an event or a notification,
        then turn what arrived into events (wake, control). Returns how long the loop is still
        to wait on ``events`` alone: ``timeout`` while not listening (being reconnected)."""
        fd = self._socket()
        if fd is None:
            return timeout
        if timeout > 0:
            events.wait(timeout, fd)
            self._read_at = 0.0
        now = time.monotonic()
        if now >= self._read_at:
            self._read()
            self._read_at = now + READ_INTERVAL
        return 0.0

    def _socket(self) -> int | None:
        """The source's socket (None: not listening)."""
        source = self._handed
        if source is None:
            return None
        try:
            return source.fileno()
        except Exception as exc:
            self._give_back(exc)
            return None

    def _read(self) -> None:
        """In the loop's thread: take the notifications that arrived, and act on each (wake the
        loop, a control message, schedules changed). A broken connection goes back to the
        listener's thread, which reconnects."""
        source = self._handed
        if source is None:
            return
        try:
            for channel, payload in source.read():
                self._dispatch(channel, payload)
        except Exception as exc:
            self._give_back(exc)

    def _give_back(self, exc: BaseException) -> None:
        self._handed = None
        self._lost_by = exc
        self._lost.set()

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == CONTROL_CHANNEL:
            if self.control is not None:
                self.control(payload)
        elif channel == SCHEDULE_CHANNEL:
            if self.on_schedules is not None:
                self.on_schedules()
        else:
            wake = Wake.parse(payload)
            if channel == self.channel:
                wake = dataclasses.replace(wake, direct=True)
            if self.queues is not None and wake.queue not in self.queues:
                return
            if wake.ticket is None or self.on_jobs is None:
                self.wake()
            else:
                self.on_jobs(wake)

    def run(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                self._listen()
            except SOURCE_ERRORS as exc:
                self.listening.clear()
                self._reconnecting = True
                logger.warning(
                    "Worker %s: listener lost its connection (%s); reconnecting",
                    self.worker_id,
                    exc,
                )
                self.source.close()
                backoff.sleep(self.stopping)
            except Exception:
                self.listening.clear()
                self._reconnecting = True
                logger.exception("Worker %s: listener failed; restarting it", self.worker_id)
                self.source.close()
                backoff.sleep(self.stopping)
            else:
                backoff.succeeded()
        self.source.close()

    def _listen(self) -> None:
        channels = [NOTIFY_CHANNEL]
        if self.control is not None:
            channels.append(CONTROL_CHANNEL)
        if self.on_schedules is not None:
            channels.append(SCHEDULE_CHANNEL)
        self.source.open(channels, self.channel)
        if self.on_schedules is not None:
            self.on_schedules()
        self._lost.clear()
        self._lost_by = None
        if self.stopping.is_set():
            return
        # The loop waits on the socket from here, until it finds the connection broken.
        self._handed = self.source
        self.listening.set()
        if self._reconnecting:
            self._reconnecting = False
            logger.info("Worker %s: listener listening again", self.worker_id)
        # Notifications may have been missed while (re)connecting: look once.
        self.wake()
        if self.control is not None:
            self.control("reconnected")
        self._lost.wait()
        self._handed = None
        self.listening.clear()
        lost_by = self._lost_by
        if lost_by is not None and not self.stopping.is_set():
            raise lost_by
