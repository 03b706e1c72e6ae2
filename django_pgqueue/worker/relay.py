"""One listening connection for every worker process of a ``run_jobs --processes P``.

PostgreSQL 15 signals every listening connection of a database at each ``NOTIFY``, whatever
channels it listens on (``SignalBackends``); each wakes, reads the notification queue and drops
what is not for it. With a listening connection per worker process, a job's notification cost
one backend wake-up per process, on the cores the woken worker needs: with 40 processes the
pickup was about twice the 2-process figure (docs/scaling.md). So the supervisor forks a
**relay**: one process, one connection, listening on the shared channels and on the own
channel of each of its workers, that passes each notification over a Unix socket to the
process it is for (a worker's own channel: that worker; the shared ones: every worker).

The rota still sees each worker: a worker's row names the relay's tag (``listener``), and the
worker counts as listening while the relay's connection is open (S12).

A worker connects to the relay as it would to PostgreSQL (:class:`Relayed` is its listener's
:class:`~.listener.Source`): it sends who it is and what it listens to; the relay marks its
row listening, subscribes to its own channel and answers; from then on the worker's loop waits
on the socket. Anything that breaks the path, the relay's connection lost, the relay process
killed, a worker that does not read what it is sent, closes the worker's socket: the worker
reconnects with backoff and, once listening again, looks for jobs once, as after losing its own
connection. The supervisor restarts a relay that dies.

Frames, both ways: a 6-byte header (the channel's length, 2 bytes; the payload's, 4), then
the channel and the payload in UTF-8. A worker's first frame is on :data:`HELLO`; the relay's
answer is on :data:`LISTENING`.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from django_pgqueue import operations
from django_pgqueue.operations import DATABASE_ERRORS
from django_pgqueue.printable import get_logger
from django_pgqueue.sql import NOTIFY_CHANNEL, SCHEDULE_CHANNEL
from django_pgqueue.sql.control import CONTROL_CHANNEL
from django_pgqueue.sql.rota import tag
from django_pgqueue.worker.connection import Backoff, QueueConnection
from django_pgqueue.worker.listener import SOURCE_ERRORS, OwnConnection

logger = get_logger("django_pgqueue.worker")

_HEADER = struct.Struct("!HI")
#: A worker's first frame: its id and the channels it listens on (JSON).
HELLO = "hello"
#: The relay's answer: the worker is marked listening and its channels are subscribed.
LISTENING = "listening"
#: How long a worker waits for the relay's answer (the relay may be reconnecting).
ANSWER_TIMEOUT = 10.0
#: What the relay keeps for a worker that does not read: past it, the worker is disconnected
#: (it reconnects and looks once), rather than the relay waiting for it.
UNREAD_LIMIT = 1 << 20
_READABLE = select.POLLIN | select.POLLHUP | select.POLLERR
#: The shared channels a relay listens on for its workers.
SHARED_CHANNELS = (NOTIFY_CHANNEL, CONTROL_CHANNEL, SCHEDULE_CHANNEL)


def frame(channel: str, payload: str) -> bytes:
    head, body = channel.encode(), payload.encode()
    return _HEADER.pack(len(head), len(body)) + head + body


def unframe(buffer: bytearray) -> list[tuple[str, str]]:
    """The whole frames at the start of ``buffer``, removed from it."""
    frames = []
    start = 0
    while len(buffer) - start >= _HEADER.size:
        head, body = _HEADER.unpack_from(buffer, start)
        end = start + _HEADER.size + head + body
        if len(buffer) < end:
            break
        middle = start + _HEADER.size + head
        channel = bytes(buffer[start + _HEADER.size : middle]).decode()
        frames.append((channel, bytes(buffer[middle:end]).decode()))
        start = end
    del buffer[:start]
    return frames


@dataclass(frozen=True)
class RelayAddress:
    """Where a worker process finds its relay, and the tag its row names (``listener``)."""

    path: str
    tag: str


def relay_id(base: str) -> str:
    """The relay's name (its connection's ``application_name`` starts with its tag)."""
    return f"{base} relay"


# ----- in the worker process --------------------------------------------------------------------


class Relayed:
    """A worker's notifications from its relay (a :class:`~.listener.Source`)."""

    def __init__(self, address: RelayAddress, worker_id: str) -> None:
        self.address = address
        self.worker_id = worker_id
        self.listener: str | None = address.tag
        self._socket: socket.socket | None = None
        self._buffer = bytearray()
        self._pending: list[tuple[str, str]] = []

    def open(self, channels: Sequence[str], own: str) -> None:
        self.close()
        sock = self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(self.address.path)
        hello = {"worker_id": self.worker_id, "channels": list(channels), "own": own}
        sock.sendall(frame(HELLO, json.dumps(hello)))
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the relay closed the connection before listening")
            self._buffer += data
            frames = unframe(self._buffer)
            if frames:
                break
        if frames[0][0] != LISTENING:
            raise ConnectionError(f"the relay answered {frames[0][0]!r}")
        sock.setblocking(False)
        # Anything sent after the answer is read by the loop.
        self._pending = frames[1:]

    def fileno(self) -> int:
        if self._socket is None:
            raise ConnectionError("not connected to the relay")
        return self._socket.fileno()

    def read(self) -> list[tuple[str, str]]:
        sock = self._socket
        if sock is None:
            raise ConnectionError("not connected to the relay")
        arrived, self._pending = self._pending, []
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                break
            if not data:
                raise ConnectionError("the relay closed the connection")
            self._buffer += data
        arrived.extend(unframe(self._buffer))
        return arrived

    def close(self) -> None:
        sock, self._socket = self._socket, None
        self._buffer.clear()
        self._pending = []
        if sock is not None:
            sock.close()


