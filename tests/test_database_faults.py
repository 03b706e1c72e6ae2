"""The database going away under real ``run_jobs`` workers, on a private cluster.

Each test runs real worker subprocesses against the session's private cluster
(tests/private_cluster.py) and then stops, restarts, crashes or saturates that server, or
terminates the workers' connections. Every time: the worker logs, backs off, reconnects when the
server is back, writes the outcomes it kept through the outage, and carries on; every healthy
job enqueued before and after the fault runs exactly once, and nothing is left ``running``.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from scripts import pgdb
from tests.pgproxy import LosingProxy
from tests.private_cluster import ClusterQueue, PrivateCluster, sleep_through, wait_for_statuses
from tests.testapp import jobs
from tests.utils import ROOT, manage, output, start_worker, stop, wait_until

# Heartbeats and polls often enough for a short test; the visibility timeout stays long, so
# no job is reclaimed (and run twice) because of an outage of a few seconds.
WORKER_ENV = {
    "PGQUEUE_HEARTBEAT_INTERVAL": "0.5",
    "PGQUEUE_POLL_INTERVAL": "0.5",
    "PGQUEUE_VISIBILITY_TIMEOUT": "120",
}


def recorded(path: Path) -> Counter[str]:
    """How many times each value was recorded (one line per run of a ``record`` job)."""
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def assert_no_worker_error(log: str) -> None:
    """Nothing escaped to the worker's last-resort handlers: every fault was expected."""
    text = log.lower()
    for sign in (
        "error around job",  # an executor's own code failed around a job
        "loop error",  # the loop's catch-all
        "queue database error",  # a database error not recognised as a lost connection
        "listener failed",
        " crashed",
        " died (",  # a worker process died under the supervisor
        "could not recover",
    ):
        assert sign not in text, log


def running_ids(queue: ClusterQueue) -> set[int]:
    return {row[0] for row in queue.query("SELECT id FROM pgqueue_job WHERE status = 'running'")}


def fault(cluster: PrivateCluster, kind: str) -> None:
    """Take the server away (and back) the way ``kind`` says."""
    if kind == "stop":
        cluster.stop("fast")
        sleep_through(3)
        cluster.start()
    elif kind == "restart":
        cluster.restart()
    elif kind == "crash":
        cluster.crash()
        sleep_through(3)
        cluster.start()  # crash recovery replays the WAL
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["stop", "restart", "crash"])
def test_the_worker_lives_through_the_server_going_away(
    kind, private_cluster, cluster_queue, tmp_path
):
    out = tmp_path / "out"
    queue = cluster_queue
    proc = start_worker("--threads", "4", env=private_cluster.env(**WORKER_ENV))
    try:
        queue.enqueue_many(jobs.record, [(str(out), f"before-{i}") for i in range(10)])
        wait_for_statuses(queue, Counter({"completed": 10}))
        # Jobs still running when the server goes away: their outcomes wait in the worker.
        # The db_record ones query through Django's connection after their sleep, in the
        # outage: Django's OperationalError in an executor thread fails that attempt only.
        queue.enqueue_many(jobs.record, [(str(out), f"across-{i}", 2.0) for i in range(2)])
        queue.enqueue_many(jobs.db_record, [(str(out), "across-db", 1.0)])
        wait_until(lambda: len(running_ids(queue)) == 3)
        fault(private_cluster, kind)
        queue.enqueue_many(jobs.record, [(str(out), f"after-{i}") for i in range(5)])
        queue.enqueue_many(jobs.db_record, [(str(out), f"after-db-{i}") for i in range(5)])
        wait_for_statuses(queue, Counter({"completed": 23}))
        assert proc.poll() is None, "the worker exited"
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "queue database unreachable" in log.lower(), log
    assert "queue database back after" in log.lower(), log
    expected = [f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(5)]
    expected += [f"after-db-{i}" for i in range(5)] + ["across-0", "across-1", "across-db"]
    assert recorded(out) == Counter(expected), "every job ran exactly once"
    assert not running_ids(queue)


def test_a_burst_worker_waits_out_a_stopped_server_and_exits_by_itself(
    private_cluster, cluster_queue, tmp_path
):
    out = tmp_path / "out"
    queue = cluster_queue
    queue.enqueue_many(jobs.record, [(str(out), f"job-{i}", 0.3) for i in range(20)])
    proc = start_worker("--burst", "--threads", "2", env=private_cluster.env(**WORKER_ENV))
    try:
        wait_until(lambda: recorded(out).total() >= 4)
        fault(private_cluster, "stop")
        proc.wait(timeout=180)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "queue database unreachable" in log.lower(), log
    assert queue.statuses() == Counter({"completed": 20})
    assert recorded(out) == Counter(f"job-{i}" for i in range(20))


