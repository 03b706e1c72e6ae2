"""Conditions of the admin's search that the ORM cannot spell."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import BooleanField, Q
from django.db.models.expressions import RawSQL

from django_pgqueue.sql.admin import KWARGS_HAS_VALUE


def kwargs_have_value(value: Any) -> Q:
    """Jobs with ``value`` as one of their keyword arguments."""
    return Q(RawSQL(KWARGS_HAS_VALUE, [json.dumps(value)], output_field=BooleanField()))
