"""The connection that listens for a worker, when another process's (issue 35's herd).

PostgreSQL 15 signals every listening connection of a database at each ``NOTIFY``, whatever
channels it listens on: with 40 worker processes listening, each job's notification woke 40
backends. ``run_jobs --processes P`` now listens once for its P processes (the relay,
``worker.relay``), and each of its workers' rows names the relay's tag in ``listener``: the rota
reads a worker as listening while the connection with that tag is open (S12). NULL for a
worker that listens itself, as every worker did before.

A new nullable column, no default: a catalog change under a short lock, no row rewritten.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0027_listened")]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="listener",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="The tag of the connection that listens for it when another "
                "process's (the relay of its run_jobs --processes); empty: its own.",
                max_length=20,
                null=True,
            ),
        ),
    ]
