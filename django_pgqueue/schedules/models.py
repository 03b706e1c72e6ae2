"""What a ``pgqueue_schedule`` row holds besides its fields: where it comes from, and which
values a code declaration sets.

A schedule made by ``@job(cron=...)`` has ``source = "code"`` and keeps what the code declares
in ``code``, apart from the values in use: an admin edit changes the values, a later sync
changes only ``code``, so the admin can say "edited: differs from code" and offer "reset to
code". The model itself is :class:`django_pgqueue.models.Schedule`, with the app's other
models (it returns a ``Job``); its default time zone is ``django_pgqueue.fields.default_zone``
(migrations name it there).
"""

from __future__ import annotations

from django.db import models


class Source(models.TextChoices):
    CODE = "code", "Code"
    ADMIN = "admin", "Admin"


#: The values a code declaration sets; compared with the row's to tell an admin edit.
CODE_FIELDS = (
    "job",
    "cron",
    "every",
    "timezone",
    "args",
    "kwargs",
    "queue",
    "priority",
    "catch_up",
)
