"""``scripts/drain_anatomy.py`` with a small drain: its figures add up, its queue is gone.

No timing is asserted: the figures depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from django_pgqueue.contrib.bench.results import QUEUE_PREFIX
from django_pgqueue.models import Job
from tests.utils import worker_env

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "drain_anatomy.py"


def test_a_small_drain_taken_apart():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "300", "--processes", "2", "--json"],
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["jobs"] == 300 and result["processes"] == 2
    # Every job was claimed once: the claims' sizes add up to the jobs.
    assert 1 <= result["claims"] <= 300 and result["claimed_jobs"] == 300
    assert 1 <= result["claim_size_max"] <= 300
    assert result["worker_loop_cpu_us_per_job"] > 0
    assert result["worker_other_threads_cpu_us_per_job"] >= 0
    assert result["postgres_cpu_us_per_job"] is not None  # the server runs on this machine
    assert sum(result["backend_activity"].values()) == pytest.approx(1, abs=0.01)
    assert not Job.objects.filter(queue__startswith=QUEUE_PREFIX).exists()


def test_bad_numbers_are_refused_before_anything_runs():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "0"],
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--jobs and --processes must be at least 1" in done.stderr
