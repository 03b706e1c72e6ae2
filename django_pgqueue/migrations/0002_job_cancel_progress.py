"""Cancelling running jobs and their progress: ``cancel_requested_at`` and ``progress``."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="cancel_requested_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When a cancellation of the running job was asked for; it ends cancelled.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="progress",
            field=models.JSONField(
                blank=True, help_text="What the job last reported with set_progress().", null=True
            ),
        ),
    ]
