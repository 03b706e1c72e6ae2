"""Migrations that touch the job table keep enqueues and claims going on a big table.

* Every migration from ``0017`` on adds a CHECK to ``pgqueue_job`` ``NOT VALID`` (validated in
  a transaction of its own) and builds its indexes ``CONCURRENTLY``: none reads the whole table
  under a lock that stops writes (their SQL, as ``sqlmigrate`` prints it).
* While ``0023_workflows_online`` builds an index, held back by a transaction that has an
  enqueue open (a concurrent build waits for the writers it started with), new jobs are
  enqueued and claimed on another connection: the migration holds no lock that stops them.
"""

from __future__ import annotations

import re
import threading
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, connections

from django_pgqueue.models import Job
from scripts import schema
from tests.utils import migrated_back_to

pytestmark = pytest.mark.django_db(transaction=True)

#: The first migration written to run on a live queue's big table.
FIRST_ONLINE = "0017"
#: ``pgqueue_job`` itself, not ``pgqueue_job_dependency`` and the like.
JOB_TABLE = r'"?pgqueue_job"?(?=[\s(;])'
BLOCKING = {
    "an index built under a write lock": re.compile(
        rf"CREATE\s+(UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY)\S+\s+ON\s+{JOB_TABLE}", re.I
    ),
    "a CHECK or foreign key validated under the ALTER's lock": re.compile(
        rf"ALTER\s+TABLE\s+{JOB_TABLE}[^;]*ADD\s+CONSTRAINT\s+\S+\s+(CHECK|FOREIGN)"
        r"(?![^;]*NOT\s+VALID)[^;]*;",
        re.I,
    ),
}


def online_migrations() -> list[str]:
    return sorted(p.stem for p in schema.MIGRATIONS.glob("0*.py") if p.stem[:4] >= FIRST_ONLINE)


def test_migrations_that_touch_the_job_table_never_read_it_under_a_write_lock():
    names = online_migrations()
    assert "0022_workflows" in names and "0023_workflows_online" in names
    found = []
    for name in names:
        out = StringIO()
        call_command("sqlmigrate", "django_pgqueue", name, stdout=out)
        for what, pattern in BLOCKING.items():
            found += [
                f"{name}: {what}: {m.group(0)[:120]}" for m in pattern.finditer(out.getvalue())
            ]
    assert not found, "\n".join(found)


def test_the_lock_check_sees_what_it_must():
    blocking = [
        'CREATE INDEX "pgqueue_job_waiting" ON "pgqueue_job" ("queue", "id");',
        "CREATE UNIQUE INDEX x ON pgqueue_job (queue);",
        'ALTER TABLE "pgqueue_job" ADD CONSTRAINT "c" CHECK ("status" IN (\'a\'));',
    ]
    harmless = [
        "CREATE INDEX CONCURRENTLY x ON pgqueue_job (queue);",
        'CREATE INDEX "x" ON "pgqueue_job_dependency" ("parent_id");',
        "ALTER TABLE pgqueue_job ADD CONSTRAINT c CHECK (interruptions >= 0) NOT VALID;",
    ]
    hits = [any(p.search(s) for p in BLOCKING.values()) for s in blocking + harmless]
    assert hits == [True] * len(blocking) + [False] * len(harmless)


#: The enqueue of the version before 0022 (what runs while the migration does: the new version
#: starts once it is done), a unique key on the index of pending and running jobs.
OLD_ENQUEUE = """INSERT INTO pgqueue_job (queue, name, unique_key) VALUES ('default', %s, %s)
ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN ('pending', 'running')
DO NOTHING RETURNING id"""


def locks_on_job_table(pid: int) -> tuple[set[str], set[str]]:
    """The modes ``pid`` holds and waits for on ``pgqueue_job``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT mode, granted FROM pg_locks WHERE pid = %s AND locktype = 'relation' "
            "AND relation = 'pgqueue_job'::regclass",
            [pid],
        )
        rows = cursor.fetchall()
    return {m for m, g in rows if g}, {m for m, g in rows if not g}


def test_enqueues_and_claims_go_on_while_0023_builds_its_indexes():
    with migrated_back_to("0022_workflows") as cursor:
        # Written as the version before would (today's enqueue needs 0027's function).
        cursor.execute(
            "INSERT INTO pgqueue_job (name) SELECT 'tests.testapp.jobs.noop' "
            "FROM generate_series(1, 500)"
        )
        cursor.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = 'pgqueue_job'::regclass "
            "AND indexrelid::regclass::text IN ('pgqueue_job_waiting', 'pgqueue_job_batch')"
        )
        assert cursor.fetchone()[0] == 0
        writer = connections.create_connection("default")
        errors: list[BaseException] = []

        def migrate() -> None:
            try:
                call_command("migrate", "django_pgqueue", "0023_workflows_online", verbosity=0)
            except BaseException as exc:  # reported by the test
                errors.append(exc)
            finally:
                connections.close_all()

        thread = threading.Thread(target=migrate)
        try:
            writer.set_autocommit(False)
            with writer.cursor() as w:  # an enqueue in flight, its transaction open
                w.execute("INSERT INTO pgqueue_job (name) VALUES ('tests.testapp.jobs.noop')")
            thread.start()
            # The index build waits for that writer (a concurrent build waits for the writers
            # it started with): find it waiting.
            pid = None
            for _ in range(600):
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%%INDEX CONCURRENTLY%%'"
                )
                row = cursor.fetchone()
                if row:
                    pid = row[0]
                    break
                assert thread.is_alive(), errors
                time.sleep(0.05)
            assert pid is not None, "the migration never waited on the open enqueue"
            held, waiting = locks_on_job_table(pid)
            assert held <= {"ShareUpdateExclusiveLock"} and not waiting, (held, waiting)
            # The migration is in the middle of its build: writes and claims go on.
            cursor.execute("SET lock_timeout = '20s'")
            try:
                cursor.execute(OLD_ENQUEUE, ["tests.testapp.jobs.noop", "lock-test"])
                assert cursor.fetchone() is not None
                assert len(Job.objects.claim("lock-test", None, 5)) == 5
            finally:
                cursor.execute("RESET lock_timeout")
            assert thread.is_alive()  # still building, held back by the open enqueue
            writer.commit()
        finally:
            writer.close()
            thread.join(60)
        assert not thread.is_alive() and not errors, errors
        cursor.execute(
            "SELECT indexrelid::regclass::text, indisvalid FROM pg_index "
            "WHERE indrelid = 'pgqueue_job'::regclass AND indexrelid::regclass::text IN "
            "('pgqueue_job_waiting', 'pgqueue_job_batch', 'pgqueue_job_unique_active')"
        )
        assert sorted(cursor.fetchall()) == [
            ("pgqueue_job_batch", True),
            ("pgqueue_job_unique_active", True),
            ("pgqueue_job_waiting", True),
        ]
        cursor.execute(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'pgqueue_job_status_valid'"
        )
        assert cursor.fetchone() == (True,)
