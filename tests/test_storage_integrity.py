"""The job table is the truth (docs/storage.md): ready rows follow every change of their job,
the claims check what they take against the job row, the check names what breaks an
invariant, and the repair (``pgqueue_repair``, and the workers by themselves) restores it.

Each test is a case that once broke: through the public API, and a real worker where a worker
stalled.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import IntegrityError, connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import limit_queue, operations, pause_queue
from django_pgqueue.models import Job
from django_pgqueue.sql import integrity as integrity_sql
from django_pgqueue.states import JobStatus
from tests.testapp import jobs
from tests.utils import (
    migrated_back_to,
    run_worker,
    start_worker,
    stop,
    wait_until,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def violations() -> dict[str, tuple[int, ...]]:
    db = operations.DjangoDatabase("default")
    return {v.kind: v.first_ids for v in operations.violations(db)}


def claimed_ids(limit: int = 10, queues: list[str] | None = None) -> list[int]:
    return [job.pk for job in Job.objects.claim("test", queues, limit)]


def statuses(ids: list[int]) -> dict[int, str]:
    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))


def without_triggers(enqueue: object, using: str = "default") -> Job:
    """``enqueue()`` with the job table's triggers off, as a ``pg_restore --disable-triggers``
    or a logical-replication apply writes rows: the job has no ready row."""
    with transaction.atomic(using=using):
        with connections[using].cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
        return enqueue()  # type: ignore[operator, no-any-return]


def check_output(database: str = "default") -> str:
    out = StringIO()
    try:
        call_command("check", "--database", database, stdout=out, stderr=out)
    except SystemCheckError as exc:
        return str(exc)
    return out.getvalue()


# --- a job's ready rows follow the job --------------------------------------------------------


def test_cancel_then_retry_with_a_queue_paused_runs_every_job_once():
    """Critical once: the cancel left the ring row, the retry added a second, and every
    limited claim (any queue paused) failed with CardinalityViolation."""
    pause_queue("elsewhere")
    ids = [jobs.noop.enqueue().pk for _ in range(4)]
    Job.objects.filter(pk=ids[1]).cancel()
    Job.objects.filter(pk=ids[1]).retry()
    assert violations() == {}
    assert sorted(claimed_ids(limit=10)) == ids
    assert set(statuses(ids).values()) == {JobStatus.RUNNING}


def test_cancel_then_retry_with_a_queue_paused_a_real_worker_runs_every_job():
    pause_queue("elsewhere")
    ids = [jobs.noop.enqueue().pk for _ in range(6)]
    for victim in ids[::2]:
        Job.objects.filter(pk=victim).cancel()
        Job.objects.filter(pk=victim).retry()
    result = run_worker("--threads", "1", "--batch-size", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(statuses(ids).values()) == {JobStatus.COMPLETED}
    assert "CardinalityViolation" not in result.stderr


def test_a_cancelled_then_deleted_job_does_not_end_a_claim():
    first, second = jobs.noop.enqueue(), jobs.noop.enqueue()
    Job.objects.filter(pk=first.pk).cancel()
    Job.objects.filter(pk=first.pk).delete()
    assert violations() == {}
    assert claimed_ids(limit=1) == [second.pk]


def test_a_worker_with_one_thread_runs_past_a_cancelled_and_deleted_job():
    ids = [jobs.noop.enqueue().pk for _ in range(4)]
    Job.objects.filter(pk=ids[0]).cancel()
    Job.objects.filter(pk=ids[0]).delete()
    result = run_worker("--threads", "1", "--batch-size", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(statuses(ids[1:]).values()) == {JobStatus.COMPLETED}


@override_settings(PGQUEUE_RETENTION=0)
def test_a_cancelled_scheduled_job_leaves_nothing_behind_when_pruned():
    scheduled = jobs.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
    Job.objects.filter(pk=scheduled.pk).cancel()
    assert Job.objects.prune() == 1
    assert violations() == {}
    # Its time comes: nothing of it is promoted into the ring.
    assert operations.promote(operations.DjangoDatabase("default")) == 0


def test_a_pending_job_moved_by_update_to_a_paused_queue_waits():
    pause_queue("paused")
    moved, other = jobs.noop.enqueue(), jobs.noop.enqueue()
    Job.objects.filter(pk=moved.pk).update(queue="paused")
    assert violations() == {}
    assert claimed_ids(limit=10) == [other.pk]
    # A worker serving only the job's old queue does not run it either.
    result = run_worker("--queue", "default")
    assert result.returncode == 0, result.stderr[-3000:]
    assert statuses([moved.pk]) == {moved.pk: JobStatus.PENDING}


def test_a_pending_job_given_a_busy_concurrency_key_by_update_waits_for_it():
    busy = jobs.noop.using(concurrency_key="k").enqueue()
    assert claimed_ids(limit=1) == [busy.pk]
    keyed, plain = jobs.noop.enqueue(), jobs.noop.enqueue()
    Job.objects.filter(pk=keyed.pk).update(concurrency_key="k")
    assert violations() == {}
    assert claimed_ids(limit=10) == [plain.pk]
    Job.objects.filter(pk=busy.pk).update(status=JobStatus.COMPLETED)
    assert claimed_ids(limit=10) == [keyed.pk]


def test_a_rate_key_given_by_update_is_applied():
    limited = jobs.charge.enqueue(0)  # defines the 10/s window of its rate key, "stripe"
    Job.objects.filter(pk=limited.pk).delete()
    ids = [jobs.noop.enqueue().pk for _ in range(15)]
    Job.objects.filter(pk__in=ids).update(rate_key="stripe")
    assert violations() == {}
    assert len(claimed_ids(limit=50)) == 10


def test_a_locked_head_job_is_stepped_over(other_connection):
    head, second = jobs.noop.using(priority=5).enqueue(), jobs.noop.enqueue()
    with other_connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT id FROM pgqueue_job WHERE id = %s FOR UPDATE", [head.pk])
        try:
            assert claimed_ids(limit=1) == [second.pk]
        finally:
            cursor.execute("ROLLBACK")
    assert claimed_ids(limit=1) == [head.pk]


def test_limited_and_plain_claims_step_over_a_locked_head_job(other_connection):
    limit_queue("default", concurrency_limit=5)
    head, second = jobs.noop.using(priority=5).enqueue(), jobs.noop.enqueue()
    with other_connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT id FROM pgqueue_job WHERE id = %s FOR UPDATE", [head.pk])
        try:
            assert claimed_ids(limit=1) == [second.pk]
        finally:
            cursor.execute("ROLLBACK")


# --- the check and the repair -----------------------------------------------------------------


def test_a_stranded_job_is_named_by_the_check_and_repaired_by_pgqueue_repair():
    stranded = without_triggers(jobs.noop.enqueue)
    assert violations() == {"stranded": (stranded.pk,)}
    assert claimed_ids() == [], "no claim can reach it"
    text = check_output()
    assert "django_pgqueue.E101" in text and f"#{stranded.pk}" in text

    out = StringIO()
    call_command("pgqueue_repair", "--dry-run", stdout=out)
    assert "E101" in out.getvalue() and "nothing changed" in out.getvalue()
    assert violations() == {"stranded": (stranded.pk,)}

    out = StringIO()
    call_command("pgqueue_repair", stdout=out)
    assert "1 jobs given their ready row again" in out.getvalue()
    assert violations() == {}
    assert "E101" not in check_output()
    call_command("pgqueue_repair", stdout=StringIO())  # idempotent
    assert claimed_ids() == [stranded.pk]


def test_the_check_names_every_kind_of_violation_and_the_repair_fixes_them():
    duplicated, disagreeing, orphaned = (jobs.noop.enqueue() for _ in range(3))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "INSERT INTO pgqueue_ready SELECT * FROM pgqueue_ready WHERE job_id = %s",
            [duplicated.pk],
        )
        cursor.execute("UPDATE pgqueue_job SET queue = 'other' WHERE id = %s", [disagreeing.pk])
        cursor.execute("UPDATE pgqueue_job SET status = 'cancelled' WHERE id = %s", [orphaned.pk])
    assert violations() == {
        "duplicated": (duplicated.pk,),
        "disagreeing": (disagreeing.pk,),
        "orphaned": (orphaned.pk,),
    }
    text = check_output()
    assert all(f"django_pgqueue.E10{n}" in text for n in (2, 3, 4))
    # The claim runs the duplicated job once and leaves the others.
    assert sorted(claimed_ids(limit=10)) == [duplicated.pk]
    Job.objects.filter(pk=duplicated.pk).update(status=JobStatus.PENDING)
    call_command("pgqueue_repair", stdout=StringIO())
    assert violations() == {}
    assert sorted(claimed_ids(limit=10, queues=["default", "other"])) == [
        duplicated.pk,
        disagreeing.pk,
    ]


@pytest.mark.parametrize("path", ["plain", "limited"])
def test_a_claim_takes_a_job_with_two_ready_rows_once_and_both_rows_go(path):
    """S1 broken (a job with a second ready row): the claim that takes the job deletes both
    of its rows, and only the rows of the jobs it took: a job waiting for a busy concurrency
    key keeps its row, on the plain claim and the limited one alike."""
    if path == "limited":
        limit_queue("default", concurrency_limit=100)
    plain, other = jobs.noop.enqueue(), jobs.noop.enqueue()
    keyed, waiting = (jobs.noop.using(concurrency_key="k").enqueue() for _ in range(2))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "INSERT INTO pgqueue_ready SELECT * FROM pgqueue_ready WHERE job_id = ANY(%s)",
            [[plain.pk, keyed.pk]],
        )
    assert violations() == {"duplicated": (plain.pk, keyed.pk)}
    assert sorted(claimed_ids(limit=10)) == sorted([plain.pk, other.pk, keyed.pk])
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id FROM pgqueue_ready")
        assert [row[0] for row in cursor.fetchall()] == [waiting.pk]
    assert violations() == {}


def test_the_check_names_a_rate_window_past_its_bound():
    limit_queue("capped", rate_limit="10/s")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_rate_window SET counts = '{1, 2}' WHERE id = 'queue:capped'")
    assert violations() == {"misshapen_windows": ("queue:capped",)}
    text = check_output()
    assert "django_pgqueue.E105" in text and "queue:capped" in text


def test_the_check_names_a_constraint_a_migration_left_unvalidated():
    # What a migration stopped between adding a CHECK NOT VALID and validating it leaves.
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE pgqueue_job DROP CONSTRAINT pgqueue_job_interruptions_check, "
            "ADD CONSTRAINT pgqueue_job_interruptions_check CHECK (interruptions >= 0) NOT VALID"
        )
    name = "pgqueue_job.pgqueue_job_interruptions_check"
    assert violations() == {"unvalidated": (name,)}
    text = check_output()
    assert "django_pgqueue.E106" in text and name in text and "VALIDATE CONSTRAINT" in text
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE pgqueue_job VALIDATE CONSTRAINT pgqueue_job_interruptions_check"
        )
    assert violations() == {}


def test_the_check_names_the_status_check_and_an_index_a_concurrent_build_left_invalid():
    # What 0022/0023 stopped half-way leave: the status CHECK not validated yet, and an index
    # whose concurrent build failed (here a unique one, over two rows that share its key).
    jobs.noop.enqueue()
    jobs.noop.enqueue()
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE pgqueue_job DROP CONSTRAINT pgqueue_job_status_valid, "
            "ADD CONSTRAINT pgqueue_job_status_valid CHECK (status IN ('pending', 'waiting', "
            "'running', 'completed', 'dead', 'cancelled')) NOT VALID"
        )
        with pytest.raises(IntegrityError):
            cursor.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY pgqueue_job_broken ON pgqueue_job (name)"
            )
    found = violations()["unvalidated"]
    assert found == (
        "pgqueue_job.pgqueue_job_broken (index)",
        "pgqueue_job.pgqueue_job_status_valid",
    )
    text = check_output()
    assert "django_pgqueue.E106" in text and "pgqueue_job_broken" in text
    assert "migrate again" in text
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX pgqueue_job_broken")
        cursor.execute("ALTER TABLE pgqueue_job VALIDATE CONSTRAINT pgqueue_job_status_valid")
    assert violations() == {}


def test_the_check_warns_of_a_worker_row_listening_without_its_connection_until_a_reading():
    from django_pgqueue.models import Worker as WorkerRow
    from django_pgqueue.sql import rota as rota_sql

    # What a worker killed while listening leaves (its heartbeat never cleared the flag).
    WorkerRow.objects.create(worker_id="gone:1", hostname="h", pid=1, listening=True)
    assert violations() == {"deaf_listeners": ("gone:1",)}
    text = check_output()
    assert "django_pgqueue.W111" in text and "gone:1" in text and "(S12)" in text
    assert "django_pgqueue.E1" not in text  # a warning: the command does not fail on it
    # A listener that is there is fine: one connection named as a worker's listener.
    listener = connections.create_connection("default")
    try:
        with listener.cursor() as cursor:
            cursor.execute("SET application_name = %s", [rota_sql.listener_name("here:1")])
        WorkerRow.objects.create(worker_id="here:1", hostname="h", pid=2, listening=True)
        assert violations() == {"deaf_listeners": ("gone:1",)}
        with connection.cursor() as cursor:  # any worker's reading of the rota corrects it
            cursor.execute(rota_sql.PEERS, {"alive": 60.0})
        assert violations() == {}
        assert WorkerRow.objects.get(pk="here:1").listening
    finally:
        listener.close()


def replica_sql(statement: str, params: list[object]) -> None:
    """Run ``statement`` with the triggers off (a logical-replication apply, a bug)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(statement, params)


