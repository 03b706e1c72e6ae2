"""``Job`` instances built from what the queue's statements return, on hot paths.

``Job(field=value, ...)`` looks each of the model's fields up in the keywords and falls back
to its default by catching ``KeyError``: 16 us a job on the test machine, against 8 us for
the same values given in field order with the defaults filled in (:func:`new_job`, through
``Job.from_db()`` with every field, which calls ``Job(*values)``). :func:`from_values` skips
``Model.__init__`` too where nothing listens to its signals.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: JSON texts decoded without ``json.loads`` (a new object each time: jobs may mutate theirs):
#: most jobs have no arguments or no keyword arguments, and no errors yet.
EMPTY_JSON: dict[str, Callable[[], Any]] = {"[]": list, "{}": dict}


def decode_json(text: str) -> Any:
    """``json.loads(text)``, without the decoder for an empty list or object."""
    empty = EMPTY_JSON.get(text)
    return empty() if empty is not None else json.loads(text)


@functools.cache
def _job_class() -> type[Job]:
    from django_pgqueue.models import Job

    return Job


@functools.cache
def job_fields() -> tuple[str, ...]:
    """``Job``'s concrete fields' attribute names, in order: what ``Job(*values)`` takes."""
    from django_pgqueue.models import Job

    return tuple(f.attname for f in Job._meta.concrete_fields)


def init_signals_listen() -> bool:
    """Whether something listens to ``pre_init`` or ``post_init`` for ``Job`` (0.5 us each to
    ask: once per batch of rows, not per row)."""
    job_class = _job_class()
    return pre_init.has_listeners(job_class) or post_init.has_listeners(job_class)


def from_values(db: str, names: Sequence[str], values: Iterable[Any]) -> Job:
    """A ``Job`` as saved in ``db`` with ``values`` for the fields ``names`` (attribute
    names), the others deferred: what ``Job.from_db(db, names, values)`` makes, without
    ``Model.__init__``'s per-field ``setattr`` and signals. Only while
    :func:`init_signals_listen` is False.

    Built as ``Model.__init__`` would leave it: the values in the instance's ``__dict__`` (a
    field left out of it is deferred) and a new ``ModelState``. ``Job`` has no field whose
    attribute is a data descriptor (no relation, no custom descriptor), which is what makes
    this equal to ``__init__``.
    """
    job_class = _job_class()
    job = job_class.__new__(job_class)
    job.__dict__.update(zip(names, values, strict=True))
    state = job._state = ModelState()
    state.adding = False
    state.db = db
    return job


@functools.cache
def _defaults() -> tuple[frozenset[str], tuple[tuple[str, Callable[[], Any]], ...]]:
    """``Job``'s field names (a set), and each field's default in order."""
    from django_pgqueue.models import Job

    fields = Job._meta.concrete_fields
    return frozenset(job_fields()), tuple((f.attname, f.get_default) for f in fields)


def new_job(db: str, **values: Any) -> Job:
    """A ``Job`` as saved in ``db`` (not ``adding``): ``values`` by attribute name, every other
    field its default."""

    known, defaults = _defaults()
    if not known.issuperset(values):
        raise TypeError(f"Job has no fields {sorted(set(values) - known)}")
    full = [values[name] if name in values else default() for name, default in defaults]
    if init_signals_listen():
        return _job_class().from_db(db, job_fields(), full)
    return from_values(db, job_fields(), full)
