from __future__ import annotations

import pytest
from django.db import connection, connections

# The system tools' fixtures and the loud summary of those missing (tests/tools.py).
from tests.tools import (  # noqa: F401
    chromium_binary,
    netns_tools,
    pgbouncer_binary,
    promtool_binary,
    pytest_sessionfinish,
    pytest_terminal_summary,
)


@pytest.fixture
def other_connection(transactional_db):
    """A second, independent connection to the test database (its own session and locks)."""
    conn = connections.create_connection("default")
    conn.ensure_connection()
    yield conn
    conn.close()


@pytest.fixture
def probe_table(transactional_db):
    """A table the ``probe`` jobs record their runs in (``tests.utils.runs``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE control_probe (job_id bigint PRIMARY KEY, key text, started float8, "
            "ended float8)"
        )
    yield "control_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS control_probe")


@pytest.fixture(scope="session")
def private_cluster():
    """A PostgreSQL cluster of the session's own, for tests that stop, restart or crash it.

    Made once per session (initdb, a free port of 127.0.0.1, a migrated queue database) and
    deleted at the end; see tests/private_cluster.py. The shared server is never touched.
    """
    from tests.private_cluster import running_cluster

    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def cluster_queue(private_cluster):
    """The private cluster's queue, running and empty at the start of the test."""
    from tests.private_cluster import empty_queue

    return empty_queue(private_cluster)


@pytest.fixture(scope="session")
def pgbouncer(pgbouncer_binary, django_db_setup):  # noqa: F811
    """A real PgBouncer in transaction mode in front of the test server (tests/pgbouncer.py).

    Without Debian's pgbouncer, the tests that use it are skipped (``pgbouncer_binary``, first,
    so before the test database is made)."""
    from tests.pgbouncer import PgBouncer

    bouncer = PgBouncer(connections["default"].settings_dict, binary=pgbouncer_binary)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.stop()


#: Modules whose tests drive processes and servers for a long time (faults, chaos, PgBouncer,
#: server crashes, benchmarks, a build of the package, schedules over wall-clock seconds, the
#: probe port with a real Prometheus, pytest run on a test of the test tools). They test our code
#: against PostgreSQL and the OS, not against Django's APIs: `make test` runs them on the
#: newest Django, and tox's older-Django environments leave them out (`-m "not slow"`).
SLOW_MODULES = {
    "test_bench.py",
    "test_bench_compare.py",
    "test_bench_scenarios.py",
    "test_deploy.py",
    "test_drain_anatomy.py",
    "test_database_faults.py",
    "test_distribution.py",
    "test_faults_jobs.py",
    "test_hosts.py",
    "test_metrics.py",
    "test_monitoring.py",
    "test_outcome_durability.py",
    "test_pgbouncer.py",
    "test_schedule_workers.py",
    "test_tools.py",
    "test_worker_deploys.py",
}


#: Modules that test the worker and the queue's SQL against PostgreSQL and the OS (real
#: ``run_jobs`` processes, concurrent claims, held and limited backlogs, wakes, cancels, logs
#: and traces of runs): none of them goes through an API Django changes between versions, and
#: together they are most of the suite's time. Marked slow too: run once, on the newest Django.
#: The Django-facing modules (enqueue and on_commit, admin, checks, migrations, views, the
#: tasks backend, the pool, the queue database's router) run on every supported Django.
WORKER_MODULES = {
    "test_async_jobs.py",
    "test_cancel.py",
    "test_claim.py",
    "test_events.py",
    "test_fencing.py",
    "test_held.py",
    "test_held_queues.py",
    "test_interruptions.py",
    "test_limits.py",
    "test_logs.py",
    "test_logs_context.py",
    "test_parked.py",
    "test_queue_control.py",
    "test_ready_ring.py",
    "test_relay.py",
    "test_storage.py",
    "test_storage_integrity.py",
    "test_tracing.py",
    "test_wake.py",
    "test_worker_cursor.py",
    "test_workflow_workers.py",
    "test_worker_parts.py",
    "test_worker_process.py",
    "test_worker_reload.py",
}


#: Modules whose tests depend on a worker keeping time under load (job timeouts, a host cut off
#: past the visibility timeout): `make test` and tox run them by themselves, after the rest has
#: run in parallel processes (marked ``alone``).
ALONE_MODULES = {"test_hosts.py", "test_pool.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in ALONE_MODULES:
            item.add_marker(pytest.mark.alone)
        if item.path.name in SLOW_MODULES or item.path.name in WORKER_MODULES:
            item.add_marker(pytest.mark.slow)