def test_a_worker_started_while_the_server_is_down_waits_for_it(
    private_cluster, cluster_queue, tmp_path
):
    out = tmp_path / "out"
    queue = cluster_queue
    queue.enqueue_many(jobs.record, [(str(out), f"early-{i}") for i in range(5)])
    private_cluster.stop("fast")
    proc = start_worker("--threads", "2", env=private_cluster.env(**WORKER_ENV))
    try:
        wait_until(lambda: "queue database unreachable" in output(proc).lower(), timeout=120)
        sleep_through(2)
        assert proc.poll() is None, output(proc)
        private_cluster.start()
        queue.enqueue_many(jobs.db_record, [(str(out), f"late-{i}") for i in range(5)])
        wait_for_statuses(queue, Counter({"completed": 10}))
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert recorded(out) == Counter(
        [f"early-{i}" for i in range(5)] + [f"late-{i}" for i in range(5)]
    )


def _fill(cluster: PrivateCluster, opened: list[psycopg.Connection]) -> bool:
    """Open connections until the server refuses one; True if it said "too many clients"."""
    while True:
        try:
            opened.append(cluster.connect())
        except psycopg.OperationalError as exc:
            return "too many clients" in str(exc)


def test_the_worker_waits_out_a_full_connection_table(private_cluster, cluster_queue, tmp_path):
    out = tmp_path / "out"
    proc = start_worker("--threads", "2", env=private_cluster.env(**WORKER_ENV))
    opened: list[psycopg.Connection] = []
    try:  # the worker is stopped whatever fails: left running, it would take later tests' jobs
        try:
            cluster_queue.enqueue_many(jobs.record, [(str(out), f"before-{i}") for i in range(5)])
            wait_for_statuses(cluster_queue, Counter({"completed": 5}))
            # Open every connection the server allows, then cut the worker's: its reconnects
            # find none free. (Terminated backends free theirs a moment after they leave
            # pg_stat_activity: keep opening them until a round finds none to open.)
            assert _fill(private_cluster, opened)
            queue = ClusterQueue(private_cluster, pinned=opened[0])

            quiet_looks = 0

            def worker_refused() -> bool:
                """The worker was refused a connection, and two looks in a row found it
                with none (one still starting up shows at the second) and none freed."""
                nonlocal quiet_looks
                before = len(opened)
                _fill(private_cluster, opened)
                if queue.terminate_workers() or len(opened) != before:
                    quiet_looks = 0
                    return False
                quiet_looks += 1
                return quiet_looks >= 2 and "too many clients" in output(proc)

            wait_until(worker_refused, timeout=120, interval=0.2)
            queue.enqueue_many(jobs.record, [(str(out), f"during-{i}") for i in range(5)])
            sleep_through(2)
            assert proc.poll() is None, output(proc)
            assert queue.statuses()["completed"] == 5, output(proc)
        finally:
            for conn in opened:
                conn.close()
        cluster_queue.enqueue_many(jobs.record, [(str(out), f"after-{i}") for i in range(5)])
        wait_for_statuses(cluster_queue, Counter({"completed": 15}))
        assert proc.poll() is None
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "queue database back after" in log.lower(), log
    names = [f"{stage}-{i}" for stage in ("before", "during", "after") for i in range(5)]
    assert recorded(out) == Counter(names)
    assert not running_ids(cluster_queue)


def test_terminating_every_worker_connection_loses_and_repeats_nothing(
    private_cluster, cluster_queue, tmp_path
):
    out = tmp_path / "out"
    queue = cluster_queue
    # A claim that commits just before its connection is terminated never reaches the worker:
    # back on a new connection, the worker hands its jobs back (Claimer.settle). None waits
    # for the visibility timeout (120 s, longer than the wait below) or is charged a
    # WorkerLost attempt.
    env = private_cluster.env(**WORKER_ENV)
    proc = start_worker("--processes", "2", "--threads", "2", env=env)
    try:
        queue.enqueue_many(jobs.db_record, [(str(out), f"db-{i}", 0.05) for i in range(60)])
        queue.enqueue_many(jobs.record, [(str(out), f"plain-{i}", 0.05) for i in range(60)])
        for _ in range(5):
            # Loops, listeners, executors' Django connections, the supervisor's: all of them.
            wait_until(lambda: queue.terminate_workers() > 0, timeout=60, interval=0.1)
            sleep_through(0.5)
        wait_for_statuses(queue, Counter({"completed": 120}))
        assert proc.poll() is None, "the worker exited"
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert (
        "queue database unreachable" in log.lower() or "listener lost its connection" in log.lower()
    )
    names = [f"{kind}-{i}" for kind in ("db", "plain") for i in range(60)]
    assert recorded(out) == Counter(names)
    assert not running_ids(queue)
    assert not queue.query("SELECT id FROM pgqueue_job WHERE last_error LIKE 'WorkerLost%%'")


