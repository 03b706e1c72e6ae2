"""``run_jobs --probe-port``: real workers scraped over HTTP as they work (docs/monitoring.md)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from django_pgqueue.models import Job
from tests.testapp import jobs
from tests.utils import ROOT, run_worker, start_worker, stop, wait_until, worker_env
from tests.utils import output as worker_output

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:PORT/PATH; (0, error) while nothing answers."""
    return get_url(f"http://127.0.0.1:{port}{path}")


def get_url(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


FINISHED = "pgqueue_jobs_finished_total"


def scrape(port: int) -> dict:
    status, body = get(port, "/metrics")
    assert status == 200, body
    return samples(body)


def test_two_processes_serve_one_port_with_the_counts_of_what_ran():
    add = "tests.testapp.jobs.add"
    fails = "tests.testapp.jobs.always_fails"
    jobs.add.enqueue_many([(i, i) for i in range(20)])
    for _ in range(3):
        jobs.always_fails.using(max_attempts=1).enqueue()
    port = free_port()
    proc = start_worker("--processes", "2", "--threads", "2", "--probe-port", str(port))
    try:

        def all_counted() -> dict | None:
            if get(port, "/healthz")[0] != 200:
                return None
            m = scrape(port)
            done = value(m, FINISHED, queue="default", job=add, outcome="completed")
            dead = value(m, FINISHED, queue="default", job=fails, outcome="dead")
            return m if (done, dead) == (20, 3) else None

        found = wait_until(all_counted, timeout=60)
        assert value(found, "pgqueue_job_duration_seconds_count", queue="default", job=add) == 20
        assert value(found, "pgqueue_job_duration_seconds_count", queue="default", job=fails) == 3
        assert value(found, "pgqueue_job_pickup_delay_seconds_count", queue="default") == 23
        finished = {
            labels: v
            for (name, labels), v in found.items()
            if name == "pgqueue_jobs_finished_total"
        }
        assert sum(finished.values()) == 23
        assert value(found, "pgqueue_worker_capacity") == 4  # 2 processes x 2 threads
        # 2 processes x PGQUEUE_ASYNC_CONCURRENCY (1000) event-loop slots, none in use
        assert value(found, "pgqueue_worker_async_capacity") == 2000
        assert value(found, "pgqueue_worker_async_busy") == 0
        assert value(found, "pgqueue_claims_total", result="jobs") >= 1
        wait_until(lambda: get(port, "/readyz") == (200, "ok\n"), timeout=30)
        assert value(scrape(port), "pgqueue_worker_ready") == 1
        assert get(port, "/nope")[0] == 404
    finally:
        log = stop(proc)
    assert Job.objects.filter(status="completed").count() == 20
    assert "probe port on http://127.0.0.1:" in log


def test_readyz_goes_503_at_sigterm_while_a_running_job_still_finishes(tmp_path: Path):
    marker, release = tmp_path / "marker", tmp_path / "release"
    job = jobs.ignores_cancel_until.enqueue(str(marker), str(release))
    port = free_port()
    proc = start_worker("--probe-port", str(port), "--shutdown-timeout", "120")
    try:
        wait_until(marker.exists, timeout=60)
        wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=60)
        proc.send_signal(signal.SIGTERM)  # the supervisor only: it tells its worker

        def not_ready() -> tuple[int, str] | None:
            answer = get(port, "/readyz")
            return answer if answer[0] == 503 else None

        _, body = wait_until(not_ready, timeout=30)
        assert "shutting down" in body
        assert get(port, "/healthz")[0] == 200  # stopping is not stuck
        assert proc.poll() is None, worker_output(proc)  # the job still runs
        release.write_text("go")
        proc.wait(timeout=60)
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    job.refresh_from_db()
    assert job.status == "completed", log
    assert marker.read_text() == "started\nfinished\n"


def test_without_a_probe_port_nothing_imports_prometheus_client():
    """The worker's run and its supervisor's code never import it when no port is asked for."""
    jobs.add.enqueue(1, 2)
    code = (
        "import sys, django\n"
        "django.setup()\n"
        "from django_pgqueue.worker import Supervisor, Worker\n"
        "import django_pgqueue.views, django_pgqueue.urls\n"
        "assert Worker(burst=True).run() == 0\n"
        "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=worker_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert Job.objects.get().status == "completed"


def test_a_probe_port_in_use_is_logged_and_the_jobs_still_run():
    jobs.add.enqueue(1, 2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_worker("--probe-port", str(port))
    assert done.returncode == 0, done.stderr
    assert "cannot serve the probe port" in done.stderr
    assert Job.objects.get().status == "completed"


@pytest.mark.slow
def test_a_real_prometheus_scrapes_the_probe_port_and_evaluates_the_alerting_rules(
    tmp_path, promtool_binary
):
    """Debian's prometheus binary scrapes a working run_jobs every second; its API answers
    the queries the docs' dashboard and rules make."""
    binary = str(Path(promtool_binary).with_name("prometheus"))
    jobs.add.enqueue_many([(i, i) for i in range(10)])
    port, web = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{ROOT / 'docs' / 'monitoring' / 'alerts.yml'}]\n"
        "scrape_configs:\n"
        f"  - job_name: pgqueue-workers\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc = start_worker("--probe-port", str(port))
    try:

        def query(expr: str) -> list:
            url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            status, body = get_url(url)
            return json.loads(body)["data"]["result"] if status == 200 else []

        finished = 'sum(pgqueue_jobs_finished_total{outcome="completed"})'
        wait_until(lambda: [r for r in query(finished) if r["value"][1] == "10"], timeout=60)
        assert query("sum(pgqueue_worker_ready)")[0]["value"][1] == "1"
        status, body = get_url(f"http://127.0.0.1:{web}/api/v1/rules")
        assert status == 200, body
        groups = json.loads(body)["data"]["groups"]
        assert [g["name"] for g in groups] == ["django_pgqueue"]
        assert all(rule["health"] != "err" for g in groups for rule in g["rules"]), groups
    finally:
        stop(proc)
        server.terminate()
        server.wait(timeout=30)
        log.close()
