"""Job arguments: checked against the function's signature and JSON, before any SQL runs.

One validator for every enqueue path (``enqueue``, ``enqueue_on_commit``, ``enqueue_many`` and
the ``django.tasks`` backend). Arguments must come back from JSON unchanged and be storable in
PostgreSQL's jsonb (no NUL characters, no lone surrogates); a bad one raises
:class:`~django_pgqueue.exceptions.InvalidJobArguments` naming it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.sql import dumps


def serialize_arguments(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    signature: inspect.Signature | None = None,
) -> tuple[str, str]:
    """JSON text for ``args`` and ``kwargs``, or :class:`InvalidJobArguments` naming the culprit.

    Arguments must come back from JSON unchanged: no tuples, no datetimes, no model instances,
    no non-string dict keys. There is no pickle fallback.
    """
    args = list(args)
    if signature is not None and not _fits_positionally(signature, len(args), kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidJobArguments(f"Job {name!r}: {exc}") from None
    try:
        args_json = dumps(args) if args else "[]"
        kwargs_json = dumps(kwargs) if kwargs else "{}"
        if (
            (not args or _loads(args_json) == args)
            and (not kwargs or _loads(kwargs_json) == kwargs)
            and jsonb_storable(args_json)
            and jsonb_storable(kwargs_json)
        ):
            return args_json, kwargs_json
    except (TypeError, ValueError):
        pass
    raise _describe_bad_argument(name, args, kwargs, signature)


_loads = json.loads


def jsonb_storable(text: str) -> bool:
    """Whether JSON ``text`` (ASCII, as ``dumps`` writes it) can be stored in jsonb.

    jsonb refuses ``\\u0000`` and lone surrogates. Both only ever appear in the text as a
    ``\\u0000`` or ``\\ud8..\\udf`` escape, so one ``str.find`` each settles the usual case; a
    hit (an escaped backslash before ``u``, or an emoji's surrogate pair) is looked at closely.
    """
    if text.find("\\u0000") < 0 and text.find("\\ud") < 0:
        return True
    return _text_problem(_loads(text)) is None


def _text_problem(value: Any) -> str | None:
    """What jsonb would refuse in the strings (and dict keys) of ``value``, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            strings: list[str] = [item]
        elif isinstance(item, dict):
            strings = [key for key in item if isinstance(key, str)]
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
            continue
        else:
            continue
        for text in strings:
            if "\x00" in text:
                return f"holds a NUL character (\\x00) in {text[:40]!r}, which jsonb cannot store"
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return f"holds a lone surrogate in {text[:40]!r}, which is not valid Unicode"
    return None


def _positional_bounds(signature: inspect.Signature) -> tuple[int, int] | None:
    """(required, total) for a signature of plain positional-or-keyword parameters, else None.

    Cached by identity: a job function's signature is one object for its life, and hashing a
    ``Signature`` (what ``functools.cache`` would do) hashes every parameter, 3 us per call,
    more than the whole check it saves. Signatures made afresh per call (a schedule's check)
    only fill the cache, which is emptied when it grows past ``_BOUNDS_CACHE_SIZE``.
    """
    cached = _bounds_cache.get(id(signature))
    if cached is not None and cached[0] is signature:
        return cached[1]
    params = signature.parameters.values()
    bounds: tuple[int, int] | None = None
    if all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        required = sum(1 for p in params if p.default is inspect.Parameter.empty)
        bounds = (required, len(params))
    if len(_bounds_cache) >= _BOUNDS_CACHE_SIZE:
        _bounds_cache.clear()
    # The signature is kept with its bounds, so its id is never reused while cached.
    _bounds_cache[id(signature)] = (signature, bounds)
    return bounds


_BOUNDS_CACHE_SIZE = 1024
_bounds_cache: dict[int, tuple[inspect.Signature, tuple[int, int] | None]] = {}


def _fits_positionally(signature: inspect.Signature, count: int, kwargs: Mapping[str, Any]) -> bool:
    """A cheap ``signature.bind`` for the common case: only positional arguments, plain params.

    False means "not sure": the caller binds for real (and gets Python's own error message).
    """
    if kwargs:
        return False
    bounds = _positional_bounds(signature)
    return bounds is not None and bounds[0] <= count <= bounds[1]


def _describe_bad_argument(
    name: str, args: list[Any], kwargs: Mapping[str, Any], signature: inspect.Signature | None
) -> InvalidJobArguments:
    labels: list[tuple[str, Any]] = []
    params = list(signature.parameters.values()) if signature is not None else []
    for index, value in enumerate(args):
        label = f"argument {index}"
        if index < len(params) and params[index].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            label += f" ({params[index].name})"
        labels.append((label, value))
    labels.extend((f"keyword argument {key!r}", value) for key, value in kwargs.items())
    labels.extend((f"keyword argument name {key!r}", key) for key in kwargs)
    for label, value in labels:
        problem = _json_problem(value)
        if problem:
            return InvalidJobArguments(
                f"Job {name!r}: {label} {problem}. Job arguments must survive a JSON round trip "
                "unchanged (no pickle): pass ids, strings, numbers, booleans, None, lists and "
                "dicts with string keys."
            )
    return InvalidJobArguments(f"Job {name!r}: the arguments do not survive a JSON round trip.")


def _json_problem(value: Any) -> str | None:
    try:
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        return f"of type {type(value).__name__} is not JSON-serializable ({exc})"
    text_problem = _text_problem(value)
    if text_problem is not None:
        return text_problem
    if json.loads(text) != value:
        return (
            f"of type {type(value).__name__} changes in a JSON round trip "
            f"({value!r} comes back as {json.loads(text)!r})"
        )
    return None
