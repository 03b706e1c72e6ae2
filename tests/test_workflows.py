"""Workflows (docs/workflows.md): jobs that wait for others, chains, batches, in the tables.

Through the public API and ``testing.run_jobs`` (the worker's claim, performer and outcome
write, in this thread); the real workers' cases are in ``tests/test_workflow_workers.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_pgqueue import UnknownParent, batch, chain, operations
from django_pgqueue.models import Batch, Job
from django_pgqueue.states import JobStatus
from django_pgqueue.testing import run_jobs
from tests.testapp import jobs
from tests.utils import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def status(job: Job | int) -> str:
    return Job.objects.get(pk=getattr(job, "pk", job)).status


def ready_rows(job: Job) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgqueue_ready WHERE job_id = %s", [job.pk])
        return int(cursor.fetchone()[0])


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def complete(job: Job, result: object = None) -> None:
    """Finish ``job`` as a worker does, through the claim and the outcome write."""
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.COMPLETED, result=result, finished_at=timezone.now()
    )


# --- waiting, release, order ------------------------------------------------------------------


def test_a_child_waits_without_a_ready_row_and_runs_after_both_parents(tmp_path):
    out = tmp_path / "out"
    a = jobs.add.enqueue(1, 2)
    b = jobs.add.enqueue(3, 4)
    child = jobs.collect_parents.using(after=[a, b.pk]).enqueue(str(out), "child")
    assert child.status == JobStatus.WAITING
    assert status(child) == JobStatus.WAITING and ready_rows(child) == 0
    assert Job.objects.get(pk=child.pk).parents_left == 2
    ran = run_jobs()
    assert [r.job_id for r in ran][-1] == child.pk  # after both parents
    assert status(child) == JobStatus.COMPLETED
    assert lines(out) == [{"tag": "child", "parents": {str(a.pk): 3, str(b.pk): 7}}]


def test_a_child_of_a_completed_parent_is_pending_once_committed():
    a = jobs.add.enqueue(1, 1)
    run_jobs()
    with transaction.atomic():
        child = jobs.add.using(after=[a]).enqueue(2, 2)
        assert status(child) == JobStatus.WAITING
    assert status(child) == JobStatus.PENDING and ready_rows(child) == 1


def test_an_unknown_parent_is_an_error_before_anything_is_written():
    before = Job.objects.count()
    with pytest.raises(UnknownParent, match="#999999"):
        jobs.add.using(after=[999999]).enqueue(1, 2)
    with pytest.raises(UnknownParent):
        jobs.add.using(after=[999999]).enqueue_many([(1, 2)])
    assert Job.objects.count() == before


def test_after_rejects_what_is_not_a_job_or_an_id():
    with pytest.raises(TypeError):
        jobs.add.using(after=["1"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        jobs.add.using(after=[Job()])
    with pytest.raises(TypeError):
        jobs.add.using(after=5)  # type: ignore[arg-type]


def test_a_rolled_back_enqueue_leaves_no_child_and_no_mark():
    a = jobs.add.enqueue(1, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.add.using(after=[a]).enqueue(2, 2)
        raise RuntimeError("rolled back")
    assert not Job.objects.get(pk=a.pk).dependents
    assert Job.objects.count() == 1


def test_a_parent_deleted_before_the_commit_fails_the_commit():
    a = jobs.add.enqueue(1, 1)
    other = connection.copy()
    try:
        with pytest.raises(Exception, match="no longer exists"), transaction.atomic():
            jobs.add.using(after=[a]).enqueue(2, 2)
            with other.cursor() as cursor:  # another session deletes it, committed
                cursor.execute("DELETE FROM pgqueue_job WHERE id = %s", [a.pk])
    finally:
        other.close()
    assert Job.objects.count() == 0


# --- cascade and retry ------------------------------------------------------------------------


def test_a_dead_parent_cancels_child_and_grandchild_which_never_run(tmp_path):
    out = tmp_path / "out"
    parent = jobs.fails_once_dead.enqueue()
    child = jobs.collect_parents.using(after=[parent]).enqueue(str(out), "child")
    grandchild = jobs.collect_parents.using(after=[child]).enqueue(str(out), "grandchild")
    run_jobs()
    assert status(parent) == JobStatus.DEAD
    child_row, grandchild_row = Job.objects.get(pk=child.pk), Job.objects.get(pk=grandchild.pk)
    assert child_row.status == grandchild_row.status == JobStatus.CANCELLED
    assert f"job #{parent.pk}" in child_row.last_error and "ended dead" in child_row.last_error
    assert f"job #{child.pk}" in grandchild_row.last_error
    assert f"job #{parent.pk}" in grandchild_row.last_error
    assert child_row.attempts == grandchild_row.attempts == 0
    assert not out.exists()


def test_a_child_enqueued_after_a_dead_parent_is_cancelled_at_commit():
    parent = jobs.fails_once_dead.enqueue()
    run_jobs()
    child = jobs.add.using(after=[parent]).enqueue(1, 2)
    assert status(child) == JobStatus.CANCELLED


def test_retrying_a_dead_parent_puts_the_children_it_cancelled_back_to_waiting(tmp_path):
    out = tmp_path / "out"
    parent = jobs.add.using(max_attempts=1).enqueue(1, 2)
    Job.objects.filter(pk=parent.pk).update(status=JobStatus.DEAD)
    child = jobs.collect_parents.using(after=[parent]).enqueue(str(out), "child")
    grandchild = jobs.collect_parents.using(after=[child]).enqueue(str(out), "grandchild")
    assert status(child) == status(grandchild) == JobStatus.CANCELLED
    assert Job.objects.filter(pk=parent.pk).retry() == [parent.pk]
    assert status(child) == status(grandchild) == JobStatus.WAITING
    assert Job.objects.get(pk=child.pk).last_error == ""
    run_jobs()
    assert [line["tag"] for line in lines(out)] == ["child", "grandchild"]
    assert lines(out)[0]["parents"] == {str(parent.pk): 3}


def test_a_child_put_back_stays_cancelled_while_another_parent_is_dead():
    one = jobs.noop.enqueue()
    two = jobs.noop.enqueue()
    child = jobs.noop.using(after=[one, two]).enqueue()
    Job.objects.filter(pk=one.pk).update(status=JobStatus.DEAD)
    Job.objects.filter(pk=two.pk).update(status=JobStatus.DEAD)
    Job.objects.filter(pk=one.pk).retry()
    child_row = Job.objects.get(pk=child.pk)
    assert child_row.status == JobStatus.CANCELLED and f"#{two.pk}" in child_row.last_error


def test_retrying_a_child_whose_parents_have_not_completed_makes_it_wait():
    parent = jobs.noop.enqueue()
    child = jobs.noop.using(after=[parent]).enqueue()
    Job.objects.filter(pk=child.pk).cancel()
    assert status(child) == JobStatus.CANCELLED
    Job.objects.filter(pk=child.pk).retry()
    assert status(child) == JobStatus.WAITING and ready_rows(Job.objects.get(pk=child.pk)) == 0


def test_deleting_an_unfinished_parent_cancels_its_waiting_children():
    parent = jobs.noop.enqueue()
    child = jobs.noop.using(after=[parent]).enqueue()
    Job.objects.filter(pk=parent.pk).delete()
    row = Job.objects.get(pk=child.pk)
    assert row.status == JobStatus.CANCELLED and "was deleted" in row.last_error


def test_pruning_keeps_a_finished_parent_while_a_dependent_waits(settings):
    settings.PGQUEUE_RETENTION = 0
    a = jobs.noop.enqueue()
    b = jobs.noop.enqueue()
    child = jobs.noop.using(after=[a, b]).enqueue()
    complete(a)
    Job.objects.prune()
    assert Job.objects.filter(pk=a.pk).exists()  # its dependent still waits for b
    complete(b)
    assert status(child) == JobStatus.PENDING
    Job.objects.prune()
    assert Job.objects.filter(pk=a.pk).exists()  # its dependent has not run yet
    run_jobs()
    Job.objects.prune()
    assert not Job.objects.filter(pk__in=[a.pk, b.pk, child.pk]).exists()


# --- chains -----------------------------------------------------------------------------------


def test_a_chain_runs_step_after_step_each_reading_the_previous_result(tmp_path):
    out = tmp_path / "out"
    steps = chain(
        jobs.add.s(1, 2),
        jobs.collect_parents.s(str(out), "second"),
        jobs.collect_parents.s(str(out), "third"),
    )
    assert [s.status for s in steps] == [JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING]
    run_jobs()
    assert lines(out) == [
        {"tag": "second", "parents": {str(steps[0].pk): 3}},
        {"tag": "third", "parents": {str(steps[1].pk): "second"}},
    ]


def test_a_chain_is_enqueued_whole_or_not_at_all():
    before = Job.objects.count()
    with pytest.raises(UnknownParent):
        chain(jobs.noop.s(), jobs.noop.s().using(after=[999999]))
    assert Job.objects.count() == before


def test_signatures_check_their_arguments_at_once():
    from django_pgqueue import InvalidJobArguments

    with pytest.raises(InvalidJobArguments):
        jobs.add.s(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        chain(jobs.add)  # type: ignore[arg-type]


# --- batches ----------------------------------------------------------------------------------


def test_a_batch_fires_on_success_and_on_complete_once(tmp_path):
    out = tmp_path / "out"
    with batch(
        on_success=jobs.batch_report.s(str(out), "success"),
        on_failure=jobs.batch_report.s(str(out), "failure"),
        on_complete=jobs.batch_report.s(str(out), "complete"),
        description="three adds",
    ) as b:
        for i in range(3):
            jobs.add.enqueue(i, i)
        jobs.add.enqueue_many([(5, 5), (6, 6)])
    assert b.id and b.counts()[JobStatus.PENDING] == 5
    run_jobs()
    fired = lines(out)
    assert [f["callback"] for f in fired] == ["success", "complete"]
    assert all(f["batch"] == b.id for f in fired)
    assert fired[0]["counts"][JobStatus.COMPLETED] == 5
    row = Batch.objects.get(pk=b.id)
    assert row.finished_at is not None and [f["callback"] for f in row.fired] == [
        "on_success",
        "on_complete",
    ]


def test_a_batch_with_a_dead_member_fires_on_failure(tmp_path):
    out = tmp_path / "out"
    with batch(
        on_success=jobs.batch_report.s(str(out), "success"),
        on_failure=jobs.batch_report.s(str(out), "failure"),
    ):
        jobs.noop.enqueue()
        jobs.fails_once_dead.enqueue()
    run_jobs()
    assert [f["callback"] for f in lines(out)] == ["failure"]


def test_an_empty_batch_finishes_when_its_block_closes(tmp_path):
    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        pass
    assert Batch.objects.get(pk=b.id).finished_at is not None
    run_jobs()
    assert [f["callback"] for f in lines(out)] == ["complete"]


def test_a_batch_in_a_transaction_is_sealed_with_it_and_rolled_back_with_it(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), transaction.atomic():
        with batch(on_complete=jobs.batch_report.s(str(out), "complete")):
            jobs.noop.enqueue()
        raise RuntimeError("rolled back")
    assert not Batch.objects.exists() and not Job.objects.exists()


def test_members_enqueued_on_commit_count_once_committed(tmp_path):
    out = tmp_path / "out"
    with transaction.atomic():
        with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
            jobs.noop.enqueue()
            jobs.add.enqueue_on_commit(1, 1)
        assert Batch.objects.get(pk=b.id).sealed_at is None
    assert Batch.objects.get(pk=b.id).sealed_at is not None
    assert b.counts()[JobStatus.PENDING] == 2
    run_jobs()
    assert [(f["callback"], f["counts"]["completed"]) for f in lines(out)] == [("complete", 2)]


def test_members_that_end_before_the_seal_are_counted_by_it(tmp_path):
    """Autocommit: each member commits as it is enqueued, and runs while the block is open."""
    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        jobs.noop.enqueue()
        run_jobs()  # the member ends before its batch is sealed
        jobs.noop.enqueue()
    assert Batch.objects.get(pk=b.id).finished_at is None
    run_jobs()
    assert [(f["callback"], f["counts"]["completed"]) for f in lines(out)] == [("complete", 2)]


def test_retrying_a_dead_member_reopens_the_batch_and_its_callbacks_fire_again(tmp_path):
    out = tmp_path / "out"
    with batch(
        on_success=jobs.batch_report.s(str(out), "success"),
        on_failure=jobs.batch_report.s(str(out), "failure"),
    ) as b:
        dead = jobs.add.using(max_attempts=1).enqueue(1, 2)
    Job.objects.filter(pk=dead.pk).update(status=JobStatus.DEAD)
    run_jobs()
    assert [f["callback"] for f in lines(out)] == ["failure"]
    Job.objects.filter(pk=dead.pk).retry()
    assert Batch.objects.get(pk=b.id).finished_at is None
    run_jobs()
    assert [f["callback"] for f in lines(out)] == ["failure", "success"]


def test_membership_follows_the_context_not_the_thread_globals():
    import threading

    with batch() as b:
        inside = jobs.noop.enqueue()
        outside: list[Job] = []
        thread = threading.Thread(target=lambda: outside.append(jobs.noop.enqueue()))
        thread.start()
        thread.join()
    assert Job.objects.get(pk=inside.pk).batch_id == b.id
    assert Job.objects.get(pk=outside[0].pk).batch_id is None
    # a job enqueued after the block is no member either
    assert Job.objects.get(pk=jobs.noop.enqueue().pk).batch_id is None


def test_a_callback_with_options_a_callback_cannot_keep_is_refused():
    with (
        pytest.raises(ValueError, match="unique_key"),
        batch(on_complete=jobs.noop.s().using(unique_key="k")),
    ):
        pass


def test_batch_counts_and_operations_agree():
    with batch() as b:
        jobs.noop.enqueue_many([()] * 3)
    db = operations.DjangoDatabase("default")
    assert operations.batch_counts(db, b.id)[JobStatus.PENDING] == 3


def test_with_retention_zero_parents_and_members_are_kept_until_no_longer_needed(
    tmp_path, settings
):
    """Completed jobs are deleted at once, but a parent's result is read by its dependent and a
    member's end counts for its batch: they are kept completed, then pruned."""
    settings.PGQUEUE_RETENTION = 0
    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        steps = chain(jobs.add.s(20, 22), jobs.collect_parents.s(str(out), "second"))
    run_jobs()
    assert [line.get("tag") or line.get("callback") for line in lines(out)] == [
        "second",
        "complete",
    ]
    assert lines(out)[0]["parents"] == {str(steps[0].pk): 42}
    assert lines(out)[1]["counts"][JobStatus.COMPLETED] == 2
    assert Job.objects.get(pk=steps[0].pk).status == JobStatus.COMPLETED
    Job.objects.prune()
    assert not Job.objects.filter(batch_id=b.id).exists()


