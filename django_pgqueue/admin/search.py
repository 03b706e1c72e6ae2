"""The job list's search box: ids, names, keys, error text and argument values."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils.text import smart_split, unescape_string_literal

from django_pgqueue import stats
from django_pgqueue.models import Job

_KWARGS_VALUE = (
    "(\"kwargs\" <> '{}'::jsonb AND "
    "jsonb_path_exists(\"kwargs\", '$.* ? (@ == $v)', jsonb_build_object('v', %s::jsonb)))"
)


def search_jobs(queryset: QuerySet[Job], search_term: str) -> QuerySet[Job]:
    """Every term must match one of: the id, the name, a key, the error text or an argument.

    Built to cost one sequential scan without trigram indexes: names are matched against the
    known job names (case-insensitively) or as a case-sensitive substring, and arguments by
    exact value (``42`` finds ``add(42, 1)`` and ``send_welcome(user_id=42)``).
    """
    names: list[str] | None = None
    for bit in smart_split(search_term):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1] and len(bit) > 1:
            bit = unescape_string_literal(bit)
        term = bit.strip()
        if not term:
            continue
        if names is None:
            names = stats.job_names(queryset.db)
        queryset = queryset.filter(search_match(term, names))
    return queryset


def search_match(term: str, known_names: Iterable[str]) -> Q:
    lowered = term.lower()
    match = (
        Q(name__in=[n for n in known_names if lowered in n.lower()])
        | Q(name__contains=term)
        | Q(unique_key__icontains=term)
        | Q(concurrency_key__icontains=term)
        | (~Q(last_error="") & Q(last_error__icontains=term))
    )
    for value in _json_values(term):
        match |= Q(args__contains=[value])
        match |= Q(RawSQL(_KWARGS_VALUE, [json.dumps(value)], output_field=BooleanField()))
    number = term.removeprefix("#")
    if number.isdigit() and len(number) < 19:
        match |= Q(pk=int(number))
    return match


def _json_values(term: str) -> list[Any]:
    """The argument values a search term stands for: the string, and a JSON scalar it spells."""
    values: list[Any] = [term]
    try:
        parsed = json.loads(term)
    except ValueError:
        return values
    if isinstance(parsed, str | int | float | bool) and parsed not in values:
        values.append(parsed)
    return values
