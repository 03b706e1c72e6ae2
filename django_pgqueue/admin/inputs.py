"""What the admin takes from a request, checked in one place before any of it reaches SQL.

* No value of a request (query string, form, URL) may hold a NUL character or a lone surrogate:
  PostgreSQL's text can't, and comparing a column with one is an error. Such a request gets
  400 (:func:`checked_urls` wraps every view of the job and schedule admins).
* An id is ASCII digits within ``bigint`` (:func:`parse_id`): anything else in a URL is 404,
  in an action's selection 400.
* A list takes from the query string only the parameters of its own filters
  (:func:`filter_parameters`); any other field lookup (``?name__regex=[``, ``?args__0__gt=1``)
  gets Django's 400 for a lookup it does not allow.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.contrib.admin import SimpleListFilter, helpers
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

#: The largest id a ``bigint`` primary key holds.
BIGINT_MAX = 2**63 - 1

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_DIGITS = re.compile("[0-9]{1,19}")


def unstorable(value: Any) -> bool:
    """Whether a JSON value holds, in a string or a key, a NUL character or a lone surrogate
    (``json.loads('"\\ud800"')`` makes one): PostgreSQL's ``jsonb`` can't store either, and a
    page can't show a lone surrogate (UTF-8 has no encoding for it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_id(text: str) -> int | None:
    """``text`` as a row id (``"42"``), or None: no sign, no ``1.5``, no ``٤٢``, no overflow."""
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if value <= BIGINT_MAX else None


def check_request(request: HttpRequest, url_values: Iterable[object] = ()) -> None:
    """Raise :class:`BadRequest` (400) for a request value PostgreSQL could not take."""
    for where, data in (("query string", request.GET), ("form", request.POST)):
        for key, values in data.lists():
            if any(_UNSTORABLE.search(text) for text in (key, *values)):
                raise BadRequest(f"The {where} holds a NUL character or a lone surrogate.")
    if any(isinstance(v, str) and _UNSTORABLE.search(v) for v in url_values):
        raise BadRequest("The URL holds a NUL character or a lone surrogate.")
    for text in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
        if parse_id(text) is None:
            raise BadRequest(f"The selection holds {text[:30]!r}, which is not an id.")


def checked(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``view``, refusing a request :func:`check_request` refuses before the view runs."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        check_request(request, (*args, *kwargs.values()))
        return view(request, *args, **kwargs)

    return wrapper


def checked_urls(patterns: Iterable[URLPattern]) -> list[URLPattern]:
    """The admin's URL patterns with every view :func:`checked`."""
    return [URLPattern(p.pattern, checked(p.callback), p.default_args, p.name) for p in patterns]


def filter_parameters(list_filter: Sequence[Any]) -> frozenset[str]:
    """The query-string parameters the list filters of ``list_filter`` read."""
    names: set[str] = set()
    for item in list_filter:
        if isinstance(item, type) and issubclass(item, SimpleListFilter):
            names.add(str(item.parameter_name))
        else:
            # A field's filter: equality, None or not, and the date filters' range.
            field = item[0] if isinstance(item, tuple | list) else str(item)
            names.add(field)
            names.update(f"{field}__{lookup}" for lookup in ("exact", "isnull", "gte", "lt"))
    return frozenset(names)
