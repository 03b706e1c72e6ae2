"""The relay (``worker.relay``): ``run_jobs --processes P`` listens on one connection for its P
worker processes, so a ``NOTIFY`` signals one PostgreSQL backend for the whole command, and
each process still gets the notifications that are its own (the rota's wakes) and the shared
ones (control, schedules).

Polls are kept out of the way (``PGQUEUE_POLL_INTERVAL`` far longer than any wait here): only a
relayed notification can explain a pickup."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection, connections

from django_pgqueue.models import Job, Worker
from django_pgqueue.sql.rota import LISTENER_PREFIX, channel, tag
from django_pgqueue.states import JobStatus
from django_pgqueue.worker.relay import HELLO, LISTENING, Relay, bind, frame, relay_id, unframe
from tests.testapp import jobs
from tests.utils import start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

#: No poll within a test's waits: a job picked up was woken for.
ENV = {"PGQUEUE_POLL_INTERVAL": "300", "PGQUEUE_REPAIR_INTERVAL": "600"}
#: Well inside the poll interval.
WOKEN_WITHIN = 30


def test_frames_survive_being_cut_anywhere() -> None:
    stream = frame("pgqueue.0123", "emails 7 1") + frame("pgqueue_control", "é cancel 3")
    buffer = bytearray()
    seen = []
    for byte in stream:
        buffer.append(byte)
        seen += unframe(buffer)
    assert seen == [("pgqueue.0123", "emails 7 1"), ("pgqueue_control", "é cancel 3")]
    assert not buffer


def listening_backends() -> list[tuple[str, int]]:
    """The listening connections to this database: (application_name, backend pid)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name, pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE %s",
            [LISTENER_PREFIX + "%"],
        )
        return [(str(name), int(pid)) for name, pid in cursor.fetchall()]


def relayed(base: str, processes: int) -> bool:
    """The command's worker rows all listening through its relay's connection, the only
    listening connection to the database."""
    relay_tag = tag(relay_id(base))
    rows = Worker.objects.filter(worker_id__startswith=f"{base}.", stopped_at__isnull=True)
    backends = listening_backends()
    return (
        rows.filter(listening=True, listener=relay_tag).count() == processes
        and len(backends) == 1
        and backends[0][0].startswith(f"{LISTENER_PREFIX}{relay_tag}")
    )


