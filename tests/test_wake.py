"""How workers wake (docs/worker.md, "How workers wake"): ``enqueue()`` notifies once its
transaction committed, one notification a queue and transaction with a ticket and a job count;
of the listening workers only the one the ticket picks claims (the wake rota), passing on what
it had no room for; polls are spread over the fleet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_pgqueue import operations
from django_pgqueue.models import Job, Worker
from django_pgqueue.sql.rota import channel, listener_name
from django_pgqueue.states import JobStatus
from django_pgqueue.worker.rota import Rota, Wake
from tests.testapp import async_jobs, jobs
from tests.utils import output, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def dsn(application_name: str = "test listener") -> str:
    db = connection.settings_dict
    parts = {
        "dbname": db["NAME"],
        "host": db.get("HOST") or "",
        "port": db.get("PORT") or "",
        "user": db.get("USER") or "",
        "password": db.get("PASSWORD") or "",
        "application_name": application_name,
    }
    return " ".join(f"{k}='{v}'" for k, v in parts.items() if v)


@contextmanager
def listening(
    application_name: str = "test listener", channels: tuple[str, ...] = ("pgqueue",)
) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn(application_name), autocommit=True) as conn:
        for name in channels:
            conn.execute(f'LISTEN "{name}"')
        yield conn


@contextmanager
def a_listening_worker(worker_id: str = "w1") -> Iterator[psycopg.Connection[Any]]:
    """A worker's row marked listening, and a connection on its own channel: the one
    ``enqueue()`` notifies (every queue's rota is this worker alone)."""
    register(worker_id)
    operations.mark_listening(operations.DjangoDatabase("default"), worker_id)
    with listening(listener_name(worker_id), channels=(channel(worker_id),)) as conn:
        yield conn


def heard(conn: psycopg.Connection[Any]) -> list[Wake]:
    """The job notifications that arrived so far (within a short wait for the last ones)."""
    conn.execute("SELECT 1")  # a round trip: whatever was sent before is read with it
    return [Wake.parse(n.payload) for n in conn.notifies(timeout=0.2)]


def test_enqueue_in_a_transaction_notifies_once_it_commits_one_notification_a_queue() -> None:
    with a_listening_worker() as conn:
        with transaction.atomic():
            first = jobs.noop.enqueue()
            jobs.noop.enqueue()
            others = jobs.noop.using(queue="other").enqueue_many([()] * 3)
            assert heard(conn) == []  # nothing before the commit
        wakes = sorted(heard(conn), key=lambda w: w.queue)
    assert [(w.queue, w.jobs, w.hops) for w in wakes] == [("default", 2, 0), ("other", 3, 0)]
    # The ticket is the first job's id: consecutive enqueues take turns in the rota.
    assert [w.ticket for w in wakes] == [first.pk, min(others)]


def test_a_rolled_back_enqueue_notifies_nothing() -> None:
    with a_listening_worker() as conn:
        with pytest.raises(RuntimeError), transaction.atomic():
            jobs.noop.enqueue()
            raise RuntimeError("rolled back")
        # The next transaction's wake is its own, not the rolled-back one's.
        with transaction.atomic():
            jobs.noop.using(queue="other").enqueue()
        assert [(w.queue, w.jobs) for w in heard(conn)] == [("other", 1)]


def test_an_enqueue_in_autocommit_and_a_bulk_copy_each_notify_with_their_count() -> None:
    with a_listening_worker() as conn:
        jobs.noop.enqueue()
        jobs.noop.enqueue_many([()] * 150)  # COPY: more than an INSERT takes
        assert [(w.queue, w.jobs) for w in heard(conn)] == [("default", 1), ("default", 150)]


def test_the_trigger_still_notifies_an_insert_made_by_hand_in_its_transaction() -> None:
    with a_listening_worker() as conn:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO pgqueue_job (queue, name, args, kwargs, priority, run_after, "
                "max_attempts) VALUES ('raw', 'tests.testapp.jobs.noop', '[]', '{}', 0, now(), 1),"
                " ('raw', 'tests.testapp.jobs.noop', '[]', '{}', 0, now(), 1)"
            )
        wakes = heard(conn)
    assert [(w.queue, w.jobs) for w in wakes] == [("raw", 2)]
    assert wakes[0].ticket is not None


def test_a_retry_by_hand_wakes_the_workers_once_it_commits() -> None:
    job = jobs.noop.enqueue()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.DEAD)
    with a_listening_worker() as conn:
        with transaction.atomic():
            operations.retry(Job.objects.filter(pk=job.pk))
            assert heard(conn) == []
        assert [(w.queue, w.jobs) for w in heard(conn)] == [("default", 1)]