# ----- in the relay process ---------------------------------------------------------------------


@dataclass
class _Worker:
    """A worker process connected to the relay."""

    sock: socket.socket
    fd: int
    received: bytearray = field(default_factory=bytearray)
    unsent: bytearray = field(default_factory=bytearray)
    worker_id: str | None = None  # known from its hello
    channels: frozenset[str] = frozenset()
    own: str | None = None
    answered: bool = False


class Relay:
    """The relay: serves the workers that connect to ``server`` (a listening Unix socket, bound
    by the supervisor: it outlives a relay that dies) until its process is killed."""

    def __init__(self, alias: str, name: str, server: socket.socket) -> None:
        self.name = name
        self.tag = tag(name)
        # Named and read as a worker's own listening connection is; never opened as one (it
        # has no worker row to mark): the relay subscribes it itself (``_connect``).
        self.source = OwnConnection(alias, name)
        self.connection: QueueConnection = self.source.connection
        self.server = server
        self.server.setblocking(False)
        self.workers: dict[int, _Worker] = {}
        #: Each own channel subscribed, by how many connected workers have it (a restart under
        #: the same ``--worker-id`` may overlap the process it replaces).
        self.owns: Counter[str] = Counter()
        self.listening = False
        #: Notifications to pass on. Those that arrive while the relay runs a statement (a
        #: worker's mark and LISTEN) are read by psycopg, which hands them to the handler
        #: (:meth:`_heard_during`): without one they would wait in a backlog no one reads.
        self.heard: list[tuple[str, str]] = []
        self._backoff = Backoff()
        self._connect_at = 0.0

    def serve(self) -> None:
        while True:
            self.turn(1.0)

    def turn(self, timeout: float) -> None:
        """Connect if due, wait up to ``timeout`` seconds, then handle what is ready."""
        now = time.monotonic()
        if not self.listening and now >= self._connect_at:
            self._connect()
        if not self.listening:
            timeout = max(0.0, min(timeout, self._connect_at - time.monotonic()))
        poll = select.poll()
        poll.register(self.server, select.POLLIN)
        pg_fd = self._pg_socket()
        if pg_fd is not None:
            poll.register(pg_fd, select.POLLIN)
        for fd, worker in self.workers.items():
            poll.register(fd, select.POLLIN | (select.POLLOUT if worker.unsent else 0))
        for fd, events in poll.poll(timeout * 1000):
            if fd == pg_fd:
                self._relay()
            elif fd == self.server.fileno():
                self._accept()
            elif fd in self.workers:
                if events & select.POLLOUT:
                    self._flush(self.workers[fd])
                if fd in self.workers and events & _READABLE:
                    self._receive(self.workers[fd])
        self._pass_on()

    # ----- PostgreSQL ---------------------------------------------------------------------------

    def _pg_socket(self) -> int | None:
        if not self.listening:
            return None
        try:
            return self.source.fileno()
        except Exception as exc:
            self._lost(exc)
            return None

    def _connect(self) -> None:
        try:
            operations.listen(self.connection, SHARED_CHANNELS)
            self.connection.raw.add_notify_handler(self._heard_during)
        except (*SOURCE_ERRORS, *DATABASE_ERRORS) as exc:
            # Not only a lost connection: a statement the database refuses (a permission, a
            # schema older than the code) is retried with the same growing delay, never a
            # crash that the supervisor would answer by starting another relay at once.
            self.connection.close()
            self.owns.clear()
            delay = self._backoff.failed()
            self._connect_at = time.monotonic() + delay
            logger.warning("Relay %s: cannot listen (%s); retrying in %.1fs", self.name, exc, delay)
            return
        self.listening = True
        if self._backoff.succeeded() is not None:
            logger.info("Relay %s: listening again", self.name)
        for worker in list(self.workers.values()):
            if self.listening and worker.worker_id is not None and not worker.answered:
                self._answer(worker)

    def _lost(self, exc: BaseException) -> None:
        """The connection broke: every worker is disconnected (each reconnects, and looks for
        jobs once it listens again)."""
        logger.warning("Relay %s: lost its connection (%s); reconnecting", self.name, exc)
        self.listening = False
        self.connection.close()
        self.owns.clear()
        for worker in list(self.workers.values()):
            self._drop(worker, unlisten=False)
        self._connect_at = time.monotonic() + self._backoff.failed()

    def _heard_during(self, notify: psycopg.Notify) -> None:
        self.heard.append((notify.channel, notify.payload))

    def _relay(self) -> None:
        try:
            self.heard.extend(self.source.read())
        except Exception as exc:
            self._lost(exc)

    def _pass_on(self) -> None:
        """Send each notification heard to the workers it is for."""
        heard, self.heard = self.heard, []
        if not self.listening:
            return  # every worker was disconnected: each looks for jobs once it is back
        for channel, payload in heard:
            data = frame(channel, payload)
            for worker in list(self.workers.values()):
                if worker.answered and (channel == worker.own or channel in worker.channels):
                    self._send(worker, data)

    def _answer(self, worker: _Worker) -> None:
        """Subscribe a worker that said hello. A lost connection disconnects every worker; a
        statement the database refuses (the worker's mark, its LISTEN: not the connection)
        disconnects this one alone, which says hello again after its own backoff."""
        try:
            self._subscribe(worker)
        except SOURCE_ERRORS as exc:
            self._lost(exc)
        except DATABASE_ERRORS as exc:
            logger.warning(
                "Relay %s: cannot subscribe worker %s (%s); disconnecting it",
                self.name,
                worker.worker_id,
                exc,
            )
            self._drop(worker)

    def _subscribe(self, worker: _Worker) -> None:
        """Mark the worker listening, LISTEN on its own channel, and answer it."""
        assert worker.worker_id is not None and worker.own is not None
        # Marked first (a wake sent in between waits for a poll), as a worker marks itself.
        operations.mark_listening(self.connection, worker.worker_id, self.tag)
        if not self.owns[worker.own]:
            operations.listen(self.connection, (), own=worker.own)
        self.owns[worker.own] += 1
        worker.answered = True
        self._send(worker, frame(LISTENING, ""))

    # ----- the workers --------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            self.workers[sock.fileno()] = _Worker(sock, sock.fileno())

    def _receive(self, worker: _Worker) -> None:
        try:
            data = worker.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(worker)
            return
        worker.received += data
        for channel, payload in unframe(worker.received):
            if channel != HELLO or worker.worker_id is not None:
                self._drop(worker)  # a worker says hello once, then only listens
                return
            try:
                hello = json.loads(payload)
                worker.worker_id = str(hello["worker_id"])
                channels = frozenset(str(c) for c in hello["channels"])
                worker.own = str(hello["own"])
            except (ValueError, TypeError, KeyError):
                self._drop(worker)  # not one of our workers: never a reason to stop the relay
                return
            worker.channels = channels & frozenset(SHARED_CHANNELS)
            if self.listening:
                self._answer(worker)
            return

    def _send(self, worker: _Worker, data: bytes) -> None:
        worker.unsent += data
        self._flush(worker)

    def _flush(self, worker: _Worker) -> None:
        try:
            sent = worker.sock.send(worker.unsent)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop(worker)
            return
        del worker.unsent[:sent]
        if len(worker.unsent) > UNREAD_LIMIT:
            logger.warning(
                "Relay %s: worker %s does not read its notifications; disconnecting it",
                self.name,
                worker.worker_id,
            )
            self._drop(worker)

    def _drop(self, worker: _Worker, unlisten: bool = True) -> None:
        self.workers.pop(worker.fd, None)
        worker.sock.close()
        if not worker.answered or worker.own is None:
            return
        worker.answered = False
        self.owns[worker.own] -= 1
        if self.owns[worker.own] <= 0:
            del self.owns[worker.own]
            if unlisten and self.listening:
                try:
                    operations.unlisten(self.connection, worker.own)
                except SOURCE_ERRORS as exc:
                    self._lost(exc)
                except DATABASE_ERRORS as exc:  # refused: a notification too many, no harm
                    logger.warning("Relay %s: cannot UNLISTEN %s (%s)", self.name, worker.own, exc)

    def close(self) -> None:
        for worker in list(self.workers.values()):
            worker.sock.close()
        self.workers.clear()
        self.connection.close()


def bind(directory: Path) -> socket.socket:
    """The relay's listening socket, in ``directory`` (the supervisor's, private to it)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(directory / "relay.sock"))
    server.listen(256)
    return server
