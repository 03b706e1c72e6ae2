"""The job list's search box: ids, names, keys, error text and argument values."""

from __future__ import annotations

import functools
import json
import math
import operator
from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.text import smart_split, unescape_string_literal

from django_pgqueue import stats
from django_pgqueue.admin.inputs import parse_id
from django_pgqueue.models import Job
from django_pgqueue.operations.search import kwargs_have_value

#: Most words a search takes; the rest are ignored and the page says so. Each word is matched
#: against every searched column, so a search of 2,000 words would scan the table 2,000 times.
MAX_SEARCH_TERMS = 10


def search_terms(search_term: str) -> list[str]:
    """The words of a search (a quoted phrase is one word), empty ones left out."""
    terms = []
    for bit in smart_split(search_term):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1] and len(bit) > 1:
            bit = unescape_string_literal(bit)
        if bit.strip():
            terms.append(bit.strip())
    return terms


def search_jobs(queryset: QuerySet[Job], search_term: str) -> QuerySet[Job]:
    """Every term (of the first :data:`MAX_SEARCH_TERMS`) must match one of: the id, the name,
    a key, the error text or an argument.

    Built to cost one sequential scan without trigram indexes: names are matched against the
    known job names (case-insensitively) or as a case-sensitive substring, and arguments by
    exact value (``42`` finds ``add(42, 1)`` and ``send_welcome(user_id=42)``).
    """
    terms = search_terms(search_term)[:MAX_SEARCH_TERMS]
    if not terms:
        return queryset
    names = stats.job_names(queryset.db)
    return queryset.filter(functools.reduce(operator.and_, (search_match(t, names) for t in terms)))


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
        match |= kwargs_have_value(value)
    pk = parse_id(term.removeprefix("#"))
    if pk is not None:
        match |= Q(pk=pk)
    return match


def _json_values(term: str) -> list[Any]:
    """The argument values a search term stands for: the string, and a JSON scalar it spells.

    Only what jsonb holds: ``NaN``, ``Infinity`` and ``1e400`` (inf) are searched as text.
    """
    values: list[Any] = [term]
    try:
        parsed = json.loads(term, parse_constant=_not_json)
    except ValueError:  # not JSON, or an integer of more than 4,300 digits
        return values
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return values
    if isinstance(parsed, str | int | float | bool) and parsed not in values:
        values.append(parsed)
    return values


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
