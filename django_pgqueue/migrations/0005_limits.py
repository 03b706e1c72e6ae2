"""Limits above one and rate limits: places per concurrency key, rate keys, rate windows."""

from __future__ import annotations

import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models

import django_pgqueue.fields


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0004_queue"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateWindow",
            fields=[
                ("id", models.CharField(max_length=300, primary_key=True, serialize=False)),
                ("starts", models.PositiveIntegerField()),
                ("period", models.FloatField(help_text="Seconds.")),
                ("recent", django_pgqueue.fields.TimestampArrayField(default=list)),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
            ],
            options={
                "db_table": "pgqueue_rate_window",
            },
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="pgqueue_job_one_running_per_key",
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_limit",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Most running jobs with this concurrency key (NULL: 1).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_slot",
            field=models.PositiveSmallIntegerField(
                db_default=0,
                default=0,
                help_text="Which of its key's concurrency_limit places it holds.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="rate_key",
            field=models.CharField(
                blank=True, help_text="The rate limit it counts against.", max_length=255, null=True
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("status", "pending"),
                    models.Q(
                        ("rate_key__isnull", False),
                        ("concurrency_limit__isnull", False),
                        _connector="OR",
                    ),
                ),
                fields=["id"],
                name="pgqueue_job_limited",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                models.F("concurrency_key"),
                models.F("concurrency_slot"),
                condition=models.Q(("concurrency_key__isnull", False), ("status", "running")),
                name="pgqueue_job_running_per_key_slot",
            ),
        ),
    ]
