"""Workflows with real ``run_jobs`` processes (docs/workflows.md): a child starts after its
parents' rows are completed, a failed parent's dependents never run, a batch's callbacks run
exactly once across processes and threads, the fan-in race, and a worker killed under the last
member. Each worker's output goes to a file (``tests.utils.start_worker``)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from django_pgqueue import batch, chain
from django_pgqueue.models import Batch, Job
from django_pgqueue.states import FINISHED, JobStatus
from tests.testapp import async_jobs, jobs
from tests.utils import other_active_backends, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def all_ended() -> bool:
    return not Job.objects.exclude(status__in=FINISHED).exists()


def test_a_child_starts_after_its_parents_completed_and_a_dead_parents_dependents_never_run(
    tmp_path,
):
    out = tmp_path / "out"
    a = jobs.record.enqueue(str(tmp_path / "a"), "a", 0.3)
    b = jobs.add.enqueue(2, 3)
    child = jobs.collect_parents.using(after=[a, b]).enqueue(str(out), "child")
    steps = chain(jobs.add.s(1, 1), jobs.collect_parents.s(str(out), "step"))
    dead = jobs.fails_once_dead.enqueue()
    doomed = jobs.collect_parents.using(after=[dead]).enqueue(str(out), "doomed")
    doomed_too = jobs.collect_parents.using(after=[doomed, a]).enqueue(str(out), "doomed too")
    proc = start_worker("--threads", "4")
    try:
        wait_until(all_ended, timeout=60)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    rows = {j.pk: j for j in Job.objects.all()}
    assert rows[child.pk].status == JobStatus.COMPLETED
    assert rows[child.pk].started_at >= max(rows[a.pk].finished_at, rows[b.pk].finished_at)
    by_tag = {line["tag"]: line["parents"] for line in lines(out)}
    assert by_tag == {
        "child": {str(a.pk): "a", str(b.pk): 5},
        "step": {str(steps[0].pk): 2},
    }
    assert rows[doomed.pk].status == rows[doomed_too.pk].status == JobStatus.CANCELLED
    assert rows[doomed.pk].attempts == rows[doomed_too.pk].attempts == 0
    assert f"job #{dead.pk}" in rows[doomed_too.pk].last_error


def test_batch_callbacks_run_exactly_once_on_two_processes_of_four_threads(tmp_path):
    out = tmp_path / "callbacks"

    def callbacks(name: str) -> dict[str, object]:
        return {
            "on_success": jobs.batch_report.s(str(out), f"{name} success"),
            "on_failure": jobs.batch_report.s(str(out), f"{name} failure"),
            "on_complete": jobs.batch_report.s(str(out), f"{name} complete"),
        }

    with batch(**callbacks("first"), description="a few fail") as first:  # type: ignore[arg-type]
        jobs.add.enqueue_many([(i, i) for i in range(295)])
        for _ in range(5):
            jobs.fails_once_dead.enqueue()
    with batch(**callbacks("second")) as second:  # type: ignore[arg-type]
        for i in range(300):
            jobs.add.enqueue(i, 1)
    proc = start_worker("--processes", "2", "--threads", "4", "--batch-size", "20")
    try:
        wait_until(lambda: len(lines(out)) >= 4 and all_ended(), timeout=120)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    ran = Counter(line["callback"] for line in lines(out))
    assert ran == Counter(["first failure", "first complete", "second success", "second complete"])
    by_callback = {line["callback"]: line for line in lines(out)}
    assert by_callback["first complete"]["batch"] == first.id
    assert by_callback["first complete"]["counts"]["dead"] == 5
    assert by_callback["second success"]["counts"]["completed"] == 300
    for b in (first, second):
        assert len(Batch.objects.get(pk=b.id).fired) == 2


def test_an_async_callback_is_stored_as_async_and_runs_on_the_event_loop(tmp_path):
    from django_pgqueue import operations

    out = tmp_path / "callbacks"
    with batch(
        on_success=jobs.batch_report.s(str(out), "success"),
        on_complete=async_jobs.async_batch_report.s(str(out), "complete"),
    ) as b:
        jobs.add.enqueue_many([(i, i) for i in range(20)])
        async_jobs.async_add.enqueue_many([(i, 1) for i in range(20)])
    stored = Batch.objects.get(pk=b.id)
    assert (stored.on_complete["is_async"], stored.on_success["is_async"]) == (True, False)
    proc = start_worker("--threads", "2")
    try:
        wait_until(lambda: len(lines(out)) >= 2 and all_ended(), timeout=60)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    rows = {j.name: j for j in Job.objects.filter(callback_of=b.id)}
    complete = rows[async_jobs.async_batch_report.name]
    success = rows[jobs.batch_report.name]
    assert (complete.is_async, complete.status) == (True, JobStatus.COMPLETED)
    assert (success.is_async, success.status) == (False, JobStatus.COMPLETED)
    by_callback = {line["callback"]: line for line in lines(out)}
    assert by_callback["complete"]["job"] == complete.pk
    assert by_callback["complete"]["thread"] == "pgqueue-asyncio"
    db = operations.DjangoDatabase("default")
    assert [v for v in operations.violations(db) if v.count] == []


def test_fan_in_of_a_thousand_parents_on_two_processes_runs_the_child_once(tmp_path):
    out = tmp_path / "out"
    parents = jobs.noop.enqueue_many([()] * 1000)
    child = jobs.record.using(after=parents).enqueue(str(out), "child")
    assert Job.objects.get(pk=child.pk).parents_left == 1000
    proc = start_worker("--processes", "2", "--threads", "8", "--batch-size", "25")
    try:
        wait_until(all_ended, timeout=120)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    row = Job.objects.get(pk=child.pk)
    assert (row.status, row.parents_left, row.attempts) == (JobStatus.COMPLETED, 0, 1)
    assert len(out.read_text().splitlines()) == 1


def test_the_worker_running_the_last_member_killed_its_callback_runs_once(tmp_path):
    out = tmp_path / "callbacks"
    marker = tmp_path / "stalled"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        jobs.noop.enqueue_many([()] * 20)
        last = jobs.stalls_first_time.enqueue(str(marker))
    env = worker_env(PGQUEUE_VISIBILITY_TIMEOUT="2", PGQUEUE_HEARTBEAT_INTERVAL="0.3")
    proc = start_worker("--threads", "2", env=env)
    wait_until(lambda: marker.exists() and Job.objects.filter(status="pending").count() == 0)
    os.killpg(proc.pid, signal.SIGKILL)  # before the last member's outcome is written
    proc.wait(timeout=30)
    wait_until(lambda: other_active_backends() == 0)
    assert Job.objects.get(pk=last.pk).status == JobStatus.RUNNING
    assert Batch.objects.get(pk=b.id).finished_at is None and not out.exists()
    proc = start_worker("--threads", "2", env=env)  # reclaims it past the visibility timeout
    try:
        wait_until(lambda: out.exists() and all_ended(), timeout=60)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert Job.objects.get(pk=last.pk).attempts == 2
    assert [line["callback"] for line in lines(out)] == ["complete"]
    assert lines(out)[0]["counts"]["completed"] == 21