def test_the_check_names_workflow_counts_that_break_and_the_repair_fixes_them():
    """F1-F3: a child's count, a parent's mark, a waiting job nothing will release."""
    parent = jobs.noop.enqueue()
    child = jobs.noop.using(after=[parent]).enqueue()
    lonely = jobs.noop.using(after=[jobs.noop.enqueue()]).enqueue()
    unmarked = jobs.noop.enqueue()
    unmarked_child = jobs.noop.using(after=[unmarked]).enqueue()
    assert violations() == {}
    # The parent completes with the triggers off: its child is neither counted nor released.
    replica_sql("UPDATE pgqueue_job SET status = 'completed' WHERE id = %s", [parent.pk])
    # A waiting job whose count says nothing is left.
    replica_sql("UPDATE pgqueue_job SET parents_left = 0 WHERE id = %s", [lonely.pk])
    replica_sql("UPDATE pgqueue_job SET dependents = false WHERE id = %s", [unmarked.pk])
    found = violations()
    assert found["miscounted_parents"] == (child.pk, lonely.pk)
    assert found["stuck_waiting"] == (lonely.pk,)
    assert found["unmarked_parents"] == (unmarked.pk,)
    text = check_output()
    assert all(f"django_pgqueue.E10{n}" in text for n in (7, 8, 9))
    call_command("pgqueue_repair", stdout=StringIO())
    assert violations() == {}
    assert Job.objects.get(pk=child.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=lonely.pk).status == JobStatus.WAITING  # its parent is pending
    Job.objects.filter(pk=unmarked.pk).update(status=JobStatus.DEAD)  # now reaches its child
    assert Job.objects.get(pk=unmarked_child.pk).status == JobStatus.CANCELLED


