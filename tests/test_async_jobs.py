"""``async def`` jobs (docs/async.md): stored as such, claimed by kind, run many at once on
one event loop per worker process, beside its threads; real ``run_jobs`` processes."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.db import connection, connections

from django_pgqueue import current_job, operations, pause_queue
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.models import Job
from django_pgqueue.states import JobStatus
from tests.testapp import async_jobs, jobs
from tests.utils import (
    most_overlapping,
    run_worker,
    start_worker,
    stop,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))


def marks(directory: Path) -> list[str]:
    path = directory / "marks"
    return path.read_text().splitlines() if path.exists() else []


# --- storing and claiming the kind -------------------------------------------------------------


def test_an_async_job_is_stored_as_such_by_every_way_of_enqueueing():
    one = async_jobs.async_add.enqueue(1, 2)
    few = async_jobs.async_add.enqueue_many([(1, 2), (3, 4)])
    many = async_jobs.async_noop.enqueue_many([()] * 150)  # COPY
    sync = jobs.add.enqueue(1, 2)
    kinds = dict(Job.objects.values_list("pk", "is_async"))
    assert all(kinds[i] for i in [one.pk, *few, *many])
    assert kinds[sync.pk] is False
    assert one.is_async


def test_aenqueue_enqueues_from_async_code():
    async def enqueue_then_close() -> Job:
        try:
            return await async_jobs.async_add.aenqueue(2, 3)
        finally:  # the connection of the thread sync_to_async ran it on
            await sync_to_async(connections.close_all)()

    job = asyncio.run(enqueue_then_close())
    assert Job.objects.get(pk=job.pk).is_async
    with pytest.raises(InvalidJobArguments):  # checked before anything is sent
        asyncio.run(async_jobs.async_add.aenqueue(2))


def test_aenqueue_inside_a_batch_block_makes_a_member_of_it():
    from django_pgqueue import batch

    async def enqueue_then_close() -> Job:
        try:
            return await async_jobs.async_add.aenqueue(1, 1)
        finally:
            await sync_to_async(connections.close_all)()

    with batch(description="async members") as b:
        job = asyncio.run(enqueue_then_close())
        plain = jobs.noop.enqueue()
    assert Job.objects.get(pk=job.pk).batch_id == b.id
    assert Job.objects.get(pk=plain.pk).batch_id == b.id


def test_a_claim_takes_each_kind_within_its_own_room():
    sync_ids = [jobs.noop.enqueue().pk for _ in range(5)]
    async_ids = async_jobs.async_noop.enqueue_many([()] * 5)
    db = operations.DjangoDatabase("default")
    request = operations.ClaimRequest(
        worker_id="w", limit=2, async_limit=3, visibility_timeout=60, reclaim=False
    )
    claimed, taken = operations.claim(db, request)
    assert taken == 5
    assert sorted(j.pk for j in claimed if not j.is_async) == sync_ids[:2]
    assert sorted(j.pk for j in claimed if j.is_async) == async_ids[:3]
    # No room for sync jobs: only async ones, though the sync ones come first in the ring.
    request = operations.ClaimRequest(
        worker_id="w", limit=0, async_limit=10, visibility_timeout=60, reclaim=False
    )
    claimed, _ = operations.claim(db, request)
    assert sorted(j.pk for j in claimed) == async_ids[3:]
    # The manager's claim (no async_limit): either kind, ``limit`` in all.
    assert len(Job.objects.claim("w", None, 2)) == 2


@pytest.mark.parametrize("limited", [False, True])
def test_a_claim_without_room_for_async_jobs_leaves_them_for_the_next(limited):
    """No room for async jobs (``async_limit=0``): the claim runs without their branch
    (``sql.ready.by_kind``), plain or limited, and takes sync jobs only, however many async
    ones come first; with room, the next takes them."""
    async_ids = async_jobs.async_noop.enqueue_many([()] * 3)
    sync_ids = [jobs.noop.enqueue().pk for _ in range(3)]
    if limited:
        pause_queue("elsewhere")  # any queue with settings: the limited claim
    db = operations.DjangoDatabase("default")

    def claim(limit: int, async_limit: int) -> list[int]:
        request = operations.ClaimRequest(
            worker_id="w", limit=limit, async_limit=async_limit, visibility_timeout=60
        )
        return sorted(j.pk for j in operations.claim(db, request)[0])

    assert claim(10, 0) == sync_ids
    assert claim(10, 10) == async_ids


def test_an_async_job_called_directly_has_a_standalone_current_job():
    result = asyncio.run(async_jobs.async_sleep(0, None))
    assert result["id"] is None
    assert current_job().id is None  # nothing left bound


def test_testing_run_jobs_runs_async_jobs():
    from django_pgqueue.testing import run_jobs

    job = async_jobs.async_add.enqueue(20, 22)
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, 42)


# --- a real worker ------------------------------------------------------------------------------


def test_one_process_with_two_threads_runs_500_sleeping_async_jobs_together(tmp_path):
    """All 500 are awaiting at once: every one started before any ended (timestamps, not a
    wall-clock bound); and each read its own ``current_job()`` after its await."""
    ids = async_jobs.async_sleep.enqueue_many([(2.0,)] * 500)
    result = run_worker("--threads", "2", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = list(Job.objects.filter(pk__in=ids).values_list("pk", "status", "result"))
    assert Counter(status for _, status, _ in rows) == {JobStatus.COMPLETED: 500}
    assert all(res["id"] == pk for pk, _, res in rows)
    intervals = [(res["start"], res["end"]) for _, _, res in rows]
    assert most_overlapping(intervals) == 500
    # The same process ran sync jobs on its threads meanwhile (nothing was starved).


def test_sync_and_async_jobs_share_a_worker(tmp_path):
    sync_ids = jobs.add.enqueue_many([(i, i) for i in range(20)])
    async_ids = async_jobs.async_add.enqueue_many([(i, 1) for i in range(20)])
    result = run_worker("--threads", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert statuses(sync_ids + async_ids) == {JobStatus.COMPLETED: 40}
    results = dict(Job.objects.filter(pk__in=async_ids).values_list("pk", "result"))
    assert sorted(results.values()) == [i + 1 for i in range(20)]


def test_a_failing_async_job_goes_dead_with_its_traceback_and_a_timed_out_one_is_cancelled(
    tmp_path,
):
    failing = async_jobs.async_fails.enqueue("it broke")
    slow = async_jobs.async_too_slow.enqueue(str(tmp_path))
    result = run_worker("--threads", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    failing.refresh_from_db()
    assert failing.status == JobStatus.DEAD
    assert "RuntimeError: it broke" in failing.last_error
    assert "async_fails" in failing.last_error  # the traceback names the job's code
    slow.refresh_from_db()
    assert slow.status == JobStatus.DEAD
    assert "JobTimeout" in slow.last_error
    # Cancelled where it awaited: its finally block ran, nothing was abandoned.
    assert marks(tmp_path) == [f"finally {slow.pk}"]


def test_cancelling_a_running_async_job_cancels_its_task(tmp_path):
    job = async_jobs.async_waits_to_be_cancelled.enqueue(str(tmp_path))
    proc = start_worker("--threads", "1")
    try:
        wait_until(lambda: f"start {job.pk}" in marks(tmp_path))
        # Its progress reaches the row, as a sync job's does.
        wait_until(lambda: Job.objects.get(pk=job.pk).progress is not None)
        Job.objects.get(pk=job.pk).cancel()
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED)
    finally:
        log = stop(proc)
    assert f"cancelled {job.pk} True" in marks(tmp_path), log[-3000:]


def test_sigterm_with_200_async_jobs_in_flight_completes_each_exactly_once(tmp_path):
    """The first worker is stopped while 200 jobs await: those that finish within its shutdown
    timeout are written, the others handed back (no attempt spent) and run by the next worker;
    no job completes twice."""
    ids = async_jobs.async_sleep.enqueue_many([(3.0, str(tmp_path))] * 200)
    proc = start_worker("--threads", "1", "--shutdown-timeout", "1")
    try:
        wait_until(lambda: sum(m.startswith("start") for m in marks(tmp_path)) >= 200)
    finally:
        log = stop(proc)
    assert "handed back as interrupted" in log, log[-3000:]
    assert statuses(ids)[JobStatus.RUNNING] == 0
    result = run_worker("--threads", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert statuses(ids) == {JobStatus.COMPLETED: 200}
    done = Counter(m.split()[1] for m in marks(tmp_path) if m.startswith("done"))
    assert set(done) == {str(i) for i in ids} and max(done.values()) == 1
    interrupted = Job.objects.filter(pk__in=ids, interruptions__gt=0)
    assert interrupted.exists()
    assert all(j.attempts == 1 for j in interrupted)  # handed back: no attempt spent


def test_sigkill_mid_flight_async_jobs_are_reclaimed(tmp_path):
    ids = async_jobs.async_sleep_retried.enqueue_many([(30.0, str(tmp_path))] * 20)
    env = worker_env(PGQUEUE_VISIBILITY_TIMEOUT="2")
    proc = start_worker("--threads", "1", env=env)
    try:
        wait_until(lambda: sum(m.startswith("start") for m in marks(tmp_path)) >= 20)
    finally:
        stop(proc, signal.SIGKILL)
    assert statuses(ids) == {JobStatus.RUNNING: 20}
    Job.objects.filter(pk__in=ids).update(args=[0.1, str(tmp_path)])
    time.sleep(2.5)  # past the visibility timeout: the next worker takes them back
    result = run_worker("--threads", "1", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert statuses(ids) == {JobStatus.COMPLETED: 20}
    assert all(j.attempts == 2 for j in Job.objects.filter(pk__in=ids))
    assert "WorkerLost" in Job.objects.get(pk=ids[0]).errors[0]["exception_class"]


def test_a_job_that_blocks_the_event_loop_is_named_in_a_warning():
    job = async_jobs.async_blocks_the_loop.enqueue(1.5)
    result = run_worker("--threads", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"#{job.pk} has blocked the event loop" in result.stderr
    assert "sync_to_async" in result.stderr


def test_an_async_job_reads_the_database_through_the_async_orm():
    job = async_jobs.async_reads_the_database.enqueue(0)
    Job.objects.filter(pk=job.pk).update(args=[job.pk])
    result = run_worker("--threads", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, f"{job.name} 1"), job.last_error


def test_async_jobs_database_connections_are_reused_then_closed():
    """300 async jobs' queries share the one connection of Django's thread for sync code
    (reused, not one each), and the worker closes it once it is old (CONN_MAX_AGE = 0 here):
    none is left open behind the jobs."""
    ids = async_jobs.async_backend_pid.enqueue_many([()] * 300)
    proc = start_worker("--threads", "1")
    try:
        wait_until(lambda: statuses(ids) == {JobStatus.COMPLETED: 300})
        pids = set(Job.objects.filter(pk__in=ids).values_list("result", flat=True))
        assert len(pids) < 30

        def others() -> int:  # this database's backends other than ours and the worker's own
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND application_name NOT LIKE 'pgqueue %%' "
                    "AND backend_type = 'client backend'"
                )
                return int(cursor.fetchone()[0])

        wait_until(lambda: others() == 0)
    finally:
        stop(proc)


def test_a_long_async_job_is_heartbeated_past_the_visibility_timeout(tmp_path):
    """A job awaiting 4 s under a 1.5 s visibility timeout: the worker's heartbeats keep its
    lock fresh, so its own reclaim (about once a second) never takes it back: one attempt, no
    ``WorkerLost``."""
    job = async_jobs.async_sleep_retried.enqueue(4.0, str(tmp_path))
    result = run_worker("--threads", "1", env=worker_env(PGQUEUE_VISIBILITY_TIMEOUT="1.5"))
    assert result.returncode == 0, result.stderr[-3000:]
    job.refresh_from_db()
    assert (job.status, job.attempts, job.errors) == (JobStatus.COMPLETED, 1, [])
    assert marks(tmp_path) == [f"start {job.pk}", f"done {job.pk}"]


def test_a_failing_async_job_is_retried_with_backoff(tmp_path):
    job = async_jobs.async_fails_until.enqueue(str(tmp_path), 3)
    result = run_worker("--threads", "1", env=worker_env(PGQUEUE_BACKOFF_BASE="0"))
    assert result.returncode == 0, result.stderr[-3000:]
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == (JobStatus.COMPLETED, 3, 3)
    assert [e["exception_class"] for e in job.errors] == ["builtins.ConnectionError"] * 2


def test_an_async_job_sees_the_shutdown_and_hands_itself_back(tmp_path):
    job = async_jobs.async_hands_itself_back.enqueue(str(tmp_path))
    proc = start_worker("--threads", "1")
    try:
        wait_until(lambda: f"start {job.pk}" in marks(tmp_path))
    finally:
        log = stop(proc)
    job.refresh_from_db()
    assert (job.status, job.interruptions) == (JobStatus.PENDING, 1), log[-3000:]
    assert "interrupted" in log


# --- a task that cannot be stopped: its process is replaced, as for an abandoned thread ---------

#: The worker output that says a process was replaced for a stuck task.
REPLACED = "replaced: it exited to stop an abandoned job thread or task"


def test_an_async_job_that_swallows_its_timeout_is_abandoned_and_its_process_replaced(tmp_path):
    """Timeout 1 s, cancel timeout 1 s: its task is cancelled at its timeout, catches the
    ``CancelledError`` and awaits on. The attempt fails (``JobTimeout``), the task is
    abandoned with its process, and the one async slot (``--async-concurrency 1``) is free
    again in the replacement: the job enqueued after it runs."""
    stuck = async_jobs.async_swallows_cancel.enqueue(str(tmp_path))
    proc = start_worker("--threads", "1", "--async-concurrency", "1", "--cancel-timeout", "1")
    try:
        wait_until(lambda: f"start {stuck.pk}" in marks(tmp_path))
        after = async_jobs.async_sleep.enqueue(0, str(tmp_path))
        wait_until(lambda: Job.objects.get(pk=after.pk).status == JobStatus.COMPLETED)
    finally:
        log = stop(proc)
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 1), log[-3000:]
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.JobTimeout"
    assert "after it was cancelled" in row.last_error
    assert "its task was abandoned" in row.last_error
    assert f"swallowed {stuck.pk}" in marks(tmp_path)  # it did catch the cancel
    assert "still running in an abandoned task of the event loop" in log
    assert REPLACED in log


def test_an_async_job_that_blocks_the_loop_past_its_timeout_is_abandoned(tmp_path):
    """``time.sleep(30)`` inside ``async def`` with a 1 s timeout: no cancel reaches it. Past
    its timeout and the cancel timeout its attempt fails (``JobTimeout``, the blocking named);
    the process's other jobs, claimed meanwhile (an async one waits on the blocked loop, a sync
    one runs on a thread), finish or are handed back interrupted (no attempt spent) within its
    shutdown timeout, and each completes once, in the replacement if not before."""
    stuck = async_jobs.async_blocks_past_its_timeout.enqueue(str(tmp_path), 30.0)
    out = tmp_path / "sync"
    proc = start_worker("--threads", "1", "--cancel-timeout", "1", "--shutdown-timeout", "1")
    try:
        wait_until(lambda: f"start {stuck.pk}" in marks(tmp_path))
        after = async_jobs.async_sleep.enqueue(0, str(tmp_path))
        sync = jobs.record.enqueue(str(out), "sync", 0.2)
        wait_until(lambda: statuses([after.pk, sync.pk]) == {JobStatus.COMPLETED: 2})
    finally:
        log = stop(proc)
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 1), log[-3000:]
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.JobTimeout"
    assert "it blocked the event loop" in row.last_error
    assert f"done {stuck.pk}" not in marks(tmp_path)  # it stopped with its process
    assert marks(tmp_path).count(f"done {after.pk}") == 1
    assert Job.objects.get(pk=after.pk).attempts == 1
    assert len(out.read_text().splitlines()) == 1
    assert REPLACED in log


@pytest.mark.parametrize("how", ["swallows", "blocks"])
def test_cancelling_an_async_job_that_will_not_stop_ends_it_and_frees_its_slot(tmp_path, how):
    """No timeout: a cancel request cancels its task, which catches ``CancelledError`` and
    awaits on (``swallows``), or never sees it, blocking the loop in ``time.sleep``
    (``blocks``). The cancel timeout (1 s) later it is recorded ``cancelled``
    (``CancelTimeout``) and its process replaced: the one async slot runs the next job."""
    if how == "swallows":
        stuck = async_jobs.async_ignores_cancel.enqueue(str(tmp_path))
    else:
        stuck = async_jobs.async_blocks_until_cancelled.enqueue(str(tmp_path), 30.0)
    proc = start_worker("--threads", "1", "--async-concurrency", "1", "--cancel-timeout", "1")
    try:
        wait_until(lambda: f"start {stuck.pk}" in marks(tmp_path))
        Job.objects.get(pk=stuck.pk).cancel()
        wait_until(lambda: Job.objects.get(pk=stuck.pk).status == JobStatus.CANCELLED)
        after = async_jobs.async_sleep.enqueue(0, str(tmp_path))
        wait_until(lambda: Job.objects.get(pk=after.pk).status == JobStatus.COMPLETED)
    finally:
        log = stop(proc)
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == (JobStatus.CANCELLED, 1), log[-3000:]
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.CancelTimeout"
    assert "its task was abandoned" in row.last_error
    if how == "swallows":
        assert f"swallowed {stuck.pk}" in marks(tmp_path)
    else:
        assert "it blocked the event loop" in row.last_error
        assert f"done {stuck.pk}" not in marks(tmp_path)  # it stopped with its process
    assert REPLACED in log


def test_an_abandoned_async_task_is_reported_until_it_ends_and_its_late_result_is_dropped(
    tmp_path,
):
    """Its process, replaced, first finishes its other job (a long sync one here): meanwhile
    ``pgqueue_status`` says the cancelled job still runs there, abandoned. Released by the
    test, the task returns: its result is dropped (the row stays cancelled, nothing completes
    twice) and the report ends."""
    release = tmp_path / "release"
    stuck = async_jobs.async_ignores_cancel_until.enqueue(str(tmp_path), str(release))
    jobs.long_export.enqueue(str(tmp_path / "export"), 120)  # keeps the process a while
    proc = start_worker(
        "--threads",
        "1",
        "--cancel-timeout",
        "0.5",
        "--shutdown-timeout",
        "120",
        "--worker-id",
        "abandoner",
        env=worker_env(PGQUEUE_HEARTBEAT_INTERVAL="0.2"),
    )
    label = (
        f"job #{stuck.pk} {stuck.name}: cancelled — still running in worker abandoner, abandoned"
    )

    def status_text() -> str:
        out = StringIO()
        call_command("pgqueue_status", stdout=out)
        return out.getvalue()

    try:
        wait_until(lambda: f"start {stuck.pk}" in marks(tmp_path))
        Job.objects.get(pk=stuck.pk).cancel()
        wait_until(lambda: Job.objects.get(pk=stuck.pk).status == JobStatus.CANCELLED)
        wait_until(lambda: label in status_text())
        assert f"finished {stuck.pk}" not in marks(tmp_path)  # still running: the label is true
        release.touch()
        wait_until(lambda: f"finished {stuck.pk}" in marks(tmp_path))
        wait_until(lambda: "Abandoned attempts still running" not in status_text())
    finally:
        log = stop(proc, timeout=120)
    row = Job.objects.get(pk=stuck.pk)
    assert (row.status, row.result) == (JobStatus.CANCELLED, None), log[-3000:]
    assert row.errors[-1]["exception_class"] == "django_pgqueue.exceptions.CancelTimeout"
    assert "ended after its task was abandoned; result dropped" in log
