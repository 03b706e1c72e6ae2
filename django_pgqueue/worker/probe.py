"""``run_jobs --probe-port``: ``/metrics``, ``/healthz`` and ``/readyz`` for the whole command.

The supervisor binds the port, then forks a small **probe process** that serves it (threads,
``http.server``) until ``run_jobs`` exits; the supervisor itself stays single-threaded, as a
process that forks must. What the probe process answers from:

* :class:`Pulse`, memory shared by every process of the command (an anonymous shared mapping
  made before the first fork): the supervisor's last turn and whether it is stopping, and for
  each worker process slot whether a process runs in it, its loop's last turn and whether it is
  ready (connected, claiming).
* the worker processes' metric files, in the directory the supervisor made and named in
  ``PROMETHEUS_MULTIPROC_DIR`` (:mod:`.metrics`), added up by ``prometheus_client``'s
  multiprocess collector at each scrape.

``/healthz`` (liveness) is 200 while the supervisor's loop and every worker process's loop have
turned within :func:`liveness_bound` (503 names the one that has not); ``/readyz`` is 200 while
every worker process is connected and claiming, 503 once the shutdown starts (the first
SIGTERM/SIGINT) and while a process is not ready (the database unreachable, starting, being
replaced). docs/monitoring.md describes both for Kubernetes.
"""

from __future__ import annotations

import mmap
import socket
import struct
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django_pgqueue.conf import settings
from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

#: ``/healthz`` never calls a loop stuck before it has been still this long (seconds).
LIVENESS_MIN = 30.0
#: How long a request to the probe port may take to arrive (a stalled client is dropped).
REQUEST_TIMEOUT = 5.0
TEXT = "text/plain; charset=utf-8"


def liveness_bound() -> float:
    """Seconds a loop may go without a turn before ``/healthz`` says 503: four heartbeat
    intervals (60 s by default), at least :data:`LIVENESS_MIN`. An idle loop turns at least
    once per heartbeat interval; one waiting for the database turns at least every 10 s."""
    return max(LIVENESS_MIN, 4 * settings.HEARTBEAT_INTERVAL)


class Pulse:
    """Memory the supervisor, its worker processes and the probe process share.

    Doubles, written whole by one process and read by another: the header (the supervisor's
    last turn, stopping), then per slot (a process runs in it, its loop's last turn, ready).
    Times are ``time.monotonic()``, one clock for every process of the machine.
    """

    _HEADER = struct.Struct("dd")
    _SLOT = struct.Struct("ddd")
    _BEAT = struct.Struct("dd")

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._map = mmap.mmap(-1, self._HEADER.size + slots * self._SLOT.size)
        self._HEADER.pack_into(self._map, 0, time.monotonic(), 0.0)

    def _offset(self, index: int) -> int:
        return self._HEADER.size + index * self._SLOT.size

    # ----- the supervisor --------------------------------------------------------------------

    def supervisor_turn(self) -> None:
        self._map[0:8] = struct.pack("d", time.monotonic())

    def stopping(self) -> None:
        """The shutdown began: ``/readyz`` says 503 from now on (safe in a signal handler)."""
        self._map[8:16] = struct.pack("d", 1.0)

    def started(self, index: int) -> None:
        """A process is about to start in slot ``index`` (before the fork): not ready yet."""
        self._SLOT.pack_into(self._map, self._offset(index), 1.0, time.monotonic(), 0.0)

    def exited(self, index: int) -> None:
        self._SLOT.pack_into(self._map, self._offset(index), 0.0, 0.0, 0.0)

    # ----- a worker process ------------------------------------------------------------------

    def beater(self, index: int) -> Callable[[float, bool], None]:
        """What slot ``index``'s worker calls at each turn of its loop: (monotonic now, ready)."""
        offset = self._offset(index) + 8
        pack_into = self._BEAT.pack_into
        target = self._map

        def beat(now: float, ready: bool) -> None:
            pack_into(target, offset, now, 1.0 if ready else 0.0)

        return beat

    # ----- the probe process -----------------------------------------------------------------

    def health(self, bound: float) -> list[str]:
        """What is stuck (empty: every loop turned within ``bound`` seconds)."""
        now = time.monotonic()
        supervisor_turn, _ = self._HEADER.unpack_from(self._map, 0)
        problems = []
        if now - supervisor_turn > bound:
            problems.append(f"supervisor: no turn for {now - supervisor_turn:.0f}s")
        for index in range(self.slots):
            alive, turn, _ = self._SLOT.unpack_from(self._map, self._offset(index))
            if alive and now - turn > bound:
                problems.append(f"worker process {index}: no loop turn for {now - turn:.0f}s")
        return problems

    def readiness(self) -> list[str]:
        """Why the command is not ready (empty: ready)."""
        _, stopping = self._HEADER.unpack_from(self._map, 0)
        if stopping:
            return ["shutting down"]
        problems = []
        for index in range(self.slots):
            alive, _, ready = self._SLOT.unpack_from(self._map, self._offset(index))
            if not alive:
                problems.append(f"worker process {index}: not running (being restarted)")
            elif not ready:
                problems.append(f"worker process {index}: not connected and claiming")
        return problems


def bind(host: str, port: int) -> socket.socket:
    """The probe port's listening socket (raises OSError: in use, bad address...)."""
    return socket.create_server((host, port), reuse_port=False)


def serve(listener: socket.socket, pulse: Pulse, metrics_dir: Path | None) -> None:
    """Serve the probe port until this process is killed (the probe process's whole life).

    ``metrics_dir``: the worker processes' metric files (None: prometheus_client is not
    installed, and ``/metrics`` says so with a 501).
    """
    bound = liveness_bound()
    body_metrics = _metrics_reader(metrics_dir, pulse)

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(*body_metrics())
            elif path == "/healthz":
                problems = pulse.health(bound)
                self._answer(503 if problems else 200, TEXT, _lines(problems))
            elif path == "/readyz":
                problems = pulse.readiness()
                self._answer(503 if problems else 200, TEXT, _lines(problems))
            else:
                self._answer(404, TEXT, b"not found: /metrics, /healthz, /readyz\n")

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("Probe port: " + format, *args)

    server = ThreadingHTTPServer(listener.getsockname()[:2], Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = listener
    server.daemon_threads = True
    server.serve_forever(poll_interval=0.5)


def _lines(problems: list[str]) -> bytes:
    return ("\n".join(problems) if problems else "ok").encode() + b"\n"


def _metrics_reader(metrics_dir: Path | None, pulse: Pulse) -> Callable[[], tuple[int, str, bytes]]:
    if metrics_dir is None:
        missing = b"/metrics needs prometheus_client: pip install 'django-pgqueue-jobs[metrics]'\n"
        return lambda: (501, TEXT, missing)
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.multiprocess import MultiProcessCollector

    class Ready:
        """``pgqueue_worker_ready``: what ``/readyz`` says, as a number Prometheus keeps."""

        def collect(self) -> Iterator[GaugeMetricFamily]:
            yield GaugeMetricFamily(
                "pgqueue_worker_ready",
                "1 while every process of this run_jobs is connected and claiming (/readyz).",
                value=0.0 if pulse.readiness() else 1.0,
            )

    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=str(metrics_dir))  # type: ignore[no-untyped-call]
    registry.register(Ready())

    def read() -> tuple[int, str, bytes]:
        try:
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
        except Exception as exc:  # a file a dying process left half-written, say
            logger.warning("Probe port: could not read the metrics (%s)", exc)
            return 500, TEXT, f"could not read the metrics: {exc}\n".encode()

    return read
