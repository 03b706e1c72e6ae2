"""Traces (issue 32): ``pgqueue_job.trace_context``, the W3C trace context of the span that
enqueued the job (``{"traceparent": "00-<trace id>-<span id>-<flags>"}``, and ``"tracestate"``
when there is one), which the run's span links to (docs/tracing.md). NULL when the job was
enqueued without OpenTelemetry, or outside any trace. S11 in docs/storage.md: NULL or an
object whose ``traceparent`` has the W3C form; the CHECK says so.

Nullable without a default, so that a worker of an older version (which does not name it)
still inserts jobs, and adding it rewrites no row. The CHECK is added ``NOT VALID`` with the
column (no scan of the table under the ALTER's exclusive lock, which would stop every enqueue
and claim for as long as it reads a big table), then validated in a transaction of its own
(``atomic = False``), whose lock lets reads and writes go on: every row is NULL then anyway.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = r"""
ALTER TABLE pgqueue_job ADD COLUMN trace_context jsonb,
    ADD CONSTRAINT pgqueue_job_trace_context_check CHECK (
        trace_context IS NULL
        OR (jsonb_typeof(trace_context) = 'object'
            AND (trace_context ->> 'traceparent') ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$')
    ) NOT VALID;
"""
VALIDATE = "ALTER TABLE pgqueue_job VALIDATE CONSTRAINT pgqueue_job_trace_context_check;"
BACKWARD = "ALTER TABLE pgqueue_job DROP COLUMN trace_context;"


class Migration(migrations.Migration):
    # Each statement in a transaction of its own: the validation does not hold the ALTER's lock.
    atomic = False

    dependencies = [("django_pgqueue", "0018_claim_token")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="trace_context",
                    field=models.JSONField(
                        null=True,
                        blank=True,
                        editable=False,
                        help_text="W3C trace context of the span that enqueued it "
                        "(traceparent, tracestate); NULL outside a trace.",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(VALIDATE, migrations.RunSQL.noop),
    ]
