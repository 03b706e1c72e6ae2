"""A busy key's backlog (a concurrency key's, or a rate key's) beyond a few rows leaves the
ready ring for a partition of its own (``sql.held.ADD_HELD``): claims stop stepping over the
rows of a busy key, and the ring's slots can be truncated while they wait. The workers' upkeep
holds the rows of keys with more than that; going back puts every held row into the ring
again."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import held


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0008_ready_parked")]

    operations = [migrations.RunSQL(held.ADD_HELD, held.REMOVE_HELD)]
