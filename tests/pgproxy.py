"""A TCP proxy in front of PostgreSQL that can lose one answer, for the tests.

Armed, it lets the first statement that changed rows (a ``CommandComplete`` of ``UPDATE n``,
``n`` > 0: a worker's claim, when nothing else updates rows through it) run and commit, then
swallows the server's whole answer, up to and including the ``ReadyForQuery`` that follows
the commit, and cuts both sides of that connection: the statement took effect, and its
client never learns it. Everything else is forwarded byte for byte.

Clients must not ask for TLS or GSS encryption (``PGSSLMODE=disable``,
``PGGSSENCMODE=disable``): the proxy reads the server's messages, so they must be plain.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from tests.private_cluster import free_port


class LosingProxy:
    def __init__(self, server_port: int, server_host: str = "127.0.0.1") -> None:
        self.server = (server_host, server_port)
        self.port = free_port()
        self._armed = threading.Event()
        #: Set once an answer has been swallowed and its connection cut.
        self.fired = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="pgproxy accept").start()

    def arm(self) -> None:
        """Lose the answer of the next statement that updates rows (once)."""
        self.fired.clear()
        self._armed.set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.server)
            except OSError:  # the server is down: so is this client's connection
                _close(client)
                continue
            with self._lock:
                if self._closed:
                    _close(client)
                    _close(server)
                    return
                self._sockets += [client, server]
            threading.Thread(target=self._to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._to_client, args=(server, client), daemon=True).start()

    @staticmethod
    def _to_server(client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                server.sendall(data)
        except OSError:
            pass
        _close(client)
        _close(server)

    def _to_client(self, server: socket.socket, client: socket.socket) -> None:
        """Forward the server's messages (a type byte, then a length that counts itself)."""
        buffer = b""
        swallowing = False
        try:
            while data := server.recv(65536):
                buffer += data
                while len(buffer) >= 5:
                    length = struct.unpack("!I", buffer[1:5])[0]
                    if len(buffer) < 1 + length:
                        break
                    kind, message, buffer = buffer[:1], buffer[: 1 + length], buffer[1 + length :]
                    if not swallowing and self._armed.is_set() and _updated_rows(kind, message):
                        self._armed.clear()
                        swallowing = True
                    if not swallowing:
                        client.sendall(message)
                    elif kind == b"Z":  # ReadyForQuery: the transaction has committed
                        self.fired.set()
                        raise ConnectionAbortedError
        except OSError:
            pass
        _close(server)
        _close(client)


def _updated_rows(kind: bytes, message: bytes) -> bool:
    if kind != b"C":
        return False
    tag = message[5:].rstrip(b"\0").split()
    return len(tag) == 2 and tag[0] == b"UPDATE" and int(tag[1]) > 0


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
