"""``run_jobs --reload``: a real worker restarted by a code change, then stopped by SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.core.management import CommandError, call_command

from django_pgqueue import operations
from django_pgqueue.models import Job
from django_pgqueue.spec import JobSpec
from tests.utils import output, pid_alive, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "pgqueue_reload_probe.version"
JOBS_MODULE = """from django_pgqueue import job


@job(name="pgqueue_reload_probe.version")
def version():
    return {version}{padding}
"""


def jobs_module(version: int, padding: str = "") -> str:
    return JOBS_MODULE.format(version=version, padding=padding)


def enqueue_probe() -> int:
    # By name: the job's module exists only for the worker (its INSTALLED_APPS), not here.
    return operations.insert(operations.DjangoDatabase("default"), JobSpec(name=JOB), "[]", "{}").pk


def result_of(pk: int):
    row = Job.objects.get(pk=pk)
    return row.result if row.status == "completed" else None


def supervisors(text: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"Supervisor (\d+) starting", text)]


def wait_for(proc, text: str) -> None:
    try:
        wait_until(lambda: text in output(proc), timeout=30)
    except AssertionError:
        raise AssertionError(f"{text!r} not in the log:\n{output(proc)}") from None


def save_until(proc, path, text: str, done) -> None:
    """Save ``path`` until the worker reacts (``done()``), as one saves again in an editor.

    A save during the reloader's first look at the files (the log's "Watching" line comes just
    before it) is taken for the file's first state, not a change: the next save is one."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        path.write_text(text)
        try:
            wait_until(done, timeout=3)
            return
        except AssertionError:
            continue
    raise AssertionError(f"no reaction to saving {path}:\n{output(proc)}")


def start_reloading_worker(tmp_path):
    """``run_jobs --reload`` with an app of its own in ``tmp_path``; its jobs.py returns 1."""
    app = tmp_path / "pgqueue_reload_probe"
    app.mkdir()
    (app / "__init__.py").write_text("")
    jobs_py = app / "jobs.py"
    jobs_py.write_text(jobs_module(1))
    env = worker_env(
        PGQUEUE_TEST_EXTRA_APPS="pgqueue_reload_probe",
        PYTHONDONTWRITEBYTECODE="1",  # a same-size edit in the same second: no stale .pyc
    )
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    return jobs_py, start_worker("--reload", env=env)


def test_reload_restarts_the_worker_on_a_code_change_and_sigterm_stops_it_all(tmp_path):
    jobs_py, proc = start_reloading_worker(tmp_path)
    try:
        first = enqueue_probe()
        assert wait_until(lambda: result_of(first), timeout=30) == 1, output(proc)
        [old] = supervisors(output(proc))
        wait_for(proc, "Watching the code for changes")

        save_until(
            proc, jobs_py, jobs_module(2, "  # edited"), lambda: len(supervisors(output(proc))) >= 2
        )
        log = output(proc)
        assert f"{jobs_py} changed: stopping the workers to restart them (--reload)" in log
        assert "Restarting run_jobs with the new code (--reload)" in log
        new = supervisors(log)[-1]
        assert not pid_alive(old)
        second = enqueue_probe()
        assert wait_until(lambda: result_of(second), timeout=30) == 2, output(proc)

        # SIGTERM to the command's process alone: it passes it on, and nothing is left.
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, output(proc)
        workers = [int(pid) for pid in re.findall(r"Worker \S+:(\d+) started", output(proc))]
        assert wait_until(lambda: not any(map(pid_alive, [new, *workers])), timeout=10)
    finally:
        log = stop(proc)
    assert f"Supervisor {new} received SIGTERM: stopping workers" in log


def test_reload_waits_out_code_that_fails_to_start_then_runs_the_fix(tmp_path):
    jobs_py, proc = start_reloading_worker(tmp_path)
    try:
        first = enqueue_probe()
        assert wait_until(lambda: result_of(first), timeout=30) == 1, output(proc)
        wait_for(proc, "Watching the code for changes")
        failed = "exited with status 1; it starts again when a file changes"
        save_until(proc, jobs_py, "def version(:\n", lambda: failed in output(proc))
        assert "SyntaxError" in output(proc)
        assert proc.poll() is None
        # The restart loop compares with the code as the failed run started: one save does.
        jobs_py.write_text(jobs_module(3))
        wait_until(lambda: len(supervisors(output(proc))) >= 2, timeout=30)
        pk = enqueue_probe()
        assert wait_until(lambda: result_of(pk), timeout=30) == 3, output(proc)
    finally:
        stop(proc)


def test_reload_refuses_burst():
    with pytest.raises(CommandError, match="--reload restarts a worker that runs until stopped"):
        call_command("run_jobs", "--reload", "--burst")
