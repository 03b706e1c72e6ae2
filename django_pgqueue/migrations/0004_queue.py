"""Queues with runtime settings: paused, limits (``pgqueue_queue``)."""

from __future__ import annotations

import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0003_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                (
                    "paused",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="No worker starts a job of this queue.",
                    ),
                ),
                (
                    "concurrency_limit",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most jobs of this queue running at once, all workers.",
                        null=True,
                    ),
                ),
                (
                    "rate_limit",
                    models.CharField(
                        blank=True,
                        help_text='Most job starts per period, e.g. "10/s".',
                        max_length=32,
                        null=True,
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
            ],
            options={
                "db_table": "pgqueue_queue",
                "ordering": ["name"],
            },
        ),
    ]
