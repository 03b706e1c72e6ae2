"""Deploys during long jobs, with real ``run_jobs`` processes and real SIGTERMs: a job its
worker's shutdown interrupts is handed back without spending an attempt (docs/worker.md,
"Deploys and long jobs")."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from django_pgqueue.worker.signals import SIGNAL_DEDUPE_WINDOW
from tests.testapp import jobs
from tests.utils import output, pid_alive, start_worker, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def lines(path: Path, word: str) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.startswith(word)]


def state(job: Job) -> tuple[str, int, int]:
    job.refresh_from_db()
    return job.status, job.attempts, job.interruptions


def test_three_deploys_during_a_long_job_end_with_it_completed(tmp_path):
    """``max_attempts=3`` and three SIGTERMs mid-job: each hands it back at a safe point
    (``shutdown_requested``, ``JobInterrupted``), and the fourth worker completes it."""
    out = tmp_path / "out"
    job = jobs.long_export.enqueue(str(out), 1.5)
    for deploy in range(1, 4):
        proc = start_worker("--threads", "1")
        try:
            wait_until(lambda n=deploy: len(lines(out, "start")) == n)
        finally:
            log = stop(proc)
        assert f"long_export #{job.pk}" in log and "interrupted" in log, log
        assert state(job) == ("pending", 0, deploy)
    proc = start_worker("--threads", "1")
    try:
        wait_until(lambda: state(job)[0] == "completed")
    finally:
        stop(proc)
    assert state(job) == ("completed", 1, 3)
    assert len(lines(out, "done")) == 1
    assert [e.get("interrupted") for e in job.errors] == [True, True, True]


def test_a_job_that_ignores_the_shutdown_is_handed_back_when_the_timeout_ends(tmp_path):
    """Past ``--shutdown-timeout`` the worker hands the still-running job back (not a crash, no
    attempt spent) and exits: the job's code stops with its process."""
    out = tmp_path / "out"
    job = jobs.long_export.enqueue(str(out), 60, cooperative=False)
    proc = start_worker("--threads", "1", "--shutdown-timeout", "0.5")
    try:
        wait_until(lambda: lines(out, "start"))
    finally:
        log = stop(proc)
    assert "handed back as interrupted" in log, log
    assert "WorkerCrashed" not in log
    assert state(job) == ("pending", 0, 1)
    [entry] = job.errors
    assert entry["interrupted"] is True and "shutdown timeout" in entry["traceback"]
    time.sleep(0.3)
    assert lines(out, "done") == []  # its thread died with the process


def test_a_job_past_its_timeout_during_a_shutdown_fails_on_its_timeout(tmp_path):
    """A SIGTERM while a job that ignores everything runs: the shutdown still enforces the
    job's 1 s timeout (dead, ``JobTimeout``; its thread abandoned, stopping with the process)
    rather than waiting out the 30 s shutdown timeout and handing it back to run, and hang,
    again."""
    spun = tmp_path / "spun"
    job = jobs.spins.enqueue(str(spun))
    proc = start_worker("--threads", "2", "--shutdown-timeout", "30")
    try:
        wait_until(lambda: spun.exists() and spun.read_text())
    finally:
        log = stop(proc)
    job.refresh_from_db()
    assert (job.status, job.interruptions) == ("dead", 0), log
    assert "JobTimeout" in job.last_error
    assert "handed back as interrupted" not in log


def test_a_cancel_during_a_shutdown_reaches_the_running_job(tmp_path):
    """SIGTERM while a job that ignores the shutdown but honours a cancel runs, then cancel():
    the shutdown passes the request on at once (as the loop does), so the job stops and ends
    cancelled, rather than hearing of it at the next heartbeat (15 s), after this 5 s
    shutdown timeout had handed it back to run again."""
    marker = tmp_path / "marker"
    job = jobs.until_cancelled.enqueue(str(marker))
    proc = start_worker("--threads", "1", "--shutdown-timeout", "5")
    try:
        wait_until(marker.exists)
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "finishing running jobs" in output(proc))
        job.refresh_from_db()
        assert job.cancel() is True
        proc.wait(timeout=60)
    finally:
        log = stop(proc)
    job.refresh_from_db()
    assert (job.status, job.interruptions) == ("cancelled", 0), log
    assert "saw cancel" in marker.read_text()


def test_a_worker_killed_by_a_second_signal_has_its_running_job_handed_back(tmp_path):
    """A second SIGTERM kills the worker processes at once; the supervisor, shutting down,
    hands their running jobs back as interrupted rather than charging an attempt."""
    out = tmp_path / "out"
    job = jobs.long_export.enqueue(str(out), 60, cooperative=False)
    proc = start_worker("--threads", "1", "--shutdown-timeout", "60")
    try:
        wait_until(lambda: lines(out, "start"))
        proc.send_signal(signal.SIGTERM)
        time.sleep(SIGNAL_DEDUPE_WINDOW + 0.3)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        log = stop(proc)
    assert "handed back as interrupted" in log, log
    assert state(job) == ("pending", 0, 1)


def test_a_process_holding_an_abandoned_thread_is_replaced_and_the_code_stops(tmp_path):
    """A job past its timeout that ignores everything: its thread is abandoned, so its process
    stops claiming, finishes its other jobs, exits, and the supervisor starts a fresh one
    (``--processes 1``): the stuck code's writes stop, and jobs run on."""
    spun = tmp_path / "spun"
    out = tmp_path / "out"
    stuck = jobs.spins.enqueue(str(spun))
    proc = start_worker("--threads", "2")
    try:
        wait_until(lambda: spun.exists() and spun.read_text())
        first_pid = int(spun.read_text().split()[0])
        wait_until(lambda: "replaced: it exited to stop an abandoned job thread" in output(proc))
        wait_until(lambda: not pid_alive(first_pid))
        size = spun.stat().st_size
        time.sleep(0.3)
        assert spun.stat().st_size == size, "the abandoned code still writes"
        jobs.record.enqueue(str(out), "after")
        wait_until(lambda: lines(out, "after"))
    finally:
        log = stop(proc)
    assert state(stuck)[0] == "dead"  # timed out, max_attempts=1
    [(_, pid)] = [line.split() for line in lines(out, "after")]
    assert int(pid) != first_pid
    assert "still running in an abandoned thread" in log, log
