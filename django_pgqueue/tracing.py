"""OpenTelemetry traces: a span for each enqueue and for each run of a job (docs/tracing.md).

Nothing here imports OpenTelemetry. It is used only when the process has imported
``opentelemetry.trace`` already (configuring a tracer provider does, and so does any
instrumentation): :func:`active` is one dictionary look-up, and without it enqueue and the
worker do exactly what they did before (no span, ``trace_context`` NULL).

* ``enqueue`` (and ``enqueue_many``, one span for the batch) records a ``PRODUCER`` span,
  ``enqueue <job name>``, a child of whatever span is current (a request's), and stores that
  span's W3C context (``traceparent``, ``tracestate``) on the job: ``pgqueue_job.trace_context``
  (S11 in docs/storage.md). The W3C propagator is used whatever the global one is, so the
  column always holds what the CHECK expects.
* Each run (each attempt) records a ``CONSUMER`` span, ``run <job name>``, with a **link** to
  the enqueue span, not as its child: a run may come minutes or days after the request that
  enqueued it, an attempt per retry, ten thousand runs from one ``enqueue_many``. As children
  they would stretch the request's trace over all of that (and be dropped by a trace-level
  sampler that decided long before); linked, each run is a trace of its own, which the worker's
  sampler decides, and the link leads from one to the other (OpenTelemetry's messaging
  conventions; Sidekiq's instrumentation does the same by default). The run span is current
  while the job runs: spans the job makes (its HTTP calls, its queries) are its children.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django_pgqueue.context import bound
from django_pgqueue.states import Attempt

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from django_pgqueue.models import Job

#: The instrumentation scope's name (what a backend shows as the library).
SCOPE = "django_pgqueue"
#: The value of ``messaging.system`` (OpenTelemetry's messaging conventions).
SYSTEM = "django_pgqueue"
#: The outcomes that are failures: the span's status is ERROR.
_FAILED = frozenset({Attempt.RETRIED, Attempt.DEAD})
#: The tracer provider used instead of OpenTelemetry's global one (:func:`use_tracer_provider`).
_provider: TracerProvider | None = None


def active() -> bool:
    """Whether OpenTelemetry's API is loaded in this process (nothing is traced otherwise)."""
    return "opentelemetry.trace" in sys.modules


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Record the queue's spans with ``provider`` instead of the global tracer provider (None:
    the global one again), as OpenTelemetry's instrumentations take ``tracer_provider=``; a
    test's in-memory exporter, without setting the process's global provider for good."""
    global _provider
    _provider = provider


def _tracer() -> Tracer:
    from opentelemetry import trace

    from django_pgqueue import __version__

    return trace.get_tracer(SCOPE, __version__, tracer_provider=_provider)


@contextmanager
def enqueueing(name: str, queue: str, count: int = 1) -> Iterator[Span]:
    """The span of one enqueue (``count`` > 1: an ``enqueue_many``), current inside."""
    from opentelemetry import trace

    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "pgqueue.job.name": name,
        "pgqueue.job.queue": queue,
    }
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with _tracer().start_as_current_span(
        f"enqueue {name}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield span


def carrier_json(span: Span) -> str | None:
    """``span``'s W3C trace context as the JSON ``trace_context`` stores; None when the span is
    not part of a trace (no tracer provider configured, no parent)."""
    if not span.get_span_context().is_valid:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from django_pgqueue.sql import dumps

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return dumps(carrier) if "traceparent" in carrier else None


def enqueued(span: Span, job_ids: Sequence[int], *, deduplicated: bool = False) -> None:
    """Name what the enqueue wrote on its span: the job's id (one job), or how many."""
    if len(job_ids) == 1:
        span.set_attribute("pgqueue.job.id", job_ids[0])
        span.set_attribute("messaging.message.id", str(job_ids[0]))
    if deduplicated:
        span.set_attribute("pgqueue.job.deduplicated", True)


@contextmanager
def running(job: Job, worker_id: str) -> Iterator[Span]:
    """The span of one attempt of ``job``, current inside, linked to its enqueue's span."""
    from opentelemetry import trace

    links = []
    enqueue_context = _enqueue_span_context(job.trace_context)
    if enqueue_context is not None:
        links.append(trace.Link(enqueue_context))
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.pk),
        "pgqueue.job.id": job.pk,
        "pgqueue.job.name": job.name,
        "pgqueue.job.queue": job.queue,
        "pgqueue.job.attempt": job.attempts,
        "pgqueue.job.max_attempts": job.max_attempts,
        "pgqueue.worker.id": worker_id,
    }
    with _tracer().start_as_current_span(
        f"run {job.name}",
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
        record_exception=False,  # perform() catches everything; ran() records it
        set_status_on_exception=False,
    ) as span:
        yield span


def ran(span: Span, outcome: str, exception: BaseException | None) -> None:
    """Record the attempt's outcome (an ``Attempt``) on its span: ``pgqueue.job.outcome``, the
    exception (an event), and an ERROR status when the attempt failed (retried or dead)."""
    from opentelemetry.trace import Status, StatusCode

    name = outcome
    current = bound()
    if current is not None and current.cancel_requested:
        name = Attempt.CANCELLED  # what the executor makes of it (performer.cancelled)
    span.set_attribute("pgqueue.job.outcome", str(name))
    if exception is not None:
        span.record_exception(exception)
    if name in _FAILED:
        reason = type(exception).__name__ if exception is not None else None
        span.set_status(Status(StatusCode.ERROR, reason))


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids, in hex as W3C writes them (None: no span)."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _enqueue_span_context(value: Any) -> Any:
    """The span context stored in ``trace_context`` (a dict), or None if there is none valid."""
    if not isinstance(value, dict) or not isinstance(value.get("traceparent"), str):
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {k: v for k, v in value.items() if isinstance(v, str)}
    context = TraceContextTextMapPropagator().extract(carrier)
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None