@pytest.mark.django_db(transaction=False)
def test_run_jobs_in_a_test_transaction_runs_chains_and_batches(tmp_path):
    """Inside a TestCase's transaction nothing commits: run_jobs settles the edges itself."""
    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")):
        steps = chain(jobs.add.s(1, 2), jobs.collect_parents.s(str(out), "second"))
    late = jobs.collect_parents.using(after=[steps[1]]).enqueue(str(out), "third")
    run_jobs()
    ran = [line.get("tag") or line.get("callback") for line in lines(out)]
    assert ran[0] == "second" and sorted(ran[1:]) == ["complete", "third"]
    assert status(late) == JobStatus.COMPLETED


# --- the admin --------------------------------------------------------------------------------


@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_superuser("boss", "boss@example.com", "pw")
    client.force_login(user)
    return client


def test_the_job_page_links_parents_dependents_and_batch(staff):
    from django.urls import reverse

    parent = jobs.noop.enqueue()
    with batch() as b:
        child = jobs.noop.using(after=[parent]).enqueue()
    page = staff.get(reverse("admin:django_pgqueue_job_change", args=[child.pk])).content.decode()
    assert reverse("admin:django_pgqueue_job_change", args=[parent.pk]) in page
    assert "1 not completed yet" in page
    assert reverse("admin:django_pgqueue_batch_change", args=[b.id]) in page
    page = staff.get(reverse("admin:django_pgqueue_job_change", args=[parent.pk])).content.decode()
    assert reverse("admin:django_pgqueue_job_change", args=[child.pk]) in page
    plain = jobs.noop.enqueue()
    page = staff.get(reverse("admin:django_pgqueue_job_change", args=[plain.pk])).content.decode()
    assert "Waits for" not in page