def wake_ups_sent(enqueue: Any) -> int:
    """How many wake-up statements (``sql.enqueue.WAKE``) ``enqueue()`` sent on this thread's
    connection."""
    with CaptureQueriesContext(connection) as queries:
        enqueue()
    return sum("pgqueue_wake(" in query["sql"] for query in queries.captured_queries)


def test_no_wake_up_is_sent_when_no_worker_listens_for_the_queue() -> None:
    """No listening worker serves the queue (none runs, or they poll): the inserting statement
    says so, and ``enqueue()`` sends no wake-up after its commit (single, a few, COPY, in a
    transaction or not); for a queue a worker listens for, one per transaction."""
    register("emails-worker", queues=["emails"])
    operations.mark_listening(operations.DjangoDatabase("default"), "emails-worker")
    polling = [
        lambda: jobs.noop.enqueue(),
        lambda: jobs.noop.enqueue_many([()] * 3),
        lambda: jobs.noop.enqueue_many([()] * 150),  # COPY
        lambda: jobs.noop.using(concurrency_key="k", concurrency_limit=2).enqueue(),
    ]
    with listening(listener_name("emails-worker"), channels=(channel("emails-worker"),)) as conn:
        for enqueue in polling:
            assert wake_ups_sent(enqueue) == 0
            assert wake_ups_sent(lambda e=enqueue: transaction.atomic()(e)()) == 0
        assert heard(conn) == []
        emails = jobs.noop.using(queue="emails")
        assert wake_ups_sent(emails.enqueue) == 1
        assert wake_ups_sent(lambda: emails.enqueue_many([()] * 150)) == 1
        assert [(w.queue, w.jobs) for w in heard(conn)] == [("emails", 1), ("emails", 150)]
    assert Job.objects.filter(queue="default").count() == 2 * (1 + 3 + 150 + 1)


@override_settings(PGQUEUE_NOTIFY="in_transaction")
def test_in_transaction_the_trigger_notifies_when_the_transaction_commits() -> None:
    with a_listening_worker() as conn:
        with transaction.atomic():
            first = jobs.noop.enqueue()
            jobs.noop.enqueue_many([()] * 150)  # COPY
            assert heard(conn) == []  # a NOTIFY is sent when its transaction commits
        # One a statement: the trigger's (no statement of its own after the commit).
        wakes = heard(conn)
    assert [(w.queue, w.jobs) for w in wakes] == [("default", 1), ("default", 150)]
    assert wakes[0].ticket == first.pk


@override_settings(PGQUEUE_NOTIFY=False)
def test_no_notification_with_notify_off() -> None:
    with a_listening_worker() as conn:
        jobs.noop.enqueue()
        with transaction.atomic():
            jobs.noop.enqueue_many([()] * 3)
        assert heard(conn) == []
    assert Job.objects.count() == 4


def test_an_older_payload_or_one_sent_by_hand_wakes_every_worker_of_the_queue() -> None:
    assert Wake.parse("default") == Wake("default")
    assert Wake.parse("default 41 3") == Wake("default", 41, 3, 0)
    assert Wake.parse("default 41 3 2") == Wake("default", 41, 3, 2)
    assert Wake.parse("default x") == Wake("default x")
    # The kinds (0026_wake_kinds); anything else: either kind.
    assert Wake.parse("default 41 3 0 s") == Wake("default", 41, 3, 0, kinds="s")
    assert not Wake.parse("default 41 3 0 s").may_be_async
    assert Wake.parse("default 41 3 0 sa").may_be_async
    assert Wake.parse("default 41 3 0 a").may_be_async
    assert Wake.parse("default 41 3 0 x").kinds is None
    assert Wake.parse("default 41 3").may_be_async