def relay_pid(supervisor: int) -> int:
    """The supervisor's child that is not a worker process."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    workers = set(Worker.objects.filter(stopped_at__isnull=True).values_list("pid", flat=True))
    (pid,) = [int(c) for c in children if int(c) not in workers]
    return pid


def completed(*ids: int) -> bool:
    return Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count() == len(ids)


def test_run_jobs_processes_listen_on_one_connection_and_each_is_woken_for_its_jobs() -> None:
    """Three processes, one listening connection: each job's wake reaches the process the rota
    picked (the jobs spread over them, about one claim a job). The relay killed: the supervisor
    starts another, the processes reconnect to it, and jobs are woken for again."""
    base = "relayed"
    proc = start_worker(
        "--processes", "3", "--threads", "1", "--worker-id", base, "-v", "3",
        env=worker_env(**ENV),
    )  # fmt: skip
    try:
        wait_until(lambda: relayed(base, 3), timeout=60)
        time.sleep(2.5)  # every worker's rota has read the three (REFRESH)
        ids = []
        for _ in range(9):
            ids.append(jobs.noop.enqueue().pk)
            wait_until(lambda: completed(ids[-1]), timeout=WOKEN_WITHIN)
        ran_by = set(Job.objects.filter(pk__in=ids).values_list("locked_by", flat=True))
        assert len(ran_by) >= 2, ran_by

        (_, backend_before), *_ = listening_backends()
        os.kill(relay_pid(proc.pid), signal.SIGKILL)

        def replaced() -> bool:  # the killed relay's backend may linger for a moment
            pids = [pid for _, pid in listening_backends()]
            return len(pids) == 1 and pids[0] != backend_before and relayed(base, 3)

        wait_until(replaced, timeout=60)
        later = [jobs.noop.enqueue().pk for _ in range(3)]
        wait_until(lambda: completed(*later), timeout=WOKEN_WITHIN)
    finally:
        log = stop(proc)
    assert "the relay process died (signal 9); starting another" in log
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 12, log


def test_a_cancel_reaches_the_running_job_through_the_relay(tmp_path: Path) -> None:
    """Control notifications are shared: the relay passes ``Job.cancel()`` of a running job to
    every process, and the one running it stops it. Heartbeats (which would also carry the
    request) are a minute apart."""
    marker = tmp_path / "marker"
    env = worker_env(**ENV, PGQUEUE_HEARTBEAT_INTERVAL="60", PGQUEUE_VISIBILITY_TIMEOUT="600")
    proc = start_worker("--processes", "2", "--threads", "1", "--worker-id", "cancels", env=env)
    try:
        wait_until(lambda: relayed("cancels", 2), timeout=60)
        created = jobs.until_cancelled.enqueue(str(marker))
        wait_until(marker.exists, timeout=WOKEN_WITHIN)
        assert Job.objects.get(pk=created.pk).cancel() is True
        wait_until(
            lambda: Job.objects.get(pk=created.pk).status == JobStatus.CANCELLED,
            timeout=WOKEN_WITHIN,
        )
    finally:
        log = stop(proc)
    assert "saw cancel" in marker.read_text(), log


def test_a_notification_arriving_while_the_relay_subscribes_a_worker_is_passed_on(
    tmp_path: Path,
) -> None:
    """In process, turn by turn: worker A listens through the relay; a wake for A is sent,
    then worker B says hello and the relay marks and subscribes it before it reads its socket.
    psycopg reads A's notification during B's statements: it must still reach A."""
    server = bind(tmp_path)
    relay = Relay("default", "test relay", server)

    def hello(worker_id: str) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(server.getsockname())
        own = channel(worker_id)
        sock.sendall(frame(HELLO, json.dumps({"worker_id": worker_id, "channels": [], "own": own})))
        return sock

    def received(sock: socket.socket) -> list[tuple[str, str]]:
        sock.settimeout(5)
        buffer = bytearray(sock.recv(65536))
        return unframe(buffer)

    try:
        a = hello("wa")
        for _ in range(3):
            relay.turn(0.1)
        assert received(a) == [(LISTENING, "")]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, 'emails 1 1')", [channel("wa")])
        time.sleep(0.2)  # on the relay's socket, not read yet
        b = hello("wb")
        relay._accept()
        (worker_b,) = [w for w in relay.workers.values() if w.worker_id is None]
        wait_until(lambda: relay._receive(worker_b) or worker_b.answered, timeout=5)
        relay.turn(0.1)
        assert received(a) == [(channel("wa"), "emails 1 1")]
        assert received(b) == [(LISTENING, "")]
    finally:
        relay.close()
        server.close()


def test_the_relay_answers_a_worker_whose_row_another_transaction_holds(tmp_path: Path) -> None:
    """The relay marks a worker's row listening before it subscribes it; a row locked by a
    transaction left open (someone's shell, a stuck session) must not stop the relay, which
    listens for every process of its host: the worker is answered, and its row is left to its
    next heartbeat."""
    server = bind(tmp_path)
    relay = Relay("default", "test relay", server)
    Worker.objects.create(worker_id="wl", hostname="h", pid=1)
    holder = connections.create_connection("default")
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pgqueue_worker WHERE worker_id = 'wl' FOR UPDATE")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(server.getsockname())
        own = channel("wl")
        sock.sendall(frame(HELLO, json.dumps({"worker_id": "wl", "channels": [], "own": own})))
        turns = threading.Thread(target=lambda: [relay.turn(0.1) for _ in range(3)])
        turns.start()
        turns.join(10)
        waited = turns.is_alive()
        holder.rollback()  # lets a relay that waited on the lock go on, so the test ends
        turns.join()
        assert not waited, "the relay waited for the row lock"
        sock.settimeout(5)
        assert unframe(bytearray(sock.recv(65536))) == [(LISTENING, "")]
        sock.close()
    finally:
        holder.rollback()
        holder.close()
        relay.close()
        server.close()
    assert not Worker.objects.get(worker_id="wl").listening  # its heartbeat's to write


def test_a_statement_the_database_refuses_disconnects_one_worker_not_the_relay(
    tmp_path: Path,
) -> None:
    """One worker's mark refused by the database (not the connection: here a trigger raises,
    as a permission or a schema older than the code would), and a hello that is not one of
    ours: each of those is disconnected (a worker says hello again after its own backoff), the
    relay keeps its connection and serves the others, also when it answers the hellos that
    came while it reconnected; once the database takes the mark, the worker is answered.
    Before, the error left the relay's process (the supervisor started relay after relay,
    each dropping every worker of the host), or kept it from listening again at all."""
    server = bind(tmp_path)
    relay = Relay("default", "test relay", server)
    for worker_id in ("wr", "wok"):
        Worker.objects.create(worker_id=worker_id, hostname="h", pid=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.worker_id = 'wr' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
            "RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON pgqueue_worker "
            "FOR EACH ROW EXECUTE FUNCTION test_refuse()"
        )

    def hello(worker_id: str | None) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(server.getsockname())
        payload = (
            '{"worker_id": "wz"'  # cut short
            if worker_id is None
            else json.dumps({"worker_id": worker_id, "channels": [], "own": channel(worker_id)})
        )
        sock.sendall(frame(HELLO, payload))
        sock.settimeout(5)
        return sock

    def turns(until: Callable[[], bool] | None = None) -> None:
        for _ in range(50):
            relay.turn(0.1)
            if until is None or until():
                return

    sockets = []
    try:
        turns()
        assert relay.listening
        sockets += [refused := hello("wr"), garbled := hello(None)]
        turns(lambda: not relay.workers)
        assert refused.recv(65536) == b""  # disconnected, not answered
        assert garbled.recv(65536) == b""
        assert relay.listening  # its own connection kept

        # Hellos that come while the relay reconnects are answered once it listens again.
        relay._lost(ConnectionError("cut by the test"))
        sockets += [refused := hello("wr"), ok := hello("wok")]
        turns(lambda: relay.listening and len(relay.workers) == 1)
        assert unframe(bytearray(ok.recv(65536))) == [(LISTENING, "")]
        assert refused.recv(65536) == b""
        assert Worker.objects.get(worker_id="wok").listening

        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER test_refuse ON pgqueue_worker")
        sockets.append(again := hello("wr"))
        turns(lambda: len(relay.workers) == 2 and all(w.answered for w in relay.workers.values()))
        assert unframe(bytearray(again.recv(65536))) == [(LISTENING, "")]
        assert Worker.objects.get(worker_id="wr").listening
    finally:
        for sock in sockets:
            sock.close()
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS test_refuse ON pgqueue_worker")
            cursor.execute("DROP FUNCTION IF EXISTS test_refuse()")
        relay.close()
        server.close()