def test_a_claim_whose_answer_is_lost_hands_its_jobs_back_when_the_connection_returns(
    private_cluster, cluster_queue, tmp_path
):
    """The claim commits; the connection is cut before its answer reaches the worker (a real
    proxy swallows it). Back on a new connection, the worker hands the job it never knew it
    had in hand back to the queue, refunding the attempt, and runs it: no wait for the visibility
    timeout (an hour here), no ``WorkerLost`` attempt."""
    out = tmp_path / "out"
    queue = cluster_queue
    proxy = LosingProxy(private_cluster.port)
    env = private_cluster.env(
        **{**WORKER_ENV, "PGQUEUE_VISIBILITY_TIMEOUT": "3600"},
        PGPORT=str(proxy.port),
        PGSSLMODE="disable",
        PGGSSENCMODE="disable",
    )
    proc = start_worker("--threads", "2", env=env)
    try:
        queue.enqueue_many(jobs.record, [(str(out), "first")])
        wait_for_statuses(queue, Counter({"completed": 1}))  # claims and writes through it
        proxy.arm()
        [lost] = queue.enqueue_many(jobs.record, [(str(out), "lost-answer")])
        assert proxy.fired.wait(60), "no claim went through the proxy"
        wait_for_statuses(queue, Counter({"completed": 2}))
        assert proc.poll() is None, "the worker exited"
    finally:
        log = stop(proc)
        proxy.close()
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "queue database unreachable" in log.lower(), log
    assert "handed back 1 jobs a claim took while its answer was lost" in log, log
    assert f"#{lost}" in log, log
    [(attempts, errors)] = queue.query(
        "SELECT attempts, errors FROM pgqueue_job WHERE id = %s", [lost]
    )
    assert (attempts, errors) == (1, []), "the lost claim's attempt is refunded, nothing charged"
    assert recorded(out) == Counter(["first", "lost-answer"])


