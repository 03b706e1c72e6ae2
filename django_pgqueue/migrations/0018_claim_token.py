"""Fencing by claim (issue 35): ``pgqueue_job.claim_token``, a number from the sequence
``pgqueue_claim_token`` that each claim statement takes once and writes on every job it claims.
A worker's outcome, heartbeat and hand-back apply only with the token of its claim: a worker
cut off long enough for its job to be reclaimed, retried and claimed again (by itself, even)
cannot write its old claim's outcome over the new one. Not the attempt count: a retry by hand
resets it, a hand-back gives one back.

The column has no default and may be NULL (jobs never claimed since this migration), so adding
it rewrites no row; the code of the version before neither reads nor writes it.
"""

from __future__ import annotations

from django.db import migrations, models

FORWARD = """
CREATE SEQUENCE pgqueue_claim_token AS bigint;
ALTER TABLE pgqueue_job ADD COLUMN claim_token bigint;
"""
BACKWARD = """
ALTER TABLE pgqueue_job DROP COLUMN claim_token;
DROP SEQUENCE pgqueue_claim_token;
"""


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0017_job_interruptions")]

    operations = [
        migrations.RunSQL(
            FORWARD,
            BACKWARD,
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="claim_token",
                    field=models.BigIntegerField(
                        null=True,
                        blank=True,
                        editable=False,
                        help_text="The claim that last took it (never repeats): outcomes, "
                        "heartbeats and hand-backs apply only with it.",
                    ),
                ),
            ],
        )
    ]
