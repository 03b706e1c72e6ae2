"""OpenTelemetry traces (docs/tracing.md): the enqueue's span, its context on the job, the run's
span linked to it; in this process (the SDK's in-memory exporter), across a real worker, and
nothing of OpenTelemetry imported by a process that does not have it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from django_pgqueue import tracing
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp import jobs
from tests.utils import ROOT, run_worker, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter, provider.get_tracer("tests")
    finally:
        tracing.use_tracer_provider(None)


def traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def named(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_enqueue_in_a_span_records_its_own_and_stores_its_context(spans):
    exporter, tracer = spans
    with tracer.start_as_current_span("request") as request:
        job = jobs.add.enqueue(1, 2)
    (enqueue,) = named(exporter, "enqueue tests.testapp.jobs.add")
    assert enqueue.kind == trace.SpanKind.PRODUCER
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert enqueue.attributes["pgqueue.job.id"] == job.pk
    assert enqueue.attributes["pgqueue.job.queue"] == "default"
    stored = Job.objects.get(pk=job.pk).trace_context
    assert stored == {"traceparent": traceparent(enqueue)}
    assert job.trace_context == stored


def test_the_run_links_to_the_enqueue_span_with_the_jobs_attributes(spans):
    exporter, tracer = spans
    with tracer.start_as_current_span("request"):
        job = jobs.traced.enqueue()
    (ran,) = run_jobs()
    (enqueue,) = named(exporter, "enqueue tests.testapp.jobs.traced")
    (run,) = named(exporter, "run tests.testapp.jobs.traced")
    assert run.kind == trace.SpanKind.CONSUMER
    # A link, not a child: its own trace, which leads back to the enqueue.
    assert run.parent is None
    assert run.context.trace_id != enqueue.context.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (enqueue.context.trace_id, enqueue.context.span_id)
    ]
    assert {k: run.attributes[k] for k in run.attributes if k.startswith("pgqueue.job.")} == {
        "pgqueue.job.id": job.pk,
        "pgqueue.job.name": "tests.testapp.jobs.traced",
        "pgqueue.job.queue": "default",
        "pgqueue.job.attempt": 1,
        "pgqueue.job.max_attempts": 2,
        "pgqueue.job.outcome": "completed",
    }
    assert run.status.status_code == trace.StatusCode.UNSET
    # The run's span is current while the job runs: the job's own spans are its children.
    assert ran.result == f"{run.context.trace_id:032x}"


def test_a_failing_run_records_the_exception_each_attempt_linked_to_one_enqueue(spans):
    exporter, tracer = spans
    with tracer.start_as_current_span("request"):
        jobs.traced.enqueue(fail=True)
    assert [r.outcome for r in run_jobs()] == ["retried", "dead"]
    (enqueue,) = named(exporter, "enqueue tests.testapp.jobs.traced")
    runs = named(exporter, "run tests.testapp.jobs.traced")
    assert [r.attributes["pgqueue.job.attempt"] for r in runs] == [1, 2]
    assert [r.attributes["pgqueue.job.outcome"] for r in runs] == ["retried", "dead"]
    for run in runs:
        assert run.status.status_code == trace.StatusCode.ERROR
        (event,) = [e for e in run.events if e.name == "exception"]
        assert event.attributes["exception.type"] == "ValueError"
        assert "failed on purpose" in event.attributes["exception.message"]
        assert run.links[0].context.span_id == enqueue.context.span_id


def test_enqueue_many_is_one_span_whose_context_every_job_keeps(spans):
    exporter, tracer = spans
    with tracer.start_as_current_span("request"):
        few = jobs.add.enqueue_many([(i, i) for i in range(3)])
        many = jobs.add.enqueue_many([(i, i) for i in range(150)])  # COPY
        limited = jobs.add.using(concurrency_key="k", concurrency_limit=2).enqueue_many(
            [(1, 2), (3, 4)]  # COPY with the limits' columns
        )
    first, second, third = named(exporter, "enqueue tests.testapp.jobs.add")
    assert first.attributes["messaging.batch.message_count"] == 3
    assert second.attributes["messaging.batch.message_count"] == 150
    for ids, span in ((few, first), (many, second), (limited, third)):
        stored = {tuple(sorted(j.trace_context.items())) for j in Job.objects.filter(pk__in=ids)}
        assert stored == {(("traceparent", traceparent(span)),)}


def test_without_a_tracer_provider_nothing_is_stored():
    # OpenTelemetry's API is loaded (this module imports it), but no provider is configured:
    # the spans are not recording, the jobs have no context, and they run as ever.
    job = jobs.add.enqueue(2, 3)
    ids = jobs.add.enqueue_many([(1, 1)] * 120)
    assert Job.objects.get(pk=job.pk).trace_context is None
    assert not Job.objects.filter(pk__in=ids, trace_context__isnull=False).exists()
    assert {r.outcome for r in run_jobs()} == {"completed"}


def test_the_database_refuses_a_context_that_is_not_a_traceparent():
    from django.db import IntegrityError

    job = jobs.noop.enqueue()
    with pytest.raises(IntegrityError, match="pgqueue_job_trace_context_check"):
        Job.objects.filter(pk=job.pk).update(trace_context={"traceparent": "nonsense"})


@pytest.mark.slow
def test_a_real_worker_links_its_runs_to_the_enqueue_and_exports_them(spans, tmp_path):
    exporter, tracer = spans
    path = tmp_path / "spans.jsonl"
    with tracer.start_as_current_span("request"):
        ok = jobs.traced.enqueue()
        bad = jobs.traced.using(max_attempts=1).enqueue(fail=True)
    (enqueue_ok, enqueue_bad) = named(exporter, "enqueue tests.testapp.jobs.traced")
    result = run_worker(
        env=worker_env(
            DJANGO_SETTINGS_MODULE="tests.observability_settings", PGQUEUE_TEST_SPANS=str(path)
        )
    )
    assert result.returncode == 0, result.stdout + result.stderr
    exported = [json.loads(line) for line in path.read_text().splitlines()]
    runs = {
        s["attributes"]["pgqueue.job.id"]: s
        for s in exported
        if s["name"] == "run tests.testapp.jobs.traced"
    }
    assert set(runs) == {ok.pk, bad.pk}
    for job, enqueue, outcome in ((ok, enqueue_ok, "completed"), (bad, enqueue_bad, "dead")):
        run = runs[job.pk]
        assert run["kind"] == "SpanKind.CONSUMER"
        assert run["parent_id"] is None
        (link,) = run["links"]
        assert link["context"]["trace_id"] == f"0x{enqueue.context.trace_id:032x}"
        assert link["context"]["span_id"] == f"0x{enqueue.context.span_id:016x}"
        assert run["attributes"]["pgqueue.job.outcome"] == outcome
        assert run["attributes"]["pgqueue.job.attempt"] == 1
        assert run["attributes"]["pgqueue.job.queue"] == "default"
        assert run["attributes"]["pgqueue.worker.id"]
    assert runs[ok.pk]["status"]["status_code"] == "UNSET"
    assert runs[bad.pk]["status"]["status_code"] == "ERROR"
    (event,) = runs[bad.pk]["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    # The job's own span is a child of its run's.
    inside = [s for s in exported if s["name"] == "inside the job"]
    assert {s["parent_id"] for s in inside} == {r["context"]["span_id"] for r in runs.values()}
    # The job's log line names its run's trace and span.
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    (spoke,) = [r for r in logged if r["message"] == "the job speaks" and r["job_id"] == ok.pk]
    run_context = runs[ok.pk]["context"]
    assert "0x" + spoke["trace_id"] == run_context["trace_id"]
    assert "0x" + spoke["span_id"] == run_context["span_id"]


#: Runs in a subprocess where importing OpenTelemetry fails (as if it were not installed):
#: enqueues, runs the jobs with a real worker (``run_jobs --burst``) and with the test helper,
#: and reports what it saw.
WITHOUT_OTEL = textwrap.dedent(
    """
    import json, sys

    attempts = []

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                attempts.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())

    import django
    django.setup()
    from django.core.management import call_command
    from django_pgqueue.models import Job
    from django_pgqueue.testing import run_jobs
    from tests.testapp import jobs

    one = jobs.add.enqueue(1, 2)
    many = jobs.add.enqueue_many([(i, i) for i in range(150)])
    call_command("run_jobs", "--burst")
    jobs.add.enqueue(3, 4)
    helper = [r.outcome for r in run_jobs()]
    rows = Job.objects.filter(pk__in=[one.pk, *many])
    print(json.dumps({
        "attempts": attempts,
        "loaded": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
        "statuses": sorted({j.status for j in rows}),
        "contexts": sorted({json.dumps(j.trace_context) for j in rows}),
        "helper": helper,
    }))
    """
)


@pytest.mark.slow
def test_without_opentelemetry_nothing_is_imported_and_jobs_run():
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL],
        env=worker_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {
        "attempts": [],
        "loaded": [],
        "statuses": ["completed"],
        "contexts": ["null"],
        "helper": ["completed"],
    }
