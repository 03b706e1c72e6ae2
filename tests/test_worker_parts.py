"""The worker loop's parts alone: its housekeeping timers and its claim capacity."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from django_pgqueue.models import Job
from django_pgqueue.models import Worker as WorkerRow
from django_pgqueue.operations import Outcome
from django_pgqueue.states import JobStatus
from django_pgqueue.worker import Worker
from django_pgqueue.worker.capacity import PREFETCH_WINDOW, Capacity
from django_pgqueue.worker.housekeeping import Housekeeping
from tests.testapp import jobs


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_periodic_task_added_to_a_worker_runs_while_it_serves_jobs():
    worker = Worker(listen=False, worker_id="parts:1")
    ticks = []
    failures = []

    def tick():
        ticks.append(time.monotonic())
        if len(ticks) == 2:
            failures.append(True)
            raise RuntimeError("a failing tick does not stop the worker")
        return None

    worker.housekeeping.add("tick", tick, interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        created = jobs.add.enqueue(1, 2)
        wait_for(lambda: len(ticks) >= 4)
        wait_for(lambda: Job.objects.get(pk=created.pk).status == JobStatus.COMPLETED)
        # The default tasks are there too: the heartbeat registered the worker row.
        names = [task.name for task in worker.housekeeping.tasks]
        assert names[:2] == ["heartbeat", "prune"]
        assert names[-1] == "tick"
        assert WorkerRow.objects.filter(worker_id="parts:1").exists()
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()
    assert failures == [True]


def test_housekeeping_runs_what_is_due_and_reschedules_it():
    housekeeping = Housekeeping()
    ran = []
    first = housekeeping.add("first", lambda: ran.append("first"), interval=10.0)
    later = housekeeping.add("later", lambda: ran.append("later") or 2.0, 5.0, first_in=60.0)
    quiet = housekeeping.add("quiet", lambda: ran.append("quiet"), 1.0, wakes=False)
    now = time.monotonic()
    housekeeping.run_due(now)
    assert ran == ["first", "quiet"]
    assert first.next_at == now + 10.0
    assert quiet.next_at == now + 1.0
    # Tasks that don't wake the loop don't count for its sleep.
    assert housekeeping.next_wake() == first.next_at
    housekeeping.run_due(later.next_at)  # everything is due by then, in the order added
    assert ran[2:] == ["first", "later", "quiet"]
    assert later.next_at == pytest.approx(now + 60.0 + 2.0, abs=1.0)


def test_housekeeping_keeps_a_failed_task_due():
    housekeeping = Housekeeping()

    def boom():
        raise ConnectionError("down")

    task = housekeeping.add("boom", boom, interval=10.0)
    due = task.next_at
    with pytest.raises(ConnectionError):
        housekeeping.run_due(time.monotonic())
    assert task.next_at == due


def outcome_taking(seconds: float) -> Outcome:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    return Outcome(1, JobStatus.COMPLETED, started, started + timedelta(seconds=seconds))


def test_capacity_claims_batches_of_fast_jobs_and_one_per_thread_of_slow_ones():
    fast = Capacity(threads=2, batch_size=100)
    for _ in range(100):
        fast.record(outcome_taking(0.0001))
    assert fast.claim_size(in_flight=0, buffered=0) == 102  # threads + a full batch
    assert fast.claim_size(in_flight=102, buffered=0) == 0  # full
    assert fast.claim_size(in_flight=80, buffered=0) == 0  # not half free, threads busy
    assert fast.claim_size(in_flight=40, buffered=0) == 62  # half free: claim a batch

    slow = Capacity(threads=2, batch_size=100)
    for _ in range(100):
        slow.record(outcome_taking(PREFETCH_WINDOW * 10))
    assert slow.claim_size(in_flight=0, buffered=0) == 2  # one per thread, no prefetch
    assert slow.claim_size(in_flight=2, buffered=0) == 0
    assert slow.claim_size(in_flight=2, buffered=1) == 0  # a thread is free, capacity is not


def test_a_time_becomes_its_microseconds_since_the_epoch_and_back_exactly():
    """How outcomes carry their times (the journal, the outcome write): every microsecond from
    year 1 to 9999, before the epoch too, and a naive time in the project's zone."""
    from django.utils import timezone

    from django_pgqueue.operations.outcomes import epoch_micros, from_epoch_micros

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for value in (
        datetime.min.replace(tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        epoch,
        datetime(2026, 11, 27, 21, 30, 0, 123_456, tzinfo=UTC),
        datetime(2255, 6, 5, 23, 47, 34, 740_993, tzinfo=UTC),  # past 2**53 microseconds
    ):
        micros = epoch_micros(value)
        assert micros == (value - epoch) // timedelta(microseconds=1)
        assert from_epoch_micros(micros) == value
    naive = datetime(2026, 3, 29, 1, 30)
    assert epoch_micros(naive) == epoch_micros(timezone.make_aware(naive))


@pytest.mark.django_db(transaction=True)
def test_a_dead_workers_journal_writes_its_outcomes_with_their_exact_times(tmp_path):
    """What the supervisor reads back from a crashed child's journal is what the child had:
    the completed line's times (as integers) and another outcome's, to the microsecond."""
    from zoneinfo import ZoneInfo

    from django_pgqueue import operations
    from django_pgqueue.states import Attempt
    from django_pgqueue.worker.journal import Journal, recover

    done, retried = jobs.add.enqueue(1, 2), jobs.always_fails.enqueue()
    tokens = {job.pk: job.claim_token for job in Job.objects.claim("w1", limit=2)}
    assert set(tokens) == {done.pk, retried.pk}
    started = datetime(2026, 11, 24, 9, 30, 1, 123_457, tzinfo=ZoneInfo("Europe/Paris"))
    finished = datetime(2026, 11, 24, 8, 30, 2, 999_999, tzinfo=UTC)
    later = finished + timedelta(minutes=5, microseconds=1)
    journal = Journal(tmp_path / "journal")
    for outcome in (
        Outcome(
            done.pk,
            JobStatus.COMPLETED,
            started,
            finished,
            result_json="3",
            claim_token=tokens[done.pk],
        ),
        Outcome(
            retried.pk,
            JobStatus.PENDING,
            started,
            None,
            run_after=later,
            outcome=Attempt.RETRIED,
            claim_token=tokens[retried.pk],
        ),
    ):
        journal.started(outcome.job_id)
        journal.ended(outcome)
    journal.close()
    recover(operations.DjangoDatabase("default"), tmp_path / "journal", "w1", "signal 9")
    done, retried = Job.objects.get(pk=done.pk), Job.objects.get(pk=retried.pk)
    assert (done.status, done.started_at, done.finished_at, done.result) == (
        JobStatus.COMPLETED,
        started,
        finished,
        3,
    )
    assert (retried.status, retried.started_at, retried.run_after) == (
        JobStatus.PENDING,
        started,
        later,
    )


def test_a_journal_replays_only_what_is_still_open_and_empties_once_nothing_is(tmp_path):
    """Read back, a journal gives the jobs started and not ended and the outcomes not written
    (an unreadable outcome line leaves its job as started: it ran, its outcome is lost); once
    every outcome is written and nothing runs, it holds nothing at all, so a supervisor reads
    no line of a drained worker's journal."""
    from django_pgqueue.worker import journal as journal_module
    from django_pgqueue.worker.journal import Journal

    when = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    path = tmp_path / "journal"
    journal = Journal(path)
    for job_id in (1, 2, 3, 4):
        journal.started(job_id)
    for job_id in (1, 2):
        journal.ended(Outcome(job_id, JobStatus.COMPLETED, when, when, result_json="null"))
    journal.written([1])
    journal._append(b'O [5,"garbled\n')  # as a torn write would leave it (never by the class)
    journal.started(6)
    journal._append(b"O [6,1,2]\n")
    started, outcomes = journal_module.read(path)
    assert started == {3, 4, 6}
    assert [(o.job_id, o.status, o.finished_at) for o in outcomes] == [
        (2, JobStatus.COMPLETED, when)
    ]

    for job_id in (3, 4, 6):
        journal.ended(Outcome(job_id, JobStatus.COMPLETED, when, when, result_json="null"))
    journal.written([2, 3, 4, 6])
    assert journal_module.read(path) == (set(), [])
    assert path.read_bytes()[:8] == (8).to_bytes(8, "little")  # the header: no line at all
    journal.close()


@pytest.mark.django_db
def test_an_executor_drops_a_job_whose_lock_went_unconfirmed_for_half_the_timeout(tmp_path):
    """A worker whose heartbeats have not got through (a network cut) does not start a job it
    claimed ahead once its lock is half way to expiring: another worker may be about to take it
    over. The loop is told (to hand it back while it is still this worker's)."""
    from django_pgqueue.conf import settings
    from django_pgqueue.worker.events import Events
    from django_pgqueue.worker.executors import Dropped, Executors

    marker = tmp_path / "ran"
    fresh = jobs.record.enqueue(str(marker), "fresh")
    stale = jobs.record.enqueue(str(marker), "stale")
    events = Events()
    executors = Executors("parts:drop", 1, events)
    executors.confirm([fresh.pk, stale.pk], claimed=True)
    executors._confirmed[stale.pk] -= settings.VISIBILITY_TIMEOUT  # unconfirmed since
    executors.start()
    try:
        executors.submit([stale, fresh])
        seen = []
        while len(seen) < 2:
            event = events.get(timeout=30)
            if isinstance(event, Dropped | Outcome):
                seen.append(event)
    finally:
        executors.stop()
    assert seen[0] == Dropped(stale.pk, unconfirmed=True)
    assert isinstance(seen[1], Outcome) and seen[1].job_id == fresh.pk
    assert marker.read_text().split()[0] == "fresh"  # the stale one never ran
    assert len(marker.read_text().splitlines()) == 1


def test_the_claim_size_grows_while_claims_come_back_full_and_falls_back_after_a_short_one():
    capacity = Capacity(threads=1, batch_size=1000)
    for _ in range(100):
        capacity.record(outcome_taking(0.00001))
    sizes = []
    for _ in range(6):
        want = capacity.claim_size(in_flight=0, buffered=0)
        sizes.append(want)
        capacity.claimed(want, want, 0.001)  # a backlog: every claim full
    assert sizes == [101, 201, 401, 801, 1001, 1001]  # one per thread + a batch up to the cap
    capacity.claimed(1001, 7, 0.001)  # the backlog ran out
    assert capacity.claim_size(in_flight=0, buffered=0) == 101
    capacity.claimed(
        3, 3, 0.001
    )  # a full claim smaller than a batch (the rest in flight) says nothing
    assert capacity.claim_size(in_flight=0, buffered=0) == 101

    small = Capacity(threads=1, batch_size=16)  # an explicit --batch-size stays the most
    for _ in range(5):
        small.claimed(17, 17, 0.001)
    assert small.claim_size(in_flight=0, buffered=0) == 17


def test_a_slow_claim_is_made_before_what_is_queued_runs_out():
    capacity = Capacity(threads=1, batch_size=1000)
    for _ in range(100):
        capacity.record(outcome_taking(0.0001))  # 1,000 jobs: 0.1 s of work
    for _ in range(4):
        capacity.claimed(capacity.limit + 1, capacity.limit + 1, 0.001)
    assert capacity.claim_size(in_flight=0, buffered=0) == 1001
    # A quarter free: 749 queued (75 ms of work) and claims answering in 1 ms: not yet.
    assert capacity.claim_size(in_flight=750, buffered=0) == 0
    for _ in range(10):
        capacity.claimed(250, 250, 0.05)  # a loaded server: claims take 50 ms
    # The same 75 ms of work would run out before two such claims: claim now.
    assert capacity.claim_size(in_flight=750, buffered=0) == 251
    assert capacity.claim_size(in_flight=900, buffered=0) == 0  # but not less than a quarter


@pytest.mark.django_db(transaction=True)
def test_the_event_loop_thread_starts_with_the_first_async_job_only():
    worker = Worker(listen=False, worker_id="parts:lazy-loop")
    worker._start_threads()
    try:
        names = {t.name for t in threading.enumerate()}
        assert "pgqueue-asyncio" not in names and "pgqueue-asyncio-watchdog" not in names
        worker._async.submit([])  # the first async jobs claimed
        names = {t.name for t in threading.enumerate()}
        assert "pgqueue-asyncio" in names and "pgqueue-asyncio-watchdog" in names
    finally:
        worker._executors.stop()
        worker._async.stop()


@pytest.mark.django_db(transaction=True)
def test_a_chain_on_an_idle_worker_runs_step_after_step_with_no_look_between(monkeypatch):
    """An idle listening worker whose short claim took jobs asks when to claim next
    (``Claimer.idle_until``, a round trip) only once their outcomes are written and the wake-ups
    those writes cause had time to arrive: a chain's steps follow one another with no look
    between them, where there was one after every step's claim (before the write of that
    step's outcome, and so before the claim of the next). The delays are long here, so that a
    slow machine's notification comes within them; the worker stops after the last step."""
    from django_pgqueue import chain
    from django_pgqueue.worker import loop
    from django_pgqueue.worker.claims import Claimer

    monkeypatch.setattr(loop, "LOOK_AFTER", 30.0)
    monkeypatch.setattr(loop, "LOOK_GRACE", 5.0)
    looks = []
    real_look = Claimer.idle_until

    def look(self):
        looks.append(time.monotonic())
        return real_look(self)

    monkeypatch.setattr(Claimer, "idle_until", look)
    steps = chain(*(jobs.add.s(i, 1) for i in range(8)))
    assert Worker(listen=True, max_jobs=len(steps)).run() == 0
    rows = [Job.objects.get(pk=step.pk) for step in steps]
    assert [(row.status, row.result) for row in rows] == [
        (JobStatus.COMPLETED, i + 1) for i in range(8)
    ]
    assert all(b.started_at >= a.finished_at for a, b in itertools.pairwise(rows))
    # One look at most: the first step's wake-up may go out before the listener listens.
    assert len(looks) <= 1