def test_pgqueue_chaos_loses_no_job_through_kills_terminations_and_a_restart(
    private_cluster, cluster_queue
):
    result = subprocess.run(
        manage(
            "pgqueue_chaos",
            "--rate",
            "40",
            "--job-ms",
            "10",
            "--processes",
            "2",
            "--threads",
            "2",
            "--fault-interval",
            "3",
            "--drain-timeout",
            "120",
            "--allow-restart",
            "--pgdata",
            str(private_cluster.cluster.data),
            "--pg-ctl",
            pgdb.find_binary("pg_ctl"),
            "--pg-log",
            str(private_cluster.logfile),
            "--json",
        ),
        env=private_cluster.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [f["fault"] for f in report["faults"]] == ["sigkill", "terminate", "restart"]
    assert all(f["recovery"] is not None for f in report["faults"]), result.stdout
    assert report["lost"] == 0 and report["enqueued"] > 100, result.stdout
    assert report["completed"] == report["rows"] >= report["enqueued"]
    assert "jobs lost: 0" in result.stdout
    # The scratch queue's rows are gone.
    assert cluster_queue.statuses() == Counter()


def test_pgqueue_chaos_restarts_only_the_server_it_was_told_about(private_cluster, tmp_path):
    result = subprocess.run(
        manage(
            "pgqueue_chaos", "--allow-restart", "--pgdata", str(tmp_path), "--faults", "restart"
        ),
        env=private_cluster.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert f"not from --pgdata {tmp_path}: refusing to restart it" in result.stderr
    assert private_cluster.answers()


def test_failover_to_a_promoted_replica(private_cluster, cluster_queue, tmp_path):
    """The primary goes down for good and its streaming replica is promoted; the worker's
    DSN lists both (``target_session_attrs=read-write``), so it finds the new primary."""
    out = tmp_path / "out"
    standby = private_cluster.standby()
    env = private_cluster.env(
        PGHOST="127.0.0.1,127.0.0.1",
        PGPORT=f"{private_cluster.port},{standby.port}",
        PGTARGETSESSIONATTRS="read-write",
        **WORKER_ENV,
    )
    proc = start_worker("--threads", "4", env=env)
    try:
        cluster_queue.enqueue_many(jobs.record, [(str(out), f"before-{i}") for i in range(10)])
        wait_for_statuses(cluster_queue, Counter({"completed": 10}))
        cluster_queue.enqueue_many(jobs.record, [(str(out), f"across-{i}", 2.0) for i in range(3)])
        wait_until(lambda: len(running_ids(cluster_queue)) == 3)
        private_cluster.stop("fast")  # streams its last WAL to the replica, and stays down
        sleep_through(1)
        standby.promote()
        new_primary = ClusterQueue(standby)
        new_primary.enqueue_many(jobs.db_record, [(str(out), f"after-{i}") for i in range(10)])
        wait_for_statuses(new_primary, Counter({"completed": 23}))
        assert proc.poll() is None, "the worker exited"
        assert not running_ids(new_primary)
    finally:
        log = stop(proc)
        standby.destroy()
        private_cluster.start()
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "queue database back after" in log.lower(), log
    names = [f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)]
    names += [f"across-{i}" for i in range(3)]
    assert recorded(out) == Counter(names)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--faults", "sigkill,flood"], "unknown faults flood (choose from sigkill, terminate"),
        (["--faults", "restart"], "the restart fault needs --allow-restart and --pgdata"),
        (["--allow-restart"], "--allow-restart needs --pgdata DIR"),
        (["--rate", "0"], "--rate"),
        (["--rounds", "1000"], "--rounds"),
    ],
)
def test_pgqueue_chaos_refuses_bad_options_before_doing_anything(args, message, private_cluster):
    result = subprocess.run(
        manage("pgqueue_chaos", *args),
        env=private_cluster.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "pgqueue_chaos:" not in result.stdout  # no run started


def test_a_batch_whose_last_member_ends_across_a_restart_calls_back_once(
    private_cluster, cluster_queue, tmp_path
):
    """Workflows (issue 33): PostgreSQL restarts while the last member of a batch runs; its
    outcome waits in the worker and is written once the server is back, in the transaction
    that finishes the batch: the callback runs once. Then the same batch shape with the worker
    SIGKILLed under its last member while the server restarts: the member is reclaimed, and the
    callback runs once."""
    import os
    import signal

    from django_pgqueue import operations

    queue = cluster_queue
    out = tmp_path / "callbacks"
    marker = tmp_path / "stalled"

    def new_batch(last: tuple[object, tuple[object, ...]]) -> int:
        callback = jobs.batch_report.s(str(out), "complete").callback()
        batch_id = operations.create_batch(queue, "restart", {"on_complete": callback})
        operations.insert_many(queue, jobs.noop.spec, [("[]", "{}")] * 10, batch=batch_id)
        job, args = last
        operations.insert_many(queue, job.spec, [job.serialize(args, {})], batch=batch_id)  # type: ignore[attr-defined]
        operations.seal_batch(queue, batch_id)
        return batch_id

    env = private_cluster.env(
        PGQUEUE_HEARTBEAT_INTERVAL="0.3",
        PGQUEUE_POLL_INTERVAL="0.5",
        PGQUEUE_VISIBILITY_TIMEOUT="3",
    )
    # 1. The outcome of the last member meets a restarting server.
    first = new_batch((jobs.record, (str(tmp_path / "slow"), "slow", 1.5)))
    proc = start_worker("--threads", "2", env=env)
    try:
        wait_until(lambda: len(running_ids(queue)) == 1 and queue.statuses()["pending"] == 0)
        private_cluster.restart()
        wait_for_statuses(queue, Counter({"completed": 12}))
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert [line.split('"callback": "')[1][:8] for line in out.read_text().splitlines()] == [
        "complete"
    ]
    # 2. The worker killed under the last member while the server restarts.
    second = new_batch((jobs.stalls_first_time, (str(marker),)))
    proc = start_worker("--threads", "2", env=env)
    wait_until(lambda: marker.exists() and queue.statuses()["pending"] == 0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    private_cluster.restart()
    proc = start_worker("--threads", "2", env=env)  # reclaims it past the visibility timeout
    try:
        wait_for_statuses(queue, Counter({"completed": 12 + 12}))
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    fired = queue.query("SELECT id, jsonb_array_length(fired) FROM pgqueue_batch ORDER BY id")
    assert dict(fired)[first] == dict(fired)[second] == 1
    assert len(out.read_text().splitlines()) == 2
