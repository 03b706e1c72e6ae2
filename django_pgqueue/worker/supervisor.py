"""Worker processes under one supervisor (``run_jobs``, with one process or ``--processes P``).

The supervisor forks P children, each running a :class:`Worker`, and restarts a child that dies
(immediately after a clean ``--max-jobs`` exit, or one that stops a job thread or task the
worker abandoned; with growing delays after crashes so a crash loop doesn't spin). It runs no job
itself, so a job that kills its process (``os._exit``, a segfault, the OOM killer) never takes
``run_jobs`` down. Before restarting a child that died, it reads the child's journal
(:mod:`~django_pgqueue.worker.journal`) and, on its own connection, writes the outcomes the
child had not written, charges an attempt to exactly the jobs that were running, and hands back
the ones merely claimed. SIGTERM/SIGINT are forwarded to the children for a graceful shutdown; a
second signal kills them at once and hands their running jobs back interrupted before exiting
(a third exits without waiting for that). Children get SIGTERM if the supervisor itself dies.

With several processes (and ``PGQUEUE_LISTEN`` on) it forks the **relay** too: one connection
that listens for every worker process and passes each its notifications
(:mod:`~django_pgqueue.worker.relay`), so a ``NOTIFY`` wakes one PostgreSQL backend for the
whole ``run_jobs``, not one per process. A relay that dies is restarted; its workers reconnect.

With a probe port (``--probe-port``, ``PGQUEUE_PROBE_PORT``) it binds the port, forks the probe
process that serves it (:mod:`~django_pgqueue.worker.probe`), shares a :class:`~.probe.Pulse`
with every process and makes the directory their metrics go to; it removes that directory when
it exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.util
import logging
import os
import random
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from django_pgqueue import rules
from django_pgqueue.conf import settings
from django_pgqueue.operations import DATABASE_ERRORS
from django_pgqueue.pools import close_pools, describe
from django_pgqueue.printable import get_logger
from django_pgqueue.sql.rota import tag
from django_pgqueue.worker import probe, relay
from django_pgqueue.worker.connection import QueueConnection
from django_pgqueue.worker.journal import Journal, recover
from django_pgqueue.worker.loop import REPLACE_ME, Worker, default_worker_id
from django_pgqueue.worker.probe import Pulse
from django_pgqueue.worker.relay import Relay, RelayAddress, relay_id
from django_pgqueue.worker.signals import SIGNAL_DEDUPE_WINDOW

logger = get_logger("django_pgqueue.worker")

#: New container objects (net of those freed) that start a young collection in a worker process.
GC_YOUNG_THRESHOLD = 10_000

RESTART_DELAY_MAX = 30.0
# A child that ran this long before dying counts as healthy: its restart delay starts over.
HEALTHY_RUN = 60.0
_PR_SET_PDEATHSIG = 1
# Tries at setting right a dead child's jobs (the database may be down too) before leaving
# them to the stale-job recovery of the claim.
RECOVERY_ATTEMPTS = 5


@dataclass
class _Child:
    index: int
    pid: int
    started: float
    worker_id: str
    journal: Path
    failures: int = 0


class Supervisor:
    def __init__(self, processes: int, **worker_options: Any) -> None:
        # Checked here too, so that a bad option fails at once rather than in every child.
        rules.check_worker_options(
            worker_options.get("queues"),
            processes=processes,
            **{k: v for k, v in worker_options.items() if k in rules.WORKER_OPTIONS},
        )
        self.processes = processes
        self.worker_options = worker_options
        self.burst = bool(worker_options.get("burst"))
        self.base_id = worker_options.pop("worker_id", None)
        probe_port = worker_options.pop("probe_port", None)
        probe_host = worker_options.pop("probe_host", None)
        self.probe_port: int | None = probe_port if probe_port is not None else settings.PROBE_PORT
        self.probe_host: str = probe_host if probe_host is not None else settings.PROBE_HOST
        self.pulse: Pulse | None = None
        self.probe_listener: socket.socket | None = None
        self.probe_pid: int | None = None
        #: Where the worker processes' metrics go (with a probe port and prometheus_client).
        self.metrics_dir: Path | None = None
        self.children: dict[int, _Child] = {}
        self.restarts: list[tuple[float, int, int]] = []  # (when, index, failures)
        self.stopping = False
        self.first_signal_at: float | None = None
        self.killing = False  # a second signal: children killed, their jobs still set right
        self.failed = False
        self.journals = Path(tempfile.mkdtemp(prefix="pgqueue-journals-"))
        self.connection = QueueConnection(settings.DATABASE, f"pgqueue supervisor {os.getpid()}")
        listen = worker_options.get("listen")
        #: One listening connection for the worker processes (several, listening, not a burst).
        self.relay_server: socket.socket | None = None
        self.relay_address: RelayAddress | None = None
        self.relay_name = relay_id(self.base_id or default_worker_id())
        self.relay_pid: int | None = None
        if processes > 1 and not self.burst and (settings.LISTEN if listen is None else listen):
            try:
                self.relay_server = relay.bind(self.journals)
            except OSError as exc:  # a temporary directory too deep for a socket's path, say
                logger.warning(
                    "Supervisor %d: no relay (%s); each worker process listens itself",
                    os.getpid(),
                    exc,
                )
            else:
                self.relay_address = RelayAddress(
                    self.relay_server.getsockname(), tag(self.relay_name)
                )

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        previous_dir = os.environ.get(_MULTIPROC_DIR)
        try:
            if self.probe_port is not None:
                self._open_probe(self.probe_port)
            logger.info("Supervisor %d starting %d worker processes", os.getpid(), self.processes)
            if self.relay_server is not None:
                self._spawn_relay()
            for line in describe(self.worker_options.get("threads") or 1, self.processes):
                logger.info("Supervisor %d: %s", os.getpid(), line)
            for index in range(self.processes):
                self._spawn(index, failures=0)
            self._watch()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.connection.close()
            self._close_relay()
            shutil.rmtree(self.journals, ignore_errors=True)
            self._close_probe(previous_dir)
        return 1 if self.killing or (self.failed and self.burst) else 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first_signal_at is None:
            self.first_signal_at = now
            logger.info(
                "Supervisor %d received %s: stopping workers",
                os.getpid(),
                signal.Signals(signum).name,
            )
            self.stopping = True
            if self.pulse is not None:
                self.pulse.stopping()
            self._signal_children(signal.SIGTERM)
        elif now - self.first_signal_at <= SIGNAL_DEDUPE_WINDOW:
            return  # the same request delivered twice (process group, then forwarded)
        elif not self.killing:
            # Kill now, but still set their jobs right (in _watch, not in a signal handler):
            # the running ones are charged an attempt, the unstarted ones handed back.
            logger.warning(
                "Supervisor %d: second signal, killing workers now; their jobs are handed "
                "back (another signal exits without that)",
                os.getpid(),
            )
            self.killing = True
            self._signal_children(signal.SIGKILL)
        else:
            logger.warning(
                "Supervisor %d: third signal, exiting now; jobs still in hand are reclaimed later",
                os.getpid(),
            )
            os._exit(1)

    # ----- the probe port ----------------------------------------------------------------------

    def _open_probe(self, port: int) -> None:
        """Bind the probe port and start the probe process; a port that cannot be bound is
        logged, and the workers run without it (a setting never stops them)."""
        try:
            self.probe_listener = probe.bind(self.probe_host, port)
        except OSError as exc:
            logger.error(
                "Supervisor %d: cannot serve the probe port on %s:%d (%s); running without "
                "/metrics, /healthz and /readyz",
                os.getpid(),
                self.probe_host,
                port,
                exc,
            )
            return
        self.pulse = Pulse(self.processes)
        if importlib.util.find_spec("prometheus_client") is None:
            logger.error(
                "Supervisor %d: the probe port serves /healthz and /readyz but not /metrics: "
                "prometheus_client is not installed (pip install 'django-pgqueue-jobs[metrics]')",
                os.getpid(),
            )
        else:
            # Set before the worker processes import prometheus_client: their values go to
            # files there, which the probe process adds up.
            self.metrics_dir = Path(tempfile.mkdtemp(prefix="pgqueue-metrics-", dir=_memory_dir()))
            os.environ[_MULTIPROC_DIR] = str(self.metrics_dir)
            # Imported once, here, before the forks: every process shares the modules instead
            # of importing them itself (60 ms of CPU each, measured: docs/performance.md).
            import prometheus_client.multiprocess  # noqa: F401

            import django_pgqueue.worker.metrics  # noqa: F401
        self._spawn_probe()
        logger.info(
            "Supervisor %d: probe port on http://%s:%d (/metrics, /healthz, /readyz)",
            os.getpid(),
            self.probe_host,
            port,
        )

    def _spawn_probe(self) -> None:
        assert self.probe_listener is not None and self.pulse is not None
        listener, pulse, metrics_dir = self.probe_listener, self.pulse, self.metrics_dir
        # It answers 503 on /readyz during the whole shutdown.
        self.probe_pid = self._fork_helper(
            "Probe", lambda: probe.serve(listener, pulse, metrics_dir)
        )

    def _fork_helper(self, name: str, serve: Callable[[], None]) -> int:
        """Fork a helper process (the probe, the relay) that runs ``serve`` until the
        supervisor kills it: the stop signals the process group gets are not for it, and it
        dies with the supervisor."""
        close_pools()
        self.connection.close()
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                _die_with_parent(signal.SIGKILL)
                serve()
            except BaseException:
                logger.exception("%s process %d crashed", name, os.getpid())
            finally:
                logging.shutdown()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        return pid

    def _close_probe(self, previous_dir: str | None) -> None:
        _kill(self.probe_pid)
        self.probe_pid = None
        if self.probe_listener is not None:
            self.probe_listener.close()
        if self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            if previous_dir is None:
                os.environ.pop(_MULTIPROC_DIR, None)
            else:
                os.environ[_MULTIPROC_DIR] = previous_dir

    def _helper_exited(self, name: str, status: int, spawn: Callable[[], None]) -> None:
        """A helper process (the probe, the relay) died: another, unless stopping."""
        if self.stopping:
            return
        logger.error(
            "Supervisor %d: the %s process died (%s); starting another",
            os.getpid(),
            name,
            _describe_exit(os.waitstatus_to_exitcode(status)),
        )
        time.sleep(0.5)  # a helper that dies at once must not spin
        spawn()

    # ----- the relay ---------------------------------------------------------------------------

    def _spawn_relay(self) -> None:
        server = self.relay_server
        assert server is not None

        def serve() -> None:
            if self.probe_listener is not None:
                self.probe_listener.close()
            # Workers still stopping may need their notifications (a cancel): it serves until
            # the supervisor kills it, after them.
            Relay(settings.DATABASE, self.relay_name, server).serve()

        self.relay_pid = self._fork_helper("Relay", serve)
        logger.info(
            "Supervisor %d: relay process %d listens for the worker processes",
            os.getpid(),
            self.relay_pid,
        )

    def _close_relay(self) -> None:
        _kill(self.relay_pid)
        self.relay_pid = None
        if self.relay_server is not None:
            self.relay_server.close()

    def _signal_children(self, signum: int) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _spawn(self, index: int, failures: int) -> None:
        # Never share a database connection across fork, nor a connection pool (docs/worker.md,
        # "Connections"): the run's system checks may have opened one.
        close_pools()
        self.connection.close()
        journal = self.journals / f"worker-{index}.journal"
        if self.pulse is not None:
            self.pulse.started(index)
        read_end, write_end = os.pipe()
        # Stop signals wait until the child is known: otherwise one arriving mid-fork runs the
        # supervisor's handler inside the child, which swallows it (deduped as the same
        # request) and serves on, and run_jobs waits for it forever.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            worker_id = f"process {os.getpid()}"
            try:
                os.close(read_end)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
                _die_with_parent()
                random.seed()
                worker_id = self._worker_id(index)
                os.write(write_end, worker_id.encode())
                os.close(write_end)
                if self.relay_server is not None:
                    self.relay_server.close()  # the relay's, not a worker's
                _tune_collector()
                code = Worker(
                    worker_id=worker_id,
                    journal=Journal(journal),
                    relay=self.relay_address,
                    **self.worker_options,
                    **self._probe_options(index),
                ).run()
            except BaseException:
                logger.exception("Worker %s crashed", worker_id)
            finally:
                logging.shutdown()
                os._exit(code)
        try:
            os.close(write_end)
            with os.fdopen(read_end, "rb") as pipe:
                worker_id = pipe.read().decode() or f"?{pid}"
            self.children[pid] = _Child(
                index=index,
                pid=pid,
                started=time.monotonic(),
                worker_id=worker_id,
                journal=journal,
                failures=failures,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        if self.stopping:  # the signal came while this child was forking: it missed the forward
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if self.killing else signal.SIGTERM)

    def _probe_options(self, index: int) -> dict[str, Any]:
        """In worker process ``index``: its pulse and its metrics, with a probe port."""
        if self.probe_listener is not None:
            self.probe_listener.close()  # the probe process's, not a worker's
        if self.pulse is None:
            return {}
        options: dict[str, Any] = {"pulse": self.pulse.beater(index)}
        if self.metrics_dir is not None:
            from django_pgqueue.worker.metrics import WorkerMetrics

            options["metrics"] = WorkerMetrics(
                self.worker_options.get("threads") or 1,
                self.worker_options.get("async_concurrency") or settings.ASYNC_CONCURRENCY,
            )
        return options

    def _watch(self) -> None:
        while self.children or (self.restarts and not self.stopping):
            if self.pulse is not None:
                self.pulse.supervisor_turn()
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
            if pid == 0:
                self._restart_due()
                time.sleep(0.1)
                continue
            if pid == self.probe_pid:
                self.probe_pid = None
                self._helper_exited("probe", status, self._spawn_probe)
                continue
            if pid == self.relay_pid:
                self.relay_pid = None
                self._helper_exited("relay", status, self._spawn_relay)
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self._child_exited(child, status)

    def _worker_id(self, index: int) -> str:
        """``--worker-id ID``: ID with one process, ``ID.N`` with several; else HOSTNAME:PID."""
        if not self.base_id:
            return default_worker_id()
        return self.base_id if self.processes == 1 else f"{self.base_id}.{index}"

    def _child_exited(self, child: _Child, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        how = _describe_exit(code)
        if self.pulse is not None:
            self.pulse.exited(child.index)
        if self.metrics_dir is not None:
            from prometheus_client import multiprocess

            # Its gauges (busy, capacity) leave the sums; its counters stay in them.
            multiprocess.mark_process_dead(child.pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
        self._recover(child, how)
        if self.stopping:
            logger.info("Worker process %d (%s) exited (%d)", child.pid, child.worker_id, code)
            return
        if code == REPLACE_ME:
            # It ended to stop a job thread (or an async job's task) it had abandoned: a fresh
            # process at once, with --processes 1 and in a burst too.
            logger.info(
                "Worker process %d (%s) replaced: it exited to stop an abandoned job thread or "
                "task",
                child.pid,
                child.worker_id,
            )
            self.restarts.append((time.monotonic(), child.index, 0))
            return
        if code == 0 and (self.burst or self.processes == 1):
            # Burst: no runnable job left. One process: --max-jobs reached, and run_jobs exits
            # as it would unsupervised (with --processes P, the process is replaced).
            logger.info("Worker process %d (%s) finished", child.pid, child.worker_id)
            return
        if code == 0:
            # Reached --max-jobs: a fresh process at once.
            self.restarts.append((time.monotonic(), child.index, 0))
            return
        self.failed = True
        lived = time.monotonic() - child.started
        failures = 1 if lived >= HEALTHY_RUN else child.failures + 1
        delay = min(RESTART_DELAY_MAX, 0.5 * 2 ** (failures - 1))
        logger.error(
            "Worker process %d died (%s) after %.1fs; restarting in %.1fs (worker %s)",
            child.pid,
            how,
            lived,
            delay,
            child.worker_id,
        )
        self.restarts.append((time.monotonic() + delay, child.index, failures))

    def _recover(self, child: _Child, how: str) -> None:
        """Set right what a dead child left in the table (its journal says what it had in hand)."""
        if self.killing:
            how = f"{how}, killed by a second signal to run_jobs"
        # Killing: one try, without waiting for a database that is down.
        attempts = 1 if self.killing else RECOVERY_ATTEMPTS
        for attempt in range(attempts):
            try:
                recover(
                    self.connection,
                    child.journal,
                    child.worker_id,
                    how,
                    shutting_down=self.stopping,
                )
                return
            except DATABASE_ERRORS as exc:
                self.connection.close()
                logger.warning(
                    "Could not recover the jobs of worker %s yet (%s); attempt %d of %d",
                    child.worker_id,
                    str(exc).strip(),
                    attempt + 1,
                    attempts,
                )
                if attempt + 1 < attempts:
                    time.sleep(min(RESTART_DELAY_MAX, 0.5 * 2**attempt))
            except Exception:
                logger.exception("Could not recover the jobs of worker %s", child.worker_id)
                return
        # Its running jobs stay locked: the claim's stale-job recovery takes them back after
        # the visibility timeout.

    def _restart_due(self) -> None:
        if self.stopping:
            self.restarts.clear()
            return
        now = time.monotonic()
        due = [r for r in self.restarts if r[0] <= now]
        self.restarts = [r for r in self.restarts if r[0] > now]
        for _, index, failures in due:
            self._spawn(index, failures)


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"


def _memory_dir() -> str | None:
    """Where the metric files go: in memory (``/dev/shm``) where there is one, so the kernel
    never writes their pages to the disk the database may share; else the temporary dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _kill(pid: int | None) -> None:
    """Kill a helper process (the probe, the relay) and reap it."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _describe_exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


def _tune_collector() -> None:
    """The garbage collector of a worker process, as it starts (docs/worker.md, "Supervision").

    What the child inherited (Django, the project's modules) lives as long as it does: out of
    the collector's sight. Each full collection walked it all, 70-85 ms once per 50,000 jobs
    drained, a pause of the worker loop (gc.callbacks; 1-2 ms frozen). And a claim's jobs (up to
    PGQUEUE_BATCH_SIZE, three containers each) outnumber the default 2,000 new objects that
    start a young collection: every claim of a drain started a few, each walking the jobs in
    hand (2 us a job; none once the threshold is above a claim's worth).
    """
    gc.freeze()
    threshold, *older = gc.get_threshold()
    gc.set_threshold(max(threshold, GC_YOUNG_THRESHOLD), *older)


def _die_with_parent(signum: int = signal.SIGTERM) -> None:
    """Linux: get ``signum`` when the supervisor dies, so no process outlives it unsupervised."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum)
    except OSError:
        pass