def test_the_check_names_a_batch_whose_counts_break_and_the_repair_finishes_it():
    from django_pgqueue import batch
    from django_pgqueue.models import Batch

    with batch(on_complete=jobs.noop.s()) as b:
        member = jobs.noop.enqueue()
    replica_sql("UPDATE pgqueue_job SET status = 'completed' WHERE id = %s", [member.pk])
    assert violations() == {"miscounted_batches": (f"batch #{b.id}",), "orphaned": (member.pk,)}
    assert "django_pgqueue.E110" in check_output()
    call_command("pgqueue_repair", stdout=StringIO())
    assert violations() == {}
    row = Batch.objects.get(pk=b.id)
    assert row.finished_at is not None and [f["callback"] for f in row.fired] == ["on_complete"]


def test_the_check_says_nothing_on_a_database_not_migrated_that_far():
    with migrated_back_to("0011_ready_held_queues"):
        text = check_output()
    assert "django_pgqueue.E1" not in text and "Traceback" not in text


def test_migrate_is_not_stopped_by_a_violation():
    without_triggers(jobs.noop.enqueue)
    call_command("migrate", verbosity=0)  # runs the database checks: not the storage's


def test_a_worker_puts_a_stranded_job_back_by_itself():
    stranded = without_triggers(jobs.noop.enqueue)
    worker = start_worker(
        env=worker_env(PGQUEUE_REPAIR_INTERVAL="0.5", PGQUEUE_POLL_INTERVAL="0.2")
    )
    try:
        wait_until(lambda: statuses([stranded.pk])[stranded.pk] == JobStatus.COMPLETED)
    finally:
        log = stop(worker)
    assert f"#{stranded.pk}" in log and "runnable again" in log


