"""tests.settings for a worker whose traces and logs a test reads back (tests/test_tracing.py,
tests/test_logs_context.py): with ``PGQUEUE_TEST_SPANS`` set, OpenTelemetry's SDK records every
span into that file, one JSON object a line; the logs are JSON lines (python-json-logger), as
docs/tracing.md shows; the worker adds the job context filter to their handler itself."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

if os.environ.get("PGQUEUE_TEST_SPANS"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(
                out=open(os.environ["PGQUEUE_TEST_SPANS"], "a"),  # noqa: SIM115
                formatter=lambda span: span.to_json(indent=None) + "\n",
            )
        )
    )
    trace.set_tracer_provider(_provider)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "{levelname}{name}{message}",
            "style": "{",
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
        }
    },
    # run_jobs gives the django_pgqueue logger a plain handler unless LOGGING names one.
    "loggers": {"django_pgqueue": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
