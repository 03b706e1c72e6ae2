"""The job's context on every log record about it (django_pgqueue.logs): the worker's own lines
and the job's, as fields of a JSON formatter, from a real worker."""

from __future__ import annotations

import json
import logging

import pytest

from django_pgqueue.context import CurrentJob, bind
from django_pgqueue.logs import JobContext
from django_pgqueue.models import Job
from tests.testapp import jobs
from tests.utils import run_worker, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = ("job_id", "job_name", "queue", "attempt", "worker_id")


@pytest.mark.slow
def test_a_worker_with_a_json_formatter_writes_the_jobs_fields_on_every_line_about_it():
    ok = jobs.traced.enqueue()
    bad = jobs.traced.using(max_attempts=1).enqueue(fail=True)
    result = run_worker(
        "--worker-id",
        "json-worker",
        env=worker_env(DJANGO_SETTINGS_MODULE="tests.observability_settings"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout + result.stderr
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert lines, result.stdout + result.stderr
    for job, attempt_line in ((ok, "completed"), (bad, "now dead")):
        about = [line for line in lines if line.get("job_id") == job.pk]
        expected = {
            "job_id": job.pk,
            "job_name": "tests.testapp.jobs.traced",
            "queue": "default",
            "attempt": 1,
            "worker_id": "json-worker",
        }
        # The job's own line (its own logger, its own extra field) and the worker's line.
        (own,) = [line for line in about if line["message"] == "the job speaks"]
        assert {k: own[k] for k in FIELDS} == expected
        assert own["name"] == "tests.testapp.traced"
        assert own["note"] == "its own field"
        (worker,) = [line for line in about if attempt_line in line["message"]]
        assert {k: worker[k] for k in FIELDS} == expected
        assert worker["name"] == "django_pgqueue.worker"
    # Lines about no job have none of the fields.
    started = [line for line in lines if line["message"].startswith("Worker json-worker started")]
    assert started
    assert not any(k in started[0] for k in FIELDS)
    assert Job.objects.get(pk=bad.pk).status == "dead"


def test_the_filter_keeps_a_records_own_fields_and_leaves_other_threads_alone():
    job = jobs.noop.enqueue()
    job.attempts = 2
    record = logging.makeLogRecord({"msg": "x", "queue": "mine"})
    bare = logging.makeLogRecord({"msg": "y"})
    bind(CurrentJob(job, worker_id="w1"))
    try:
        assert JobContext().filter(record)
    finally:
        bind(None)
    assert JobContext().filter(bare)
    assert (record.job_id, record.job_name, record.queue, record.attempt, record.worker_id) == (
        job.pk,
        "tests.testapp.jobs.noop",
        "mine",
        2,
        "w1",
    )
    assert not hasattr(bare, "job_id")
