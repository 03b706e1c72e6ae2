"""Outcomes written with an asynchronous commit, through real server crashes.

The worker writes outcomes without waiting for their WAL to reach disk and keeps them until a
commit that waits has returned (django_pgqueue/worker/writeback.py). These tests make the
server lose such a write, on a cluster of their own whose WAL writer wakes only every 10
seconds (no autovacuum, no timed checkpoint: nothing else flushes the WAL), so an asynchronous
commit stays in PostgreSQL's memory until then: ``pg_ctl stop -m immediate`` right after a job
shows as completed crashes the server with its outcome unwritten. Each time every job must
end completed having run exactly once.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.private_cluster import (
    ClusterQueue,
    PrivateCluster,
    empty_queue,
    running_cluster,
    sleep_through,
    wait_for_statuses,
)
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
LOST = "written again: 1 outcomes the database had shown as written"


@pytest.fixture(scope="module")
def lazy_cluster() -> Iterator[PrivateCluster]:
    with running_cluster(
        wal_writer_delay="10s", autovacuum="off", checkpoint_timeout="1h"
    ) as cluster:
        yield cluster


@pytest.fixture
def queue(lazy_cluster: PrivateCluster) -> ClusterQueue:
    return empty_queue(lazy_cluster)


def completed(queue: ClusterQueue, count: int) -> None:
    """Wait (polling every 10 ms: the crash must follow closely) until ``count`` jobs are."""
    wait_for_statuses(queue, Counter({"completed": count}), timeout=60, interval=0.01)


def finish_then_crash(cluster: PrivateCluster, queue: ClusterQueue, out: str, value: str) -> None:
    """Run one ``record`` job and crash the server as soon as it shows as completed: its
    outcome's commit is visible, and on disk only if the worker made it so."""
    done = sum(queue.statuses().values())
    queue.enqueue_many(jobs.record, [(out, value)])
    completed(queue, done + 1)
    cluster.crash()


def test_an_outcome_the_crash_lost_is_written_again(lazy_cluster, queue, tmp_path):
    out = str(tmp_path / "out")
    proc = start_worker("--threads", "1", env=lazy_cluster.env(**WORKER_ENV))
    try:
        queue.enqueue_many(jobs.record, [(out, "first")])
        completed(queue, 1)
        # The WAL writer wakes every 10 s: once in a few hundred tries it would write the
        # outcome in the moment before the crash. Up to three crashes, until one loses it.
        for attempt in range(3):
            finish_then_crash(lazy_cluster, queue, out, f"lost-{attempt}")
            sleep_through(1)
            lazy_cluster.start()
            completed(queue, attempt + 2)
            if LOST in output(proc):
                break
        queue.enqueue_many(jobs.record, [(out, "after")])
        completed(queue, attempt + 3)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    # The crash did lose the write: the worker found its job still running under its lock.
    assert LOST in log, log
    assert "dropped" not in log, log
    expected = ["first", "after"] + [f"lost-{n}" for n in range(attempt + 1)]
    assert recorded(tmp_path / "out") == Counter(expected), "every job ran exactly once"


def test_an_idle_worker_makes_its_outcomes_durable_itself(lazy_cluster, queue, tmp_path):
    """No claim comes after the outcome: the worker commits one statement that waits for the
    disk within ``PGQUEUE_FLUSH_INTERVAL``, and a crash 1 s later loses nothing."""
    out = str(tmp_path / "out")
    env = lazy_cluster.env(**{**WORKER_ENV, "PGQUEUE_FLUSH_INTERVAL": "0.05"})
    proc = start_worker("--threads", "1", env=env)
    try:
        queue.enqueue_many(jobs.record, [(out, "first")])
        completed(queue, 1)
        queue.enqueue_many(jobs.record, [(out, "kept")])
        completed(queue, 2)
        sleep_through(1)
        lazy_cluster.crash()
        sleep_through(1)
        lazy_cluster.start()
        queue.enqueue_many(jobs.record, [(out, "after")])
        completed(queue, 3)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert_no_worker_error(log)
    assert "written again" not in log, log
    assert recorded(tmp_path / "out") == Counter(["first", "kept", "after"])


def test_a_dead_workers_outcome_is_made_durable_by_its_supervisor(lazy_cluster, queue, tmp_path):
    """The worker process dies right after writing an outcome; its supervisor, finding the job
    already completed, must still make that durable: a server crash afterwards would bring
    the job back as running under a worker nobody recovers, to run again."""
    out = tmp_path / "out"
    # A short visibility timeout: a job brought back as running would be reclaimed and run
    # again within the test (heartbeats must come more often).
    env = lazy_cluster.env(
        **{**WORKER_ENV, "PGQUEUE_HEARTBEAT_INTERVAL": "2"}, PGQUEUE_VISIBILITY_TIMEOUT="3"
    )
    proc = start_worker("--threads", "1", env=env)
    try:
        out_path = str(out)
        queue.enqueue_many(jobs.record, [(out_path, "first")])
        completed(queue, 1)
        [child] = queue.query("SELECT pid FROM pgqueue_worker WHERE stopped_at IS NULL")
        queue.enqueue_many(jobs.record, [(out_path, "finished")])
        completed(queue, 2)
        os.kill(child[0], signal.SIGKILL)
        # The supervisor has recovered the dead process's jobs (it says so after), and the
        # next process, started 0.5 s later, has not written anything yet.
        wait_until(lambda: "died (signal 9)" in output(proc), interval=0.01)
        lazy_cluster.crash()
        sleep_through(1)
        lazy_cluster.start()
        queue.enqueue_many(jobs.record, [(out_path, "after")])
        completed(queue, 3)
        sleep_through(5)  # past the visibility timeout: a job left running would run again
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert f"Worker process {child[0]} died (signal 9)" in log, log
    assert queue.statuses() == Counter({"completed": 3})
    assert recorded(out) == Counter(["first", "finished", "after"]), "every job ran exactly once"