def test_repair_while_two_workers_drain_runs_each_job_exactly_once(tmp_path):
    """3,000 jobs, a third of them stranded and a sixth with a second ready row, drained by two
    worker processes while ``pgqueue_repair`` runs beside them: each job runs once."""
    out = tmp_path / "out"
    calls = [(str(out), f"job-{i}", 0.0) for i in range(3000)]
    ids = list(jobs.record.enqueue_many(calls[:2000]))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        ids += list(jobs.record.enqueue_many(calls[2000:]))
        cursor.execute(
            "INSERT INTO pgqueue_ready SELECT * FROM pgqueue_ready WHERE job_id = ANY(%s)",
            [ids[:500]],
        )
    env = worker_env(PGQUEUE_REPAIR_INTERVAL="3600")
    workers = [start_worker("--worker-id", f"drain-{n}", env=env) for n in range(2)]
    try:
        repairs = 0
        while Job.objects.filter(pk__in=ids, status=JobStatus.PENDING).exists():
            call_command("pgqueue_repair", stdout=StringIO())
            repairs += 1
            assert not any(kind in violations() for kind in ("stranded", "duplicated"))
            time.sleep(0.05)  # repairs beside the drain, not back to back
        wait_until(
            lambda: not Job.objects.filter(pk__in=ids).exclude(status=JobStatus.COMPLETED).exists()
        )
    finally:
        logs = [stop(worker) for worker in workers]
    assert repairs >= 1
    ran = Counter(line.split()[0] for line in out.read_text().splitlines())
    assert len(ran) == 3000 and set(ran.values()) == {1}, logs
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    assert violations() == {}


