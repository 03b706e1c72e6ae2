"""``manage.py pgqueue_bench --compare`` with tiny numbers: our drain, the raw-SQL floor and
pgqueuer (where it is installed) on the test database, real processes; the figures' shape and
the clean-up. No timing is asserted: the figures depend on the machine.
"""

from __future__ import annotations

import asyncio
import json
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_pgqueue.contrib.bench import database, floor, pgqueuer_drain
from django_pgqueue.contrib.bench.compare import FIGURES
from django_pgqueue.contrib.bench.results import QUEUE_PREFIX, BenchError
from django_pgqueue.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

#: Tables, types and functions named like the floor's and pgqueuer's scratch objects.
SCRATCH_OBJECTS = r"""
SELECT relname FROM pg_class WHERE relname LIKE 'pgqueue\_bench\_%'
UNION ALL SELECT typname FROM pg_type WHERE typname LIKE 'pgqueue\_bench\_%'
UNION ALL SELECT proname FROM pg_proc WHERE proname LIKE 'pgqueue\_bench\_%'
"""


def run_bench(*args: str) -> tuple[list[str], str]:
    out, err = StringIO(), StringIO()
    call_command("pgqueue_bench", *args, stdout=out, stderr=err)
    return out.getvalue().splitlines(), err.getvalue()


def scratch_objects() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(SCRATCH_OBJECTS)
        return [name for (name,) in cursor.fetchall()]


def assert_drained(figures: dict[str, float | None]) -> None:
    assert list(figures) == list(FIGURES)
    for name, value in figures.items():
        assert isinstance(value, float), name  # the server is local: its CPU is read too
        # 300 jobs may take a backend less than a clock tick of CPU (/proc counts in ticks).
        assert value > 0 if name.startswith("per_s") else value >= 0, name


def test_compare_drains_ours_and_the_floor_and_prints_the_ratios(monkeypatch):
    # As where pgqueuer is not installed: said in one line, and the rest goes on.
    monkeypatch.setattr(pgqueuer_drain, "missing", lambda: "No module named 'pgqueuer'")
    # 3,000 jobs: a drain of 300 could end (one claim of them all) between two readings of
    # its backends on a busy machine, and then has no PostgreSQL CPU to show.
    lines, err = run_bench("--compare", "--jobs=3000", "--rounds=1", "--json")

    data = json.loads(lines[-1])
    assert list(data) == ["systems", "ratios", "machine", "settings"]
    systems = data["systems"]
    assert list(systems) == ["ours", "floor", "pgqueuer"]
    for system in ("ours", "floor"):
        assert_drained(systems[system]["median"])
        (only,) = systems[system]["rounds"]
        assert only == {**systems[system]["median"], "checkpoints": only["checkpoints"]}
        assert only["checkpoints"] >= 0
    assert systems["pgqueuer"] == {"skipped": "not installed (No module named 'pgqueuer')"}
    assert list(data["ratios"]) == ["ours/floor"]
    ours, floor_median = systems["ours"]["median"], systems["floor"]["median"]
    assert data["ratios"]["ours/floor"] == {
        rate: round(ours[rate] / floor_median[rate], 3)
        for rate in ("per_s_from_fork", "per_s_from_first_start")
    }
    assert data["settings"]["jobs"] == 3000
    assert data["settings"]["processes"] == 2
    assert len(data["settings"]["floor_sql_sha256"]) == 12
    assert {"cpu_count", "postgresql", "load_average_1m", "load_average_1m_end"} <= set(
        data["machine"]
    )

    text = lines[:-1]
    assert any(line.startswith("system") and "jobs/s from fork" in line for line in text)
    assert [line for line in text if line.startswith("pgqueuer")] == [
        "pgqueuer: not run: not installed (No module named 'pgqueuer')"
    ]
    assert any(line.startswith("ours/floor: ") for line in text)
    assert any(line.startswith("machine: ") for line in text)
    # Our drain is the standard run's drain phase, reported as such.
    assert "drain with 2 processes" in err
    assert "floor: drain with 2 processes" in err

    assert scratch_objects() == []
    assert not Job.objects.filter(queue__startswith=QUEUE_PREFIX).exists()


def test_compare_drains_pgqueuer_and_leaves_an_installation_of_its_own_alone():
    pytest.importorskip("pgqueuer")
    from pgqueuer import Queries

    async def default_installation(install: bool) -> int:
        async with await psycopg.AsyncConnection.connect(
            database.conninfo("pgqueue test"), autocommit=True
        ) as conn:
            queries = Queries.from_psycopg_connection(conn)
            if install:
                await queries.install()
                await queries.enqueue("mine", None)
                return 1
            left = sum(s.count for s in await queries.queue_size())
            await queries.uninstall()
            return left

    asyncio.run(default_installation(install=True))
    try:
        lines, err = run_bench("--compare", "--jobs=300", "--rounds=1", "--json")
    finally:
        left = asyncio.run(default_installation(install=False))
    assert left == 1  # its job was neither run nor deleted

    data = json.loads(lines[-1])
    assert list(data["systems"]) == ["ours", "floor", "pgqueuer"]
    assert_drained(data["systems"]["pgqueuer"]["median"])
    assert list(data["ratios"]) == ["ours/floor", "ours/pgqueuer"]
    assert data["settings"]["pgqueuer"] == pgqueuer_drain.version()
    assert "pgqueuer: drain with 2 processes" in err
    assert any(line.startswith("ours/pgqueuer: ") for line in lines)
    assert scratch_objects() == []


def test_the_floor_drops_its_table_when_a_worker_fails(monkeypatch):
    def boom() -> None:
        raise RuntimeError("boom")

    monkeypatch.setitem(floor.FUNCTIONS, floor.NOOP, boom)  # the forked workers inherit it
    with pytest.raises(BenchError, match="of 2 drain processes failed"):
        floor.drain(50, 2)
    assert scratch_objects() == []


def test_the_floor_statements_are_the_checked_in_ones():
    statements = floor.statements()
    assert list(statements) == [
        "create",
        "index",
        "enqueue",
        "analyze",
        "claim",
        "complete",
        "outcome",
        "drop",
    ]
    assert f"LIMIT {floor.BATCH_SIZE}\n    FOR UPDATE SKIP LOCKED" in statements["claim"]
    assert statements["drop"] == "DROP TABLE IF EXISTS {table}"


def test_compare_options_are_checked():
    with pytest.raises(CommandError, match="--rounds: must be between 1 and 100, got 0"):
        run_bench("--compare", "--rounds=0")
    with pytest.raises(CommandError, match="--compare and --memory are separate runs"):
        run_bench("--compare", "--memory")
