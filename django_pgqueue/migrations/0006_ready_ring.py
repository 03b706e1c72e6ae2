"""The ready ring (``django_pgqueue.sql.ready``): runnable jobs apart from the job rows, so the
claim never walks the job table's dead index entries. Pending jobs of an existing table get
their ready rows here; nothing else of the job table changes."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import ready


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0005_limits")]

    operations = [migrations.RunSQL(ready.CREATE, ready.DROP)]
