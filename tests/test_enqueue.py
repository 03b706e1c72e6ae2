"""Enqueueing: transactions, argument checks, unique keys and bulk inserts."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_pgqueue import InvalidJobArguments, job, operations
from django_pgqueue.decorators import DroppedPayloadsWarning
from django_pgqueue.exceptions import DuplicateJobName
from django_pgqueue.models import Job
from django_pgqueue.operations import FEW_MAX
from django_pgqueue.operations.rows import new_job
from django_pgqueue.sql.rota import channel
from tests.testapp import jobs
from tests.utils import run_threads

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def test_plain_call_runs_inline():
    assert jobs.add(2, 3) == 5
    assert not Job.objects.exists()


def test_enqueue_inserts_a_pending_row_with_the_decorator_options():
    created = jobs.send_welcome.enqueue(42)
    row = Job.objects.get()
    assert row.pk == created.pk
    assert (row.name, row.queue, row.priority, row.max_attempts) == (
        "tests.testapp.jobs.send_welcome",
        "emails",
        10,
        5,
    )
    assert row.args == [42]
    assert row.kwargs == {}
    assert row.status == "pending"
    assert row.attempts == 0
    assert created.created_at == row.created_at
    assert created.run_after == row.run_after


def test_the_returned_job_is_the_row_as_saved():
    created = jobs.send_welcome.enqueue(42)
    row = Job.objects.get(pk=created.pk)
    fields = [f.attname for f in Job._meta.concrete_fields]
    assert [getattr(created, f) for f in fields] == [getattr(row, f) for f in fields]
    assert created._state.adding is False and created._state.db == "default"
    created.errors.append("mine")  # each job its own list
    assert jobs.send_welcome.enqueue(43).errors == []
    with pytest.raises(TypeError, match="no fields"):
        new_job("default", id=1, queu="typo")


def test_using_overrides_options_without_changing_the_original():
    when = timezone.now() + timedelta(minutes=30)
    variant = jobs.send_welcome.using(queue="bulk", priority=-5, run_after=when, max_attempts=2)
    variant.enqueue(user_id=7)
    row = Job.objects.get()
    assert (row.queue, row.priority, row.max_attempts, row.run_after) == ("bulk", -5, 2, when)
    assert row.kwargs == {"user_id": 7}
    assert jobs.send_welcome.spec.queue == "emails"


def test_run_after_timedelta_is_from_now():
    before = timezone.now()
    jobs.noop.using(run_after=timedelta(hours=1)).enqueue()
    row = Job.objects.get()
    assert before + timedelta(hours=1) <= row.run_after <= timezone.now() + timedelta(hours=1)


def test_rollback_drops_the_job():
    with pytest.raises(Boom), transaction.atomic():
        jobs.add.enqueue(1, 2)
        assert Job.objects.count() == 1
        raise Boom
    assert not Job.objects.exists()


def test_job_is_invisible_to_workers_until_commit(other_connection):
    with transaction.atomic():
        jobs.add.enqueue(1, 2)
        with other_connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pgqueue_job")
            assert cursor.fetchone()[0] == 0
    with other_connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgqueue_job")
        assert cursor.fetchone()[0] == 1


def test_enqueue_on_commit_inserts_only_after_commit():
    with transaction.atomic():
        jobs.add.enqueue_on_commit(1, 2)
        assert not Job.objects.exists()
    assert Job.objects.get().args == [1, 2]


def test_enqueue_on_commit_inserts_nothing_on_rollback():
    with pytest.raises(Boom), transaction.atomic():
        jobs.add.enqueue_on_commit(1, 2)
        raise Boom
    assert not Job.objects.exists()


def test_enqueue_on_commit_checks_arguments_at_the_call():
    with pytest.raises(InvalidJobArguments), transaction.atomic():
        jobs.add.enqueue_on_commit(datetime.now(UTC), 2)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((datetime(2024, 1, 1, tzinfo=UTC),), {}, "argument 0 (user_id) of type datetime"),
        ((), {"user_id": {1, 2}}, "keyword argument 'user_id' of type set"),
        (((1, 2),), {}, "argument 0 (user_id) of type tuple changes in a JSON round trip"),
        (({1: "a"},), {}, "argument 0 (user_id) of type dict changes in a JSON round trip"),
        ((float("nan"),), {}, "argument 0 (user_id) of type float is not JSON-serializable"),
        ((object(),), {}, "argument 0 (user_id) of type object"),
    ],
)
def test_non_json_arguments_fail_at_enqueue_naming_the_argument(args, kwargs, message):
    with pytest.raises(InvalidJobArguments) as excinfo:
        jobs.send_welcome.enqueue(*args, **kwargs)
    assert message in str(excinfo.value)
    assert "tests.testapp.jobs.send_welcome" in str(excinfo.value)
    assert not Job.objects.exists()


def test_arguments_that_do_not_fit_the_signature_fail_at_enqueue():
    with pytest.raises(InvalidJobArguments, match="missing a required argument: 'b'"):
        jobs.add.enqueue(1)
    with pytest.raises(InvalidJobArguments, match="unexpected keyword argument 'c'"):
        jobs.add.enqueue(1, 2, c=3)
    assert not Job.objects.exists()


def test_bad_options_fail_clearly():
    with pytest.raises(ValueError, match="priority must be between -100 and 100"):
        jobs.add.using(priority=101)
    with pytest.raises(ValueError, match="max_attempts must be between 1 and 1,000,000"):
        jobs.add.using(max_attempts=0)
    with pytest.raises(TypeError, match="run_after must be a datetime or a timedelta"):
        jobs.add.using(run_after=5)  # type: ignore[arg-type]


def test_unique_key_returns_the_active_job_instead_of_a_duplicate():
    first = jobs.add.using(unique_key="sum-1").enqueue(1, 1)
    second = jobs.add.using(unique_key="sum-1").enqueue(1, 1)
    assert second.pk == first.pk
    assert first.deduplicated is False
    assert second.deduplicated is True
    assert Job.objects.count() == 1
    # Another queue is another key space.
    other = jobs.add.using(unique_key="sum-1", queue="other").enqueue(1, 1)
    assert other.pk != first.pk
    # Once the first is finished, the key is free again.
    Job.objects.filter(pk=first.pk).update(status="completed")
    third = jobs.add.using(unique_key="sum-1").enqueue(1, 1)
    assert third.pk != first.pk and third.deduplicated is False


def test_unique_key_holds_under_concurrent_enqueues():
    threads = 8
    barrier = threading.Barrier(threads)
    ids: list[int] = []
    errors: list[BaseException] = []

    def enqueue():
        try:
            barrier.wait()
            with transaction.atomic():
                ids.append(jobs.add.using(unique_key="race").enqueue(1, 2).pk)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert Job.objects.filter(unique_key="race").count() == 1
    assert set(ids) == {Job.objects.get().pk}


def test_enqueue_many_inserts_ten_thousand_jobs_in_order():
    ids = jobs.add.enqueue_many([(i, i) for i in range(10_000)])
    assert len(ids) == 10_000
    assert len(set(ids)) == 10_000
    rows = dict(Job.objects.values_list("id", "args"))
    assert len(rows) == 10_000
    assert [rows[i] for i in ids] == [[i, i] for i in range(10_000)]


@pytest.mark.parametrize("count", [1, FEW_MAX, FEW_MAX + 1])
def test_enqueue_many_of_a_few_or_many_jobs_keeps_input_order_and_the_callers_transaction(count):
    # Up to FEW_MAX jobs are one INSERT, above that reserved ids and COPY: the same contract.
    ids = jobs.add.enqueue_many([(i, -i) for i in range(count)])
    rows = {j.pk: j for j in Job.objects.filter(id__in=ids)}
    assert [rows[i].args for i in ids] == [[i, -i] for i in range(count)]
    assert len({rows[i].run_after for i in ids}) == 1
    assert {rows[i].status for i in ids} == {"pending"}
    with pytest.raises(RuntimeError, match="rolled back"), transaction.atomic():
        jobs.add.enqueue_many([(i, i) for i in range(count)])
        raise RuntimeError("rolled back")
    assert Job.objects.count() == count


@pytest.mark.parametrize("count", [2, FEW_MAX + 1])
def test_enqueue_many_writes_the_handles_options_on_both_paths(count):
    later = timezone.now() + timedelta(hours=1)
    handle = jobs.add.using(
        queue="bulk-options", priority=7, run_after=later, max_attempts=2, concurrency_key="k"
    )
    ids = handle.enqueue_many([(i, i) for i in range(count)])
    rows = Job.objects.filter(id__in=ids)
    assert rows.count() == count
    assert set(rows.values_list("queue", "priority", "max_attempts", "concurrency_key")) == {
        ("bulk-options", 7, 2, "k")
    }
    assert set(rows.values_list("run_after", flat=True)) == {later}
    assert set(rows.values_list("name", flat=True)) == {jobs.add.name}


def test_concurrent_enqueue_many_calls_each_get_their_ids_in_input_order():
    # Ids come from one sequence that concurrent statements draw from in turn: each call must
    # still map its ids to its own items, in order.
    threads, calls = 4, 25
    barrier = threading.Barrier(threads)
    results: list[tuple[int, int, list[int]]] = []

    def enqueue(worker: int) -> None:
        barrier.wait()
        for call in range(calls):
            size = (FEW_MAX, FEW_MAX + 1)[call % 2]
            ids = jobs.add.enqueue_many([(worker, call * 1000 + i) for i in range(size)])
            results.append((worker, call, ids))

    run_threads(threads, enqueue)
    args = dict(Job.objects.values_list("id", "args"))
    assert len(results) == threads * calls
    for worker, call, ids in results:
        assert [args[i] for i in ids] == [[worker, call * 1000 + i] for i in range(len(ids))]


def test_enqueue_many_accepts_keyword_dicts_and_checks_every_item():
    ids = jobs.add.enqueue_many([{"a": 1, "b": 2}, (3, 4)])
    assert list(Job.objects.filter(id__in=ids).order_by("id").values_list("args", "kwargs")) == [
        ([], {"a": 1, "b": 2}),
        ([3, 4], {}),
    ]
    with pytest.raises(InvalidJobArguments, match="Item 1 of enqueue_many"):
        jobs.add.enqueue_many([(1, 2), (datetime.now(UTC), 2)])
    assert Job.objects.count() == 2


def test_enqueue_many_deduplicates_unique_keys():
    existing = jobs.add.using(unique_key="k").enqueue(0, 0)
    with pytest.warns(DroppedPayloadsWarning, match="2 of 2 items have arguments that differ"):
        ids = jobs.add.using(unique_key="k").enqueue_many([(1, 1), (2, 2)])
    assert ids == [existing.pk, existing.pk]
    assert Job.objects.count() == 1


def test_enqueue_sends_one_notification_per_queue_and_transaction(other_connection):
    other_connection.ensure_connection()
    raw = other_connection.connection
    raw.autocommit = True
    # The notification goes to the listening worker the rota picks (docs/worker.md): "w1".
    operations.report_worker(operations.DjangoDatabase("default"), "w1", None, 1, 0, listening=True)
    raw.execute(f'LISTEN "{channel("w1")}"')
    with transaction.atomic():
        jobs.add.enqueue(1, 2)
        jobs.add.enqueue(3, 4)
        jobs.noop.enqueue_many([()] * 50)
        jobs.send_welcome.enqueue(1)
    wakes = [n.payload.split(" ") for n in raw.notifies(timeout=1.0, stop_after=10)]
    # "<queue> <ticket> <jobs> <hops> <kinds>": the ticket picks the worker (docs/worker.md).
    assert sorted((queue, int(count), kinds) for queue, _, count, _, kinds in wakes) == [
        ("default", 52, "s"),
        ("emails", 1, "s"),
    ]


def test_two_functions_cannot_share_a_name():
    with pytest.raises(DuplicateJobName) as raised:

        @job(name="tests.testapp.jobs.add")
        def impostor(a: int, b: int) -> int:
            return a - b

    # Says who has the name and who wanted it, in words: no internal reprs.
    assert str(raised.value) == (
        "Job name 'tests.testapp.jobs.add' is already taken by the job function "
        "tests.testapp.jobs.add, so the job function "
        "tests.test_enqueue.test_two_functions_cannot_share_a_name.<locals>.impostor cannot "
        "have it too. Give one of them another name: @job(name='...'), or a different "
        "function or module name for a task."
    )


def test_importing_the_package_does_not_import_models():
    code = (
        "import django_pgqueue, sys; "
        "from django_pgqueue import job; "
        "assert 'django_pgqueue.models' not in sys.modules, 'models imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