# --- the workers' repair rounds -----------------------------------------------------------------

RANGE = integrity_sql.REPAIR_RANGE


def jobs_ranges_apart(count: int) -> list[Job]:
    """``count`` stranded jobs, each in a range of its own, a range apart (the job ids are moved
    on as years of history would move them)."""
    made = []
    for _ in range(count):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence('pgqueue_job', 'id'), "
                "(SELECT coalesce(max(id), 0) FROM pgqueue_job) / %s * %s + 2 * %s)",
                [RANGE, RANGE, RANGE],
            )
        made.append(without_triggers(jobs.noop.enqueue))
    return made


def test_repair_rounds_go_over_every_range_then_start_again_at_the_oldest():
    Job.objects.all().delete()
    stranded = jobs_ranges_apart(3)
    # Three jobs two ranges apart: five ranges from the oldest job's to the newest's. A round
    # with all the time it wants repairs what it owes (all five, after the first round's one).
    rounds = operations.RepairRounds(interval=1e-9, budget=60.0)
    db = operations.DjangoDatabase("default")
    found: list[int] = []
    for _ in range(3):  # 1 + 5 + 5 ranges: wherever the shared position stood, each twice
        repaired, _ = rounds.round(db)
        found += repaired.rederived
        with connection.cursor() as cursor:  # lost again, for the next pass to find
            cursor.execute("DELETE FROM pgqueue_ready WHERE job_id = ANY(%s)", [repaired.rederived])
    assert rounds.ranges == 5
    assert sorted(set(found)) == sorted(job.pk for job in stranded)
    assert all(found.count(job.pk) >= 2 for job in stranded)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_repair_rounds_slow_down_as_many_times_as_workers_share_them():
    Job.objects.all().delete()
    jobs_ranges_apart(3)  # five ranges
    db = operations.DjangoDatabase("default")
    clock = Clock()
    first, second = (operations.RepairRounds(interval=30.0, clock=clock) for _ in range(2))
    _, wait = first.round(db)
    assert wait == pytest.approx(30.0 / 5)  # alone: five ranges in 30 s
    second.round(db)
    for _ in range(3):
        clock.now += 6.0
        assert first.round(db)[1] == pytest.approx(2 * 30.0 / 5)  # one of two: half as often
        assert second.round(db)[1] == pytest.approx(2 * 30.0 / 5)
        clock.now += 6.0
        assert first.round(db) == (operations.Repaired(), pytest.approx(6.0))  # not due yet
        assert second.round(db)[1] == pytest.approx(6.0)


def test_the_check_names_a_ready_row_whose_kind_is_not_its_jobs():
    """S2/S13: an async job's ready row says async; one that does not is named (E103) and the
    repair puts it right, so the claim takes the job as the kind it is."""
    from tests.testapp import async_jobs

    job = async_jobs.async_noop.enqueue()
    assert Job.objects.get(pk=job.pk).is_async
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE pgqueue_ready SET is_async = false WHERE job_id = %s", [job.pk])
    assert violations() == {"disagreeing": (job.pk,)}
    assert "django_pgqueue.E103" in check_output()
    call_command("pgqueue_repair", stdout=StringIO())
    assert violations() == {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT is_async FROM pgqueue_ready WHERE job_id = %s", [job.pk])
        assert cursor.fetchall() == [(True,)]


def test_a_jobs_kind_changed_by_update_moves_its_ready_row_along():
    """S2: an UPDATE of ``is_async`` (by hand) is followed by the ready row, as the other
    columns the claims choose by are: the claim then takes it as the kind it says."""
    job = jobs.noop.enqueue()
    Job.objects.filter(pk=job.pk).update(is_async=True)
    assert violations() == {}
    db = operations.DjangoDatabase("default")
    sync_only = operations.ClaimRequest(
        worker_id="w", limit=5, async_limit=0, visibility_timeout=60, reclaim=False
    )
    assert operations.claim(db, sync_only)[0] == []
    async_only = operations.ClaimRequest(
        worker_id="w", limit=0, async_limit=5, visibility_timeout=60, reclaim=False
    )
    assert [j.pk for j in operations.claim(db, async_only)[0]] == [job.pk]