def test_a_wake_up_says_the_kinds_of_its_jobs() -> None:
    """Sync jobs, async ones, both in one transaction, and jobs of unknown kind (a retry by
    hand: any kind): the payload's kinds, kept when the wake is passed on."""
    with a_listening_worker() as conn:
        jobs.noop.enqueue()
        async_jobs.async_noop.enqueue()
        with transaction.atomic():
            jobs.noop.enqueue()
            async_jobs.async_noop.enqueue_many([()] * 3)
        retried = jobs.noop.enqueue()
        Job.objects.filter(pk=retried.pk).update(status=JobStatus.DEAD)
        operations.retry(Job.objects.filter(pk=retried.pk))
        wakes = heard(conn)
        assert [(w.jobs, w.kinds) for w in wakes] == [
            (1, "s"),
            (1, "a"),
            (4, "sa"),
            (1, "s"),
            (1, None),
        ]
        operations.pass_wake(operations.DjangoDatabase("default"), "w1", "default", 7, 2, 1, "a")
        assert heard(conn) == [Wake("default", 7, 2, 1, kinds="a")]


def register(*worker_ids: str, queues: list[str] | None = None) -> None:
    for worker_id in worker_ids:
        operations.report_worker(operations.DjangoDatabase("default"), worker_id, queues, 1, 0)


def test_the_rota_is_the_live_listening_workers_of_the_queue_sorted() -> None:
    register("w1", "w2", "w3")
    register("emails-only", queues=["emails"])
    register("gone")
    Job.objects.none()  # (the rows above are committed: autocommit)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgqueue_worker SET stopped_at = now() WHERE worker_id = 'gone'")
    names = ["w3", "w1", "emails-only", "gone"]  # w2 does not listen (PgBouncer, say)
    with contextlib_all(listening(listener_name(name)) for name in names):
        rota = Rota("w1", None)
        rota.refresh(operations.DjangoDatabase("default"))
        assert rota.listening("default") == ["w1", "w3"]
        assert rota.listening("emails") == ["emails-only", "w1", "w3"]
        # Every worker reads the same rota: a ticket picks one of them.
        assert [rota.designated("default", ticket) for ticket in range(4)] == [
            "w1",
            "w3",
            "w1",
            "w3",
        ]
        assert rota.mine("default", 0) and not rota.mine("default", 1)
        # Polls are the fleet's: four live workers share w1's queues (w2 polls too).
        assert rota.sharing() == 4
        spread = [rota.spread(2.0) for _ in range(200)]
        assert min(spread) >= 4.0 and max(spread) <= 12.0
        # A worker not in its own reading yet claims for every notification.
        newcomer = Rota("w9", None)
        newcomer.refresh(operations.DjangoDatabase("default"))
        assert newcomer.mine("default", 0) and newcomer.mine("default", 1)


def test_a_wake_is_passed_on_to_the_next_worker_once_round_at_most() -> None:
    register("w1", "w2")
    with (
        listening(listener_name("w1"), channels=("pgqueue", channel("w1"))) as w1,
        listening(listener_name("w2"), channels=("pgqueue", channel("w2"))) as w2,
    ):
        rota = Rota("w1", None)
        db = operations.DjangoDatabase("default")
        rota.refresh(db)
        # Ticket 11 picks w2 (rota[11 % 2]): on its own channel, w1 hears nothing.
        assert rota.pass_on(db, Wake("default", 10, 5, 0), 3)
        assert heard(w2) == [Wake("default", 11, 3, 1)] and heard(w1) == []
        assert not rota.pass_on(db, Wake("default", 11, 3, 1), 1)  # back where it started
        assert heard(w1) == heard(w2) == []