def test_the_batch_page_shows_progress_counts_callbacks_and_retries_failed_members(staff):
    from django.urls import reverse

    with batch(on_complete=jobs.noop.s(), description="nightly resize") as b:
        jobs.noop.enqueue()
        dead = jobs.fails_once_dead.enqueue()
    run_jobs()
    url = reverse("admin:django_pgqueue_batch_change", args=[b.id])
    page = staff.get(url).content.decode()
    assert "nightly resize" in page and "2 of 2 ended, 1 failed" in page
    assert f"?batch={b.id}&amp;status=dead" in page
    assert "on_complete" in page and "Retry failed members" in page
    members = staff.get(reverse("admin:django_pgqueue_job_changelist") + f"?batch={b.id}")
    assert members.status_code == 200 and f">{dead.pk}<" in members.content.decode()
    assert staff.get(reverse("admin:django_pgqueue_batch_changelist")).status_code == 200
    response = staff.post(reverse("admin:django_pgqueue_batch_retry_failed", args=[b.id]))
    assert response.status_code == 302
    assert status(dead) == JobStatus.PENDING
    assert Batch.objects.get(pk=b.id).finished_at is None


def test_the_status_counts_know_waiting_jobs(monkeypatch):
    from django_pgqueue import stats

    parent = jobs.noop.enqueue()
    jobs.noop.using(after=[parent]).enqueue_many([()] * 3)
    (default,) = [q for q in stats.queue_report().queues if q.queue == "default"]
    assert (default.waiting.value, default.runnable.value) == (3, 1)
    assert default.as_dict()["waiting"] == 3
    # The capped counts (a big table's) too.
    monkeypatch.setattr(stats.limits, "EXACT_TABLE_BYTES", 0)
    capped = stats.queue_report()
    assert not capped.exact
    assert (capped.queue("default").waiting.value, capped.queue("default").runnable.value) == (3, 1)


