"""Rows of paused queues leave the ready ring for a partition of their own
(``sql.parked.ADD_PARKED``): claims stop stepping over a paused queue's backlog, and the ring's
slots can be truncated while it waits. Rows of queues paused at the time move there; going
back puts every parked row into the ring again."""

from __future__ import annotations

from django.db import migrations

from django_pgqueue.sql import parked


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0007_ready_limits")]

    operations = [migrations.RunSQL(parked.ADD_PARKED, parked.REMOVE_PARKED)]