def test_enqueue_wakes_the_picked_listening_worker_on_its_own_channel_only() -> None:
    """Workers that listen are marked so in their rows (and unmarked by any worker's rota reading
    once their connection is gone): enqueue() picks one by its ticket, and notifies it alone."""
    register("w1", "w2")
    db = operations.DjangoDatabase("default")
    with (
        listening(listener_name("w1"), channels=("pgqueue", channel("w1"))) as w1,
        listening(listener_name("w2"), channels=("pgqueue", channel("w2"))) as w2,
    ):
        operations.mark_listening(db, "w1")
        operations.mark_listening(db, "w2")
        for _ in range(6):
            jobs.noop.enqueue()
        on_w1, on_w2 = heard(w1), heard(w2)
        assert len(on_w1) + len(on_w2) == 6 and on_w1 and on_w2
        assert all(w.ticket is not None and w.ticket % 2 == 0 for w in on_w1)
        assert all(w.ticket is not None and w.ticket % 2 == 1 for w in on_w2)
        assert len(on_w1) == len(on_w2) == 3  # turns: consecutive ids
    # Their connections gone, a rota reading unmarks them: nobody listens, nothing is sent
    # (no NOTIFY, whose commit is serialized, for nobody: the workers poll). A closed
    # connection's backend leaves pg_stat_activity a moment after its client let go.
    wait_until(lambda: listener_backends() == 0)
    Rota("w3", None).refresh(db)
    assert not Worker.objects.filter(listening=True).exists()
    with listening() as common:
        jobs.noop.enqueue()
        assert heard(common) == []


def test_enqueue_and_every_workers_reading_pick_the_same_worker_whatever_the_ids() -> None:
    """The rota's order is the bytes' (COLLATE "C" in pgqueue_wake() and in the workers'
    reading): ids a locale would sort otherwise (case, accents) still get each ticket's job, and
    ids PostgreSQL would not keep whole in an application_name (non-ASCII, long) still listen."""
    import contextlib

    # A long one too: a listener's application_name is cut to 63 bytes.
    ids = ["worker-b", "Worker-A", "wörker", "worker_Z", "werker", "w" * 60 + "1", "w" * 60 + "2"]
    register(*ids)
    db = operations.DjangoDatabase("default")
    with contextlib.ExitStack() as stack:
        conns = {
            worker_id: stack.enter_context(
                listening(listener_name(worker_id), channels=("pgqueue", channel(worker_id)))
            )
            for worker_id in ids
        }
        for worker_id in ids:
            operations.mark_listening(db, worker_id)
        rota = Rota(ids[0], None)
        rota.refresh(db)
        assert rota.listening("default") == sorted(ids)  # Python's str order: code points
        enqueued = [jobs.noop.enqueue().pk for _ in range(10)]
        for worker_id, conn in conns.items():
            for wake in heard(conn):
                assert wake.ticket in enqueued
                assert rota.designated("default", wake.ticket) == worker_id
                enqueued.remove(wake.ticket)
        assert enqueued == []  # each job's wake went to the worker its ticket picks


@contextmanager
def contextlib_all(managers: Any) -> Iterator[None]:
    import contextlib

    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


def claims(text: str) -> int:
    return sum(1 for line in text.splitlines() if " claimed " in line and " jobs asked" in line)


def test_a_trickle_wakes_one_of_four_idle_workers_a_job() -> None:
    """Four idle run_jobs processes (one thread each): each job is claimed by the worker its
    notification picks, about one claim a job, where every worker used to claim for each."""
    env = worker_env(PGQUEUE_REPAIR_INTERVAL="600", PGQUEUE_POLL_INTERVAL="30")
    workers = [
        start_worker("--threads", "1", "--worker-id", f"herd-{n}", "-v", "3", env=env)
        for n in range(4)
    ]
    try:
        wait_until(lambda: listeners() >= 4, timeout=60)
        time.sleep(2.5)  # every worker's rota has read the four (REFRESH)
        before = [len(output(w)) for w in workers]
        ids = []
        for _ in range(12):
            ids.append(jobs.noop.enqueue().pk)
            wait_until(lambda: Job.objects.get(pk=ids[-1]).status == JobStatus.COMPLETED)
        during = sum(claims(output(w)[start:]) for w, start in zip(workers, before, strict=True))
    finally:
        logs = [stop(w) for w in workers]
    ran_by = {Job.objects.get(pk=i).locked_by or "" for i in ids}
    assert Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED, attempts=1).count() == 12
    # Each job woke one worker (and the rota spreads them): 12 claims, a few for slack (a
    # worker that claims twice in a row, a poll). Waking all four would make 48.
    print(f"{during} claims for {len(ids)} jobs, run by {sorted(ran_by)}")
    assert during <= 2 * len(ids), "\n".join(logs)
    assert len(ran_by) >= 2


