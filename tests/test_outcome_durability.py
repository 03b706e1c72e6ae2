"""Outcomes written with an asynchronous commit, through real server crashes.

The worker writes outcomes without waiting for their WAL to reach disk and keeps them until a
commit that waits has returned (django_pgqueue/worker/writeback.py). These tests make the
server lose such a write: on the session's private cluster, the WAL writer is told to wake
only every 10 seconds, so an asynchronous commit stays in PostgreSQL's memory until then, and
``pg_ctl stop -m immediate`` right after the job shows as completed crashes the server with
the outcome unwritten. Each time the job must end completed having run exactly once.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.private_cluster import ClusterQueue, PrivateCluster, sleep_through, wait_for_statuses
from tests.test_database_faults import assert_no_worker_error, recorded
from tests.testapp import jobs
from tests.utils import output, start_worker, stop, wait_until

# The worker makes outcomes durable itself only after PGQUEUE_FLUSH_INTERVAL without a claim:
# 30 s here unless a test says otherwise, so between a job's outcome and the crash nothing of
# the worker's flushes the WAL. Heartbeats (which write) as rarely.
WORKER_ENV = {
    "PGQUEUE_FLUSH_INTERVAL": "30",
    "PGQUEUE_HEARTBEAT_INTERVAL": "30",
    "PGQUEUE_POLL_INTERVAL": "0.5",
}


@pytest.fixture
def lazy_wal_writer(private_cluster: PrivateCluster, cluster_queue: ClusterQueue) -> Iterator[None]:
    """The WAL writer flushes asynchronous commits every 10 s (not 0.2 s); no autovacuum,
    whose commits would flush them. Reset afterwards."""
    settings = {"wal_writer_delay": "'10s'", "autovacuum": "off"}
    with private_cluster.connect("postgres") as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER SYSTEM SET {name} = {value}")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        if not private_cluster.answers():
            private_cluster.start()
        with private_cluster.connect("postgres") as conn:
            for name in settings:
                conn.execute(f"ALTER SYSTEM RESET {name}")
            conn.execute("SELECT pg_reload_conf()")


def finish_then_crash(
    cluster: PrivateCluster, queue: ClusterQueue, out: str, wait: float = 0.0
) -> None:
    """Run one ``record`` job and crash the server ``wait`` seconds after it shows as
    completed: its outcome's commit is visible, and (the WAL writer asleep) on disk only if
    the worker made it so."""
    # A first job wakes the WAL writer out of hibernation (an asynchronous commit does), so
    # the next one waits for its next round, 10 s later.
    queue.enqueue_many(jobs.record, [(out, "first")])
    wait_for_statuses(queue, Counter({"completed": 1}))
    queue.enqueue_many(jobs.record, [(out, "lost")])
    wait_for_statuses(queue, Counter({"completed": 2}), timeout=30)
    if wait:
        sleep_through(wait)
    cluster.crash()


@pytest.mark.parametrize(
    ("flush_interval", "wait", "written_again"),
    [
        # At once: the crash loses the write; back up, the worker finds the job still
        # running under its lock and writes the outcome again.
        ("30", 0.0, True),
        # No claim comes after the outcome: the idle worker commits one statement that waits
        # for the disk within PGQUEUE_FLUSH_INTERVAL, and the crash 1 s later loses nothing.
        ("0.05", 1.0, False),
    ],
    ids=["crash-at-once", "crash-after-idle"],
)
def test_a_server_crash_after_an_outcome_runs_nothing_twice(
    flush_interval, wait, written_again, private_cluster, cluster_queue, lazy_wal_writer, tmp_path
):
    out = tmp_path / "out"
    env = private_cluster.env(**{**WORKER_ENV, "PGQUEUE_FLUSH_INTERVAL": flush_interval})
    proc = start_worker("--threads", "1", env=env)
    try:
        finish_then_crash(private_cluster, cluster_queue, str(out), wait)
        sleep_through(1)
        private_cluster.start()
        cluster_queue.enqueue_many(jobs.record, [(str(out), "after")])
        wait_for_statuses(cluster_queue, Counter({"completed": 3}))
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    lost = "written again: 1 outcomes the database had shown as written"
    assert (lost in log) is written_again, log
    assert "dropped" not in log, log
    assert recorded(out) == Counter(["first", "lost", "after"]), "every job ran exactly once"


def test_a_dead_workers_outcome_is_made_durable_by_its_supervisor(
    private_cluster, cluster_queue, lazy_wal_writer, tmp_path
):
    """The worker process dies right after writing an outcome; its supervisor, finding the job
    already completed, must still make that durable: a server crash afterwards would bring
    the job back as running under a worker nobody recovers, to run again."""
    out = tmp_path / "out"
    # A short visibility timeout: a job brought back as running would be reclaimed and run
    # again within the test (heartbeats must come more often).
    env = private_cluster.env(
        **{**WORKER_ENV, "PGQUEUE_HEARTBEAT_INTERVAL": "2"}, PGQUEUE_VISIBILITY_TIMEOUT="3"
    )
    proc = start_worker("--threads", "1", env=env)
    try:
        out_path = str(out)
        cluster_queue.enqueue_many(jobs.record, [(out_path, "first")])
        wait_for_statuses(cluster_queue, Counter({"completed": 1}))
        [child] = cluster_queue.query("SELECT pid FROM pgqueue_worker WHERE stopped_at IS NULL")
        cluster_queue.enqueue_many(jobs.record, [(out_path, "finished")])
        wait_for_statuses(cluster_queue, Counter({"completed": 2}), timeout=30)
        os.kill(child[0], signal.SIGKILL)
        # The supervisor has recovered the dead process's jobs (it says so after), and the
        # next process, started 0.5 s later, has not written anything yet.
        wait_until(lambda: "died (signal 9)" in output(proc), interval=0.01)
        private_cluster.crash()
        sleep_through(1)
        private_cluster.start()
        cluster_queue.enqueue_many(jobs.record, [(out_path, "after")])
        wait_for_statuses(cluster_queue, Counter({"completed": 3}))
        sleep_through(5)  # past the visibility timeout: a job left running would run again
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert f"Worker process {child[0]} died (signal 9)" in log, log
    assert cluster_queue.statuses() == Counter({"completed": 3})
    assert recorded(out) == Counter(["first", "finished", "after"]), "every job ran exactly once"