def test_pruning_removes_a_finished_batch_once_its_members_are_gone(settings):
    from django_pgqueue.models import BatchTally

    settings.PGQUEUE_RETENTION = 0
    with batch() as b:
        jobs.noop.enqueue()
    with batch() as running:
        jobs.noop.enqueue()
    assert BatchTally.objects.filter(batch_id=b.id).exists()
    Job.objects.filter(batch_id=b.id).update(status=JobStatus.COMPLETED, finished_at=timezone.now())
    assert Batch.objects.get(pk=b.id).finished_at is not None
    Job.objects.prune()  # the member goes first
    Job.objects.prune()  # then its batch
    assert not Batch.objects.filter(pk=b.id).exists()
    assert not BatchTally.objects.filter(batch_id=b.id).exists()
    assert Batch.objects.filter(pk=running.id).exists()


def test_deleting_a_batch_takes_its_tally_and_its_members_no_longer_count(tmp_path):
    from django_pgqueue.models import BatchTally

    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        jobs.noop.enqueue()
    Batch.objects.filter(pk=b.id).delete()
    assert not BatchTally.objects.filter(batch_id=b.id).exists()
    run_jobs()
    assert not out.exists()


def test_two_outcomes_ending_members_of_two_buckets_in_opposite_orders_wait_and_never_deadlock(
    tmp_path,
):
    """Each statement counts its members per bucket at its end, in the order of the buckets:
    a statement that ends a member of bucket Y, then one of bucket X, while another transaction
    holds X and goes on to Y, waits for it instead of holding Y (0022 counted member by member
    in the statement's row order: the two deadlocked)."""
    import threading

    from django.db import connections

    out = tmp_path / "out"
    with batch(on_complete=jobs.batch_report.s(str(out), "complete")) as b:
        ids = jobs.noop.enqueue_many([()] * 300)
    buckets: dict[int, list[int]] = {}
    for pk in sorted(ids):
        buckets.setdefault(pk // 128, []).append(pk)
    x, y = [members for _, members in sorted(buckets.items()) if len(members) >= 2][:2]
    last = [x[0], x[1], y[0], y[1]]
    Job.objects.filter(pk__in=ids).exclude(pk__in=last).update(
        status=JobStatus.COMPLETED, finished_at=timezone.now()
    )
    end = (
        "UPDATE pgqueue_job j SET status = 'completed', finished_at = now() "
        "FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(id, n) WHERE j.id = u.id"
    )
    first = connections.create_connection("default")
    second = connections.create_connection("default")
    errors: list[BaseException] = []
    try:
        first.set_autocommit(False)
        with first.cursor() as cursor:  # holds bucket X's tally row until it commits
            cursor.execute(end, [[x[0]]])
        with second.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
            # Its rows in the array's order, as an outcome statement takes them in its
            # document's: a nested loop from the array to the jobs' primary key.
            cursor.execute("SET enable_hashjoin = off")
            cursor.execute("SET enable_mergejoin = off")
            cursor.execute("SET enable_seqscan = off")

        def opposite() -> None:  # bucket Y's member first, then bucket X's
            try:
                with second.cursor() as cursor:
                    cursor.execute(end, [[y[0], x[1]]])
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        second.inc_thread_sharing()
        thread = threading.Thread(target=opposite)
        thread.start()

        def waiting() -> bool:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid]
                )
                return bool(cursor.fetchone()[0])

        wait_until(lambda: errors or waiting(), timeout=30)
        assert not errors, errors
        with first.cursor() as cursor:  # on to bucket Y: free, the other waits for X first
            cursor.execute(end, [[y[1]]])
        first.commit()
        thread.join(30)
        second.dec_thread_sharing()
    finally:
        first.close()
        second.close()
    assert not errors, errors
    assert Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count() == 300
    row = Batch.objects.get(pk=b.id)
    assert row.finished_at is not None and [f["callback"] for f in row.fired] == ["on_complete"]
    assert list(operations.violations(operations.DjangoDatabase("default"))) == []
