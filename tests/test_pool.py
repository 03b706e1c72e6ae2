"""Job threads sharing Django's connection pool (``OPTIONS["pool"]``): real ``run_jobs``
subprocesses (tests/pool_settings.py), their server connections read from pg_stat_activity while
they run, and the system check E020 (docs/worker.md, "Connections").

The jobs (tests/poolapp/jobs.py) record each run: the worker process, the server backend that
ran the statement, and whether the statement ran inside a transaction left open before it.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import psycopg
import pytest
from django.conf import settings as django_settings
from django.core.checks import run_checks
from django.db import connection

from django_pgqueue import pools
from django_pgqueue.models import Job
from tests.poolapp import jobs
from tests.poolapp.jobs import RUNS_TABLE
from tests.utils import start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

#: The application_name of the job threads' connections (the worker's own have theirs).
JOBS_APP = "pgqueue-test-pool-jobs"
#: The worker's own connections: ``pgqueue worker <worker id>`` (claims, outcomes),
#: ``pgqueue listener <tag> <worker id>`` (LISTEN), ``pgqueue schedules <worker id>`` (the sync
#: of the code's schedules, a moment at the start); the worker id ends in the pid.
DEDICATED = re.compile(r"^pgqueue (worker|listener|schedules) (?:[0-9a-f]{20} )?\S*?(\d+)$")
RELAY = re.compile(r"^pgqueue listener [0-9a-f]{20} .* relay$")


@pytest.fixture
def runs_table(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {RUNS_TABLE} (job_id bigint, kind text, pid int, thread bigint, "
            "backend int, in_transaction bool, application_name text, "
            "at timestamptz DEFAULT clock_timestamp())"
        )
    yield RUNS_TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {RUNS_TABLE}")


def runs() -> list[dict[str, object]]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT job_id, kind, pid, backend, in_transaction, application_name "
            f"FROM {RUNS_TABLE} ORDER BY at"
        )
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@dataclass
class Peaks:
    """The most backends of each kind seen at once in the test database, per worker process
    for the worker's own (``worker``, ``listener``), in all for the job threads' and for the
    relays' listening connections (``run_jobs --processes``)."""

    jobs: int = 0
    relays: int = 0
    dedicated: dict[int, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    job_backends: set[int] = field(default_factory=set)
    dedicated_backends: set[int] = field(default_factory=set)
    listening_job_backends: int = 0
    samples: int = 0


class Sampler(threading.Thread):
    """Reads pg_stat_activity every 20 ms, on a connection of its own, until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        params = connection.settings_dict
        self.conninfo = {
            "dbname": params["NAME"],
            "host": params.get("HOST") or None,
            "port": params.get("PORT") or None,
            "user": params.get("USER") or None,
            "password": params.get("PASSWORD") or None,
        }
        self.peaks = Peaks()
        self.stopping = threading.Event()

    def run(self) -> None:
        with psycopg.connect(**self.conninfo, autocommit=True) as conn:
            while not self.stopping.is_set():
                self.sample(conn)
                self.stopping.wait(0.02)

    def sample(self, conn: psycopg.Connection) -> None:
        rows = conn.execute(
            "SELECT pid, application_name, query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        peaks = self.peaks
        peaks.samples += 1
        job_rows = [r for r in rows if r[1] == JOBS_APP]
        peaks.jobs = max(peaks.jobs, len(job_rows))
        peaks.job_backends.update(r[0] for r in job_rows)
        peaks.listening_job_backends += sum(r[2].upper().startswith("LISTEN") for r in job_rows)
        now: dict[int, Counter[str]] = defaultdict(Counter)
        relays = [r for r in rows if RELAY.match(r[1])]
        peaks.relays = max(peaks.relays, len(relays))
        peaks.dedicated_backends.update(r[0] for r in relays)
        for backend, name, _query in rows:
            match = DEDICATED.match(name)
            if match:
                now[int(match.group(2))][match.group(1)] += 1
                peaks.dedicated_backends.add(backend)
        for pid, kinds in now.items():
            for kind, count in kinds.items():
                peaks.dedicated[pid][kind] = max(peaks.dedicated[pid][kind], count)


def run_workers(
    processes: int, threads: int, env: dict[str, str], done: int, timeout: float = 60
) -> tuple[Peaks, str]:
    """``run_jobs --processes P --threads T`` until ``done`` jobs have finished; the peaks seen
    meanwhile and its output."""
    sampler = Sampler()
    sampler.start()
    worker = start_worker("--processes", str(processes), "--threads", str(threads), env=env)
    try:
        wait_until(
            lambda: Job.objects.filter(status__in=["completed", "dead"]).count() >= done,
            timeout=timeout,
            interval=0.1,
        )
    finally:
        sampler.stopping.set()
        sampler.join()
        text = stop(worker)
    return sampler.peaks, text


def pool_env(pool: dict[str, object] | None, **extra: str) -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.pool_settings",
        "PGQUEUE_TEST_APPLICATION_NAME": JOBS_APP,
    }
    if pool is not None:
        env["PGQUEUE_TEST_POOL"] = json.dumps(pool)
    return worker_env(**env, **extra)


def enqueue_mix(count: int) -> dict[str, list[int]]:
    """``count`` jobs: most query and return (one in ten holds its connection 50 ms); one in
    twenty leaves a transaction open, one in twenty raises inside one; four end their own
    connection, four run far past their timeout holding theirs."""
    calls: dict[str, list[dict[str, object]]] = defaultdict(list)
    for i in range(count):
        if i % 20 == 1:
            calls["leaves_open"].append({"n": i})
        elif i % 20 == 2:
            calls["raises"].append({"n": i})
        elif i % 50 == 3:
            calls["kills_connection"].append({"n": i})
        elif i % 50 == 4:
            # Far past its 0.3 s timeout, so a loop that comes to it seconds late (2 cores, tox
            # running two suites at once) still finds it running; well inside the pool's 10 s
            # wait, since its abandoned thread holds its pooled connection until it returns
            # and the process's other jobs may wait for that connection.
            calls["overruns"].append({"n": i, "sleep": 5.0})
        else:
            calls["uses_orm"].append({"n": i, "sleep": 0.05 if i % 10 == 5 else 0.0})
    return {name: getattr(jobs, name).enqueue_many(args) for name, args in calls.items()}


def test_job_threads_share_a_small_pool_and_the_worker_keeps_its_own(runs_table):
    """2 processes x 8 threads, a pool of at most 2: 200 jobs, each run once, on at most 2 job
    connections per process at any time, beside the worker's own 2, which never come from
    the pool; a job never sees what the one before left on its connection."""
    ids = enqueue_mix(200)
    pool = {"min_size": 1, "max_size": 2, "timeout": 10}
    peaks, text = run_workers(2, 8, pool_env(pool), done=200)

    rows = Job.objects.values_list("name", "status")
    ends = Counter((name.rsplit(".", 1)[1], status) for name, status in rows)
    expected = {(name, "dead"): len(ids[name]) for name in ids if name != "uses_orm"}
    assert ends == Counter({("uses_orm", "completed"): len(ids["uses_orm"]), **expected}), (
        ends,
        text[-20000:],
    )
    # Each job ran once, and the failures failed as they should.
    recorded = runs()
    kinds = Counter(r["kind"] for r in recorded)
    assert Counter(r["job_id"] for r in recorded).most_common(1)[0][1] == 1
    # "open": rolled back. An overrun may time out still waiting for a connection: a job's
    # timeout counts that wait too.
    overran = kinds.pop("overruns", 0)
    assert kinds == Counter(
        orm=len(ids["uses_orm"]), raises=len(ids["raises"]), kills=len(ids["kills_connection"])
    )
    assert overran <= len(ids["overruns"])
    for name, fragment in [
        ("leaves_open", "TransactionLeftOpen"),
        ("raises", "RuntimeError"),
        ("kills_connection", "OperationalError"),
        ("overruns", "JobTimeout"),
    ]:
        for job in Job.objects.filter(pk__in=ids[name]):
            assert job.status == "dead" and fragment in job.last_error, (name, job.last_error)
    assert "couldn't get a connection" not in text
    # No job's statement ran in a transaction a job before it left open.
    assert not [r for r in recorded if r["in_transaction"]]
    assert {r["application_name"] for r in recorded} == {JOBS_APP}

    # The job threads' connections: at most 2 per process at once (pg_stat_activity), and
    # each process used 2 backends besides those its jobs ended (replaced by the pool).
    assert peaks.samples > 20
    assert 0 < peaks.jobs <= 2 * 2, peaks
    backends: dict[int, set[int]] = defaultdict(set)
    for r in recorded:
        backends[r["pid"]].add(r["backend"])  # type: ignore[index]
    killed = Counter(r["pid"] for r in recorded if r["kind"] == "kills")
    # Two processes; a third if one that abandoned overrunning threads was replaced in time.
    assert 1 <= len(backends) <= 3
    for pid, used in backends.items():
        assert len(used) <= 2 + killed[pid], (pid, used)
    # The worker's own: one claim/outcome connection per process, and one LISTEN connection
    # for the processes (their relay's), never a pooled one (no job ran on them, none of the
    # pool's LISTENs).
    assert set(backends) <= set(peaks.dedicated)
    for kinds in peaks.dedicated.values():
        assert kinds["worker"] <= 1 and kinds["listener"] == 0 and kinds["schedules"] <= 1
    for pid in backends:
        assert peaks.dedicated[pid]["worker"] == 1
    assert peaks.relays == 1
    assert not peaks.dedicated_backends & {r["backend"] for r in recorded}
    assert peaks.listening_job_backends == 0
    # The supervisor said what the threads share.
    assert "job thread(s) of each process share a pool of 1-2 connections" in text


def test_without_a_pool_each_thread_holds_its_own(runs_table):
    """The same workers without a pool (persistent connections): each thread that ran a job
    keeps a connection, up to processes x threads."""
    jobs.uses_orm.enqueue_many([{"n": i, "sleep": 0.05} for i in range(100)])
    env = pool_env(None, PGQUEUE_TEST_CONN_MAX_AGE="null")
    peaks, text = run_workers(2, 8, env, done=100)
    assert Job.objects.filter(status="completed").count() == 100
    recorded = runs()
    backends: dict[int, set[int]] = defaultdict(set)
    for r in recorded:
        backends[r["pid"]].add(r["backend"])  # type: ignore[index]
    assert max(len(used) for used in backends.values()) > 2
    assert all(len(used) <= 8 for used in backends.values())
    assert 2 * 2 < peaks.jobs <= 2 * 8
    assert "share a pool" not in text


def test_a_job_that_waits_too_long_for_a_connection_fails_and_the_worker_goes_on(runs_table):
    """A pool of one connection, two threads: the job that finds it taken waits the pool's
    timeout, then fails with PoolTimeout, recorded on the job; the worker goes on."""
    first = jobs.uses_orm.enqueue_many([{"n": i, "sleep": 1.5} for i in range(2)])
    pool = {"min_size": 1, "max_size": 1, "timeout": 0.5}
    worker = start_worker("--threads", "2", env=pool_env(pool))
    try:
        wait_until(
            lambda: Job.objects.filter(pk__in=first, status__in=["completed", "dead"]).count() == 2
        )
        later = jobs.uses_orm.enqueue(99).pk
        wait_until(lambda: Job.objects.filter(pk=later, status="completed").exists())
    finally:
        text = stop(worker)
    outcomes = {job.status: job for job in Job.objects.filter(pk__in=first)}
    assert set(outcomes) == {"completed", "dead"}, text
    error = outcomes["dead"].last_error
    assert "PoolTimeout" in error and "couldn't get a connection after 0.50 sec" in error
    assert "share a pool of 1-1 connections" in text and "PoolTimeout" in text


def test_a_cancelled_jobs_connection_goes_back_to_the_pool(runs_table):
    """A pool of one: a job holds it until cancelled; the job after it waits, and runs as soon
    as the cancelled one returns."""
    holding = jobs.until_cancelled.enqueue(1).pk
    pool = {"min_size": 1, "max_size": 1, "timeout": 10}
    worker = start_worker("--threads", "2", env=pool_env(pool))
    try:
        wait_until(lambda: any(r["job_id"] == holding for r in runs()))
        waiting = jobs.uses_orm.enqueue(2).pk
        wait_until(lambda: Job.objects.filter(pk=waiting, status="running").exists())
        time.sleep(0.3)
        assert [r["job_id"] for r in runs()] == [holding]  # it waits for the connection
        assert Job.objects.get(pk=holding).cancel()
        wait_until(lambda: Job.objects.filter(pk=waiting, status="completed").exists())
    finally:
        text = stop(worker)
    assert Job.objects.get(pk=holding).status == "cancelled", text
    assert {r["backend"] for r in runs()} == {r["backend"] for r in runs()[:1]}  # the same one


# ----- the system check ---------------------------------------------------------------------


def database(**overrides: object) -> dict[str, object]:
    pool = overrides.pop("pool", True)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "CONN_MAX_AGE": 0,
        "OPTIONS": {"pool": pool},
        **overrides,
    }


@pytest.mark.parametrize(
    ("settings_dict", "says"),
    [
        (database(), None),
        (database(pool={"min_size": 2, "max_size": 8, "timeout": 5}), None),
        (database(CONN_MAX_AGE=60), "CONN_MAX_AGE is 60"),
        (database(CONN_MAX_AGE=None), "CONN_MAX_AGE is None"),
        # psycopg_pool's min_size is 4 unless set: a max_size below it is refused.
        (database(pool={"max_size": 2}), "max_size must be greater or equal than min_size"),
        (database(pool={"max_sise": 2}), "unexpected keyword argument 'max_sise'"),
        (database(pool={"kwargs": {}}), "sets kwargs, which Django sets itself"),
        (database(pool="yes"), "it must be True or a dict"),
    ],
)
def test_a_pool_that_cannot_open_is_a_system_check_error(settings_dict, says):
    problem = pools.problem(settings_dict)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem


def test_the_check_says_when_psycopg_pool_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    assert "pip install 'django-pgqueue-jobs[pool]'" in pools.problem(database())


def test_the_check_reports_each_pooled_alias(monkeypatch):
    # Set on the settings object, not overridden: the setting_changed signal would reset the
    # test's own connections.
    databases = {**django_settings.DATABASES}
    databases["pooled"] = {**databases["default"], **database(CONN_MAX_AGE=30)}
    monkeypatch.setattr(django_settings, "DATABASES", databases)
    messages = [m for m in run_checks(tags=["django_pgqueue"]) if m.id == "django_pgqueue.E020"]
    assert len(messages) == 1
    assert "DATABASES['pooled']" in messages[0].msg and "CONN_MAX_AGE is 30" in messages[0].msg


def test_the_startup_line_says_what_threads_share(monkeypatch):
    default = django_settings.DATABASES["default"]
    databases = {
        "default": {**default, **database(pool={"max_size": 4})},
        "big": {**default, **database(pool={"min_size": 2, "max_size": 16})},
        "plain": {**default},
    }
    monkeypatch.setattr(django_settings, "DATABASES", databases)
    lines = pools.describe(threads=8, processes=3)
    assert len(lines) == 2
    assert "pool of 4-4 connections to 'default' (at most 12 for 3 process(es))" in lines[0]
    assert "waits for one up to 30s" in lines[0]
    assert "2-16 connections to 'big'" in lines[1] and "each thread gets one" in lines[1]


# ----- the worker's own connections -----------------------------------------------------------


@pytest.fixture
def pool_of_one(monkeypatch, transactional_db):
    """``default`` configured with a pool of one connection (0.2 s timeout), that connection
    taken: anything that asks the pool for another fails with PoolTimeout."""
    from django.db import connections

    settings_dict = connections.settings["default"]
    pooled = {
        **settings_dict,
        "CONN_MAX_AGE": 0,
        "OPTIONS": {
            **settings_dict.get("OPTIONS", {}),
            "pool": {"min_size": 1, "max_size": 1, "timeout": 0.2},
        },
    }
    monkeypatch.setitem(connections.settings, "default", pooled)
    holder = connections.create_connection("default")
    holder.ensure_connection()
    with pytest.raises(Exception, match="couldn't get a connection"):
        other = connections.create_connection("default")
        other.ensure_connection()
    yield
    holder.close()
    holder.close_pool()


def test_the_queue_connection_never_comes_from_the_pool(pool_of_one):
    from django_pgqueue.worker.connection import QueueConnection

    queue = QueueConnection("default", "pgqueue worker test")
    try:
        with queue.cursor() as cursor:
            cursor.execute("SELECT current_setting('application_name')")
            assert cursor.fetchone()[0] == "pgqueue worker test"
    finally:
        queue.close()


def test_the_loops_orm_runs_on_a_connection_of_its_own(pool_of_one):
    from django.db import connections

    from django_pgqueue.worker.connection import own_django_connection

    before = connections["default"]
    with own_django_connection("default", "pgqueue schedules test"):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT current_setting('application_name')")
            assert cursor.fetchone()[0] == "pgqueue schedules test"
        inside = connections["default"]
    assert connections["default"] is before
    assert inside.connection is None  # closed at the end
