"""``pgqueue_bench --scenario`` with tiny phases: the report's structure, never its speed."""

from __future__ import annotations

import json
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection

from django_pgqueue.contrib.bench.results import QUEUE_PREFIX, BenchError
from django_pgqueue.contrib.bench.scenarios import runner
from django_pgqueue.models import Job
from django_pgqueue.models import Worker as WorkerRow
from tests.utils import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TINY = [
    "--warmup=1",
    "--clean=2",
    "--stress=2",
    "--recovery=2",
    "--sample-seconds=1",
    "--rate=50",
    "--threads=2",
    "--drain-timeout=60",
    "--no-progress",
    "--json",
]


def run_scenario(name: str, tmp_path: Path, *extra: str) -> tuple[dict, list[str]]:
    out = StringIO()
    call_command(
        "pgqueue_bench", f"--scenario={name}", f"--output-dir={tmp_path}", *TINY, *extra, stdout=out
    )
    lines = out.getvalue().splitlines()
    return json.loads(lines[-1]), lines[:-1]


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("idle-in-tx", ()),
        (
            "active-readers",
            ("--readers=2", "--reader-transaction-seconds=1", "--reader-pause=0.02"),
        ),
        ("high-load", ("--stress-rate=100",)),
    ],
)
def test_scenario_reports_every_phase_samples_and_chart(tmp_path, name, extra):
    data, table = run_scenario(name, tmp_path, *extra)

    assert data["scenario"] == name
    assert [p["name"] for p in data["phases"]] == list(runner.PHASES)
    for phase in data["phases"]:
        assert set(phase) >= {
            "offered_per_s",
            "completed_per_s",
            "worst_10s_completion_pct",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "max_depth",
            "dead_tuples_end",
            "dead_tuples_max",
        }
        assert phase["offered_per_s"] > 0
        assert "pgqueue_job" in phase["dead_tuples_max"]
    assert {"autovacuum", "synchronous_commit", "server_version"} <= set(data["server"])
    assert data["details"]["unfinished_at_end"] == 0
    assert data["details"]["pressure"] == {"high-load": "none"}.get(name, name)
    if name == "active-readers":
        assert data["details"]["reader_pause_s"] == 0.02
        assert data["details"]["reader_scans"] > 0 and not data["details"]["reader_errors"]
    assert data["settings"]["stress_rate"] == (100 if name == "high-load" else 50)

    # One JSON line per window of every phase, in time order.
    samples = [json.loads(line) for line in Path(data["samples_path"]).read_text().splitlines()]
    assert [s["phase"] for s in samples] == ["warmup"] + ["clean"] * 2 + ["stress"] * 2 + [
        "recovery"
    ] * 2
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    for sample in samples:
        assert {"offered", "completed", "p95_ms", "depth", "dead_tuples", "index_kib"} <= set(
            sample
        )
    assert sum(s["offered"] for s in samples) > 0

    svg = Path(data["chart_path"]).read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    for phase in runner.PHASES:
        assert f">{phase}</text>" in svg
    assert "<polyline" in svg

    # The human-readable table: a row per phase, then the server's settings.
    assert [line.split()[0] for line in table[2:6]] == list(runner.PHASES)
    assert any(line.startswith("server: PostgreSQL") for line in table)

    # Nothing of the scratch queue is left behind.
    assert not Job.objects.filter(queue__startswith=QUEUE_PREFIX).exists()
    assert not WorkerRow.objects.filter(worker_id__startswith=QUEUE_PREFIX).exists()


def test_minutes_sets_the_stress_phase_and_bad_values_are_refused(tmp_path):
    with pytest.raises(CommandError, match="--minutes"):
        call_command("pgqueue_bench", "--scenario=idle-in-tx", "--minutes=0", stdout=StringIO())
    with pytest.raises(CommandError, match="--rate"):
        call_command("pgqueue_bench", "--scenario=idle-in-tx", "--rate=-1", stdout=StringIO())
    data, _ = run_scenario("idle-in-tx", tmp_path, "--minutes=0.05")
    assert data["settings"]["stress"] == pytest.approx(3.0)
    assert [p["seconds"] for p in data["phases"]] == [1.0, 2.0, 3.0, 2.0]


def test_a_run_the_server_cuts_off_stops_its_worker_and_deletes_its_rows(tmp_path, monkeypatch):
    """The server ends the benchmark's own connections mid-run (as a restart does): the run
    fails, and still stops its ``run_jobs`` process and deletes the scratch queue's rows."""
    workers: list[runner.WorkerProcess] = []

    class RecordedWorker(runner.WorkerProcess):
        def start(self) -> None:
            super().start()
            workers.append(self)

    monkeypatch.setattr(runner, "WorkerProcess", RecordedWorker)

    def others() -> int:  # the benchmark's own connections: its producer's and its sampler's
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND application_name NOT LIKE 'pgqueue %%'"
            )
            return int(cursor.fetchone()[0])

    def cut_off() -> None:
        try:
            wait_until(lambda: others() >= 2)
            with connection.cursor() as cursor:  # this thread's own connection
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND application_name NOT LIKE 'pgqueue %%'"
                )
        finally:
            connection.close()

    killer = threading.Thread(target=cut_off)
    killer.start()
    try:
        with pytest.raises((BenchError, OperationalError)):
            run_scenario("idle-in-tx", tmp_path, "--stress=30", "--recovery=30")
        assert len(workers) == 1
        assert workers[0].exit_code is not None, "the run_jobs process was left running"
    finally:
        killer.join()
        for worker in workers:
            worker.stop()  # never left behind, even when the assertion fails
    assert not Job.objects.filter(queue__startswith=QUEUE_PREFIX).exists()


@pytest.mark.parametrize("per_command", [1, 2])
def test_the_herd_scenario_counts_the_connections_pickups_and_drain(per_command: int):
    """``--scenario herd`` (docs/scaling.md): 2 idle workers, as two commands or one with two
    processes, a trickle of 4 jobs, a drain of 200."""
    out = StringIO()
    call_command(
        "pgqueue_bench",
        "--scenario=herd",
        "--processes=2",
        f"--per-command={per_command}",
        "--pickup-samples=4",
        "--rate=10",
        "--jobs=200",
        "--json",
        "--no-progress",
        stdout=out,
    )
    data = json.loads(out.getvalue().splitlines()[-1])
    figures = data.get("figures", data)
    # A worker's connection per process; a listener's per process, or the relay's for both.
    assert figures["connections"] == (4 if per_command == 1 else 3)
    # claims_per_job too where the server loads pg_stat_statements (not the test server)
    assert figures.get("claims_per_job", 1) >= 1
    assert figures["pickup_ms_p50"] > 0
    assert 1 <= figures["workers_that_ran_jobs"] <= 2
    assert figures["drain_per_s"] > 0