def test_a_worker_woken_for_sync_jobs_still_hears_of_async_ones() -> None:
    """An idle worker woken for sync jobs claims without the async jobs' branch once its last
    look found none; a wake-up about async jobs makes it look again at once (the poll is two
    minutes away: only the wake can explain the pickup)."""
    env = worker_env(PGQUEUE_REPAIR_INTERVAL="600", PGQUEUE_POLL_INTERVAL="120")
    worker = start_worker("--threads", "1", "--worker-id", "kinds-1", env=env)
    try:
        wait_until(lambda: listeners() >= 1, timeout=60)
        for enqueue in [jobs.noop.enqueue, jobs.noop.enqueue, async_jobs.async_noop.enqueue] * 2:
            job = enqueue()
            done = lambda j=job: Job.objects.get(pk=j.pk).status == JobStatus.COMPLETED  # noqa: E731
            wait_until(done, timeout=30)
    finally:
        log = stop(worker)
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 6, log


def test_a_bulk_enqueue_is_passed_on_until_the_workers_have_it_all() -> None:
    """Two workers with room for two jobs each: the picked one claims two and passes the wake
    on for the rest, so both run the jobs (polls are out of the way: 30 s)."""
    env = worker_env(PGQUEUE_REPAIR_INTERVAL="600", PGQUEUE_POLL_INTERVAL="30")
    workers = [
        start_worker("--threads", "1", "--batch-size", "1", "--worker-id", f"pass-{n}", env=env)
        for n in range(2)
    ]
    try:
        wait_until(lambda: listeners() >= 2, timeout=60)
        time.sleep(2.5)
        ids = jobs.hangs.enqueue_many([(0.5,)] * 4)
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count() == 4,
            timeout=60,
        )
    finally:
        logs = [stop(w) for w in workers]
    ran_by = set(Job.objects.filter(pk__in=ids).values_list("locked_by", flat=True))
    assert {w.split(":")[0] for w in ran_by if w} == {"pass-0", "pass-1"}, "\n".join(logs)


def listener_backends() -> int:
    """The listening connections to this database, whatever they run (``sql.rota``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'pgqueue listener %%'"
        )
        return int(cursor.fetchone()[0])


def listeners() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'pgqueue listener %%' AND query LIKE 'LISTEN%%'"
        )
        return int(cursor.fetchone()[0])


def test_polling_workers_poll_as_a_fleet_not_each_at_the_interval() -> None:
    """Without LISTEN (PgBouncer in transaction mode), four idle workers together poll about
    once an interval: each every interval times four, jittered by half (at least every 1 s
    here, so at most six claims each in 6 s, where each polling alone would make 12)."""
    env = worker_env(PGQUEUE_LISTEN="0", PGQUEUE_POLL_INTERVAL="0.5", PGQUEUE_REPAIR_INTERVAL="600")
    workers = [
        start_worker("--threads", "1", "--worker-id", f"poll-{n}", "-v", "3", env=env)
        for n in range(4)
    ]
    try:
        wait_until(lambda: Worker.objects.filter(worker_id__startswith="poll-").count() == 4)
        time.sleep(2.5)  # every worker has read the others (the rota's REFRESH)
        before = [len(output(w)) for w in workers]
        time.sleep(6)
        polls = sum(claims(output(w)[start:]) for w, start in zip(workers, before, strict=True))
        job = jobs.noop.enqueue()  # and a job is still found by a poll
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED)
    finally:
        logs = [stop(w) for w in workers]
    assert 1 <= polls <= 24, "\n".join(logs)
