"""``manage.py pgqueue_bench`` with tiny numbers: the output's shape and the clean-up.

No timing is asserted: the figures depend on the machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

import django_pgqueue.contrib.bench.run as bench_run
from django_pgqueue import registry
from django_pgqueue.contrib.bench.measurement import percentile
from django_pgqueue.contrib.bench.phases import DEFAULT_PHASES, PHASES, Phase
from django_pgqueue.contrib.bench.phases import limits as limits_phase
from django_pgqueue.contrib.bench.results import (
    QUEUE_PREFIX,
    RESULT_KEYS,
    BenchError,
    BenchOptions,
)
from django_pgqueue.contrib.bench.run import Bench
from django_pgqueue.contrib.bench.workload import NOOP, RECORD_START
from django_pgqueue.models import Job, Queue, RateWindow
from django_pgqueue.models import Worker as WorkerRow
from django_pgqueue.states import JobStatus
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

TINY = [
    "--jobs=200",
    "--single-samples=20",
    "--pickup-samples=5",
    "--history-rows=2000",
    "--claim-jobs=100",
    "--claim-repeats=1",
]


def run_bench(*args: str) -> tuple[list[str], str]:
    out, err = StringIO(), StringIO()
    call_command("pgqueue_bench", *args, stdout=out, stderr=err)
    return out.getvalue().splitlines(), err.getvalue()


def bench_rows() -> int:
    return Job.objects.filter(queue__startswith=QUEUE_PREFIX).count()


def test_json_last_line_has_every_figure_and_the_scratch_queue_is_gone():
    mine = jobs.noop.enqueue()  # a real queue's job: the bench must not touch it
    lines, err = run_bench(*TINY, "--json")

    data = json.loads(lines[-1])
    assert list(data) == list(RESULT_KEYS)
    for key in RESULT_KEYS[:-2]:
        assert isinstance(data[key], float), key
        assert data[key] > 0, key
    machine = data["machine"]
    assert {"cpu_count", "postgresql", "python", "django"} <= set(machine)
    assert data["settings"]["jobs"] == 200
    assert data["settings"]["processes"] == 2
    assert data["settings"]["history_rows"] == 2000
    assert data["settings"]["queue"].startswith(QUEUE_PREFIX)
    # The human-readable table comes first, and the phases were reported on stderr.
    assert any(line.startswith("drain_per_s") for line in lines[:-1])
    assert "drain with 2 processes" in err

    assert bench_rows() == 0
    assert not WorkerRow.objects.filter(worker_id__startswith=QUEUE_PREFIX).exists()
    mine.refresh_from_db()
    assert mine.status == "pending"
    assert Job.objects.count() == 1


def test_phases_left_out_are_null():
    lines, _ = run_bench("--jobs=50", "--phases=enqueue,single", "--single-samples=5", "--json")
    data = json.loads(lines[-1])
    assert data["enqueue_bulk_per_s"] > 0
    assert data["enqueue_single_ms_p50"] > 0
    assert data["drain_per_s"] is None
    assert data["pickup_ms_p50"] is None
    assert data["history_claim_ratio"] is None
    assert data["limited_claim_window_ratio"] is None
    assert bench_rows() == 0


def test_without_json_prints_the_table_only():
    lines, _ = run_bench("--jobs=20", "--phases=enqueue", "--no-progress")
    assert lines[-1].startswith("settings: ")
    assert not any(line.startswith("{") for line in lines)


def test_memory_mode_reports_rss_and_cleans_up():
    lines, _ = run_bench("--memory", "--memory-jobs=300", "--json")
    data = json.loads(lines[-1])
    assert data["jobs"] == 300
    assert data["rss_kib_first"] > 0
    assert data["rss_kib_end"] > 0
    assert data["first_jobs"] >= 300
    assert bench_rows() == 0


def test_warns_about_workers_serving_every_queue():
    WorkerRow.objects.create(worker_id="elsewhere:1", hostname="elsewhere", pid=1, queues=[])
    WorkerRow.objects.create(worker_id="emails:1", hostname="elsewhere", pid=2, queues=["emails"])
    lines, err = run_bench("--jobs=10", "--phases=enqueue")
    assert "workers serving every queue are running (elsewhere:1)" in err
    assert any(line.startswith("warning: ") and "elsewhere:1" in line for line in lines)
    assert "emails:1" not in err


def test_bad_options_are_refused():
    with pytest.raises(CommandError, match="--jobs: must be between 1 and 10,000,000, got 0"):
        run_bench("--jobs=0")
    with pytest.raises(CommandError, match="--phases: unknown phases nope"):
        run_bench("--phases=drain,nope")


def test_cleanup_after_a_failure(monkeypatch):
    def boom(run):
        raise BenchError("interrupted")

    monkeypatch.setitem(PHASES, "single", Phase("single", boom))
    with pytest.raises(BenchError):
        run_bench("--jobs=30", "--phases=enqueue,drain,single")
    assert bench_rows() == 0


def test_limits_measures_both_windows_and_leaves_no_queue_settings():
    Queue.objects.create(name="emails", rate_limit="5/s")  # a real queue's: left alone
    RateWindow.objects.create(id="queue:emails", starts=5, period=1.0)
    lines, err = run_bench("--jobs=200", "--phases=limits", "--json")

    data = json.loads(lines[-1])
    for key in (
        "limited_claim_ms_p50_10_per_s",
        "limited_claim_ms_p50_100000_per_d",
        "limited_claim_window_ratio",
    ):
        assert isinstance(data[key], float), key
        assert data[key] > 0, key
    assert data["drain_per_s"] is None
    # The large window was half full and let every claim (5 to warm up) take its 10 jobs.
    assert re.search(
        r"^limited_claim_window_100000_per_d: 50,200 starts counted in 9[56] entries$",
        "\n".join(lines),
        re.MULTILINE,
    )
    assert "limited_claim_calls: 15 and 15, 10 jobs each, backlog 200" in lines
    assert "100000/d: limited claim of 10 x 15" in err

    assert bench_rows() == 0
    assert list(Queue.objects.values_list("name", flat=True)) == ["emails"]
    assert list(RateWindow.objects.values_list("id", flat=True)) == ["queue:emails"]


def test_limits_cleans_up_after_a_failure(monkeypatch):
    def boom(*args):
        raise BenchError("interrupted")

    monkeypatch.setattr(limits_phase, "timed_claim", boom)
    with pytest.raises(BenchError):
        run_bench("--jobs=100", "--phases=limits")
    assert bench_rows() == 0
    assert not Queue.objects.exists()
    assert not RateWindow.objects.exists()


def test_percentile():
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 99) == 99.0


def test_every_phase_is_in_the_registry_and_drain_brings_its_jobs():
    assert list(PHASES) == [
        "enqueue",
        "drain",
        "single",
        "pickup",
        "history",
        "limits",
        "workflows",
    ]
    assert list(DEFAULT_PHASES) == list(PHASES)[:-1]  # workflows runs when asked for
    run = Bench(BenchOptions(phases=["drain"]))
    assert run.to_run() == ["enqueue", "drain"]
    with pytest.raises(ValueError, match="Unknown phases: nope"):
        Bench(BenchOptions(phases=["nope"]))


def test_a_new_phase_runs_in_its_place_and_leaves_no_rows(monkeypatch):
    seen = []

    def count_pending(run):
        seen.append(Job.objects.filter(queue=run.queue, status=JobStatus.PENDING).count())

    phases = dict(PHASES)
    phases["count"] = Phase("count", count_pending, needs=("enqueue",))
    monkeypatch.setattr(bench_run, "PHASES", phases)
    result = Bench(BenchOptions(jobs=7, phases=["count"])).run()
    assert seen == [7]
    assert result.enqueue_bulk_per_s is not None
    assert bench_rows() == 0


def test_the_bench_jobs_are_registered_when_it_runs_not_when_it_is_imported():
    code = (
        "import django; django.setup()\n"
        "from django_pgqueue import registry\n"
        "from django_pgqueue.contrib.bench.chaos.run import CHAOS_JOB\n"
        "from django_pgqueue.contrib.bench.run import Bench\n"
        "from django_pgqueue.contrib.bench.scenarios.load import SLEEP\n"
        "from django_pgqueue.contrib.bench.workload import NOOP, RECORD_START\n"
        "from django.core.management import load_command_class\n"
        "for name in ('pgqueue_bench', 'pgqueue_chaos'):\n"
        "    load_command_class('django_pgqueue.contrib.bench', name)\n"
        "print(sorted({NOOP, RECORD_START, SLEEP, CHAOS_JOB} & set(registry.names())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.strip() == "[]"
    run_bench("--jobs=5", "--phases=enqueue", "--no-progress")
    assert {NOOP, RECORD_START} <= set(registry.names())


def test_the_workflows_phase_measures_a_batch_and_a_chain_and_leaves_no_rows():
    from django_pgqueue.models import Batch

    lines, _ = run_bench("--jobs=20", "--phases=workflows", "--rounds=2", "--no-progress", "--json")
    details = dict(line.split(": ", 1) for line in lines[:-1] if line.startswith("workflow_"))
    assert float(details["workflow_batch_drain_ratio"]) > 0
    ratios = json.loads(details["workflow_batch_drain_ratios"])  # a pair a round
    assert len(ratios) == 2 and all(r > 0 for r in ratios)
    assert int(details["workflow_chain_steps"]) == 20
    assert float(details["workflow_chain_pickup_ms_p50"]) > 0
    assert bench_rows() == 0 and not Batch.objects.exists()
