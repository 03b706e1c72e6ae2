"""Putting jobs in the table: argument checks and the INSERTs.

``enqueue`` runs on the queue database's connection, so inside ``transaction.atomic()`` the job
commits or rolls back with the caller's rows and stays invisible to workers until commit.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone

from django_pgqueue import sql
from django_pgqueue.conf import settings
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.states import PRIORITY_MAX, PRIORITY_MIN

if TYPE_CHECKING:
    from django_pgqueue.models import Job

#: Rows per INSERT statement in ``enqueue_many``.
BULK_BATCH_SIZE = 5000


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Where and how a job is enqueued. ``None`` means "the setting's value at enqueue time"."""

    name: str
    queue: str | None = None
    priority: int = 0
    run_after: datetime | timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    concurrency_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise TypeError(f"priority must be an int, not {type(self.priority).__name__}")
        if not PRIORITY_MIN <= self.priority <= PRIORITY_MAX:
            raise ValueError(
                f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {self.priority}"
            )
        if self.queue is not None and not (
            isinstance(self.queue, str) and 0 < len(self.queue) <= 100
        ):
            raise ValueError(
                f"queue must be a non-empty string of at most 100 characters, got {self.queue!r}"
            )
        if self.max_attempts is not None and (
            not isinstance(self.max_attempts, int) or self.max_attempts < 1
        ):
            raise ValueError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        if self.run_after is not None and not isinstance(self.run_after, datetime | timedelta):
            raise TypeError(
                f"run_after must be a datetime or a timedelta, not {type(self.run_after).__name__}"
            )
        for key in ("unique_key", "concurrency_key"):
            value = getattr(self, key)
            if value is not None and not (isinstance(value, str) and 0 < len(value) <= 255):
                raise ValueError(f"{key} must be a non-empty string of at most 255 characters")

    def resolved_run_after(self) -> datetime | None:
        """An aware datetime, or None for "now" (the database's clock)."""
        value = self.run_after
        if value is None:
            return None
        if isinstance(value, timedelta):
            return timezone.now() + value
        if timezone.is_naive(value):
            return timezone.make_aware(value)
        return value

    def insert_row(self, args_json: str, kwargs_json: str) -> sql.InsertRow:
        return (
            self.queue or settings.DEFAULT_QUEUE,
            self.name,
            args_json,
            kwargs_json,
            self.priority,
            self.resolved_run_after(),
            self.max_attempts or settings.MAX_ATTEMPTS,
            self.unique_key,
            self.concurrency_key,
        )


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
        args_json = sql.dumps(args) if args else "[]"
        kwargs_json = sql.dumps(kwargs) if kwargs else "{}"
        if (not args or _loads(args_json) == args) and (
            not kwargs or _loads(kwargs_json) == kwargs
        ):
            return args_json, kwargs_json
    except (TypeError, ValueError):
        pass
    raise _describe_bad_argument(name, args, kwargs, signature)


_loads = json.loads


@functools.cache
def _positional_bounds(signature: inspect.Signature) -> tuple[int, int] | None:
    """(required, total) for a signature of plain positional-or-keyword parameters, else None."""
    params = signature.parameters.values()
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    required = sum(1 for p in params if p.default is inspect.Parameter.empty)
    return required, len(params)


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
        text = sql.dumps(value)
    except (TypeError, ValueError) as exc:
        return f"of type {type(value).__name__} is not JSON-serializable ({exc})"
    if json.loads(text) != value:
        return (
            f"of type {type(value).__name__} changes in a JSON round trip "
            f"({value!r} comes back as {json.loads(text)!r})"
        )
    return None


def _job_from_insert(
    options: JobOptions, row: sql.InsertRow, returned: Sequence[Any], db: str
) -> Job:
    from django_pgqueue.models import Job

    queue, name, args_json, kwargs_json, priority, _, max_attempts, unique_key, conc_key = row
    job = Job(
        id=returned[0],
        queue=queue,
        name=name,
        args=json.loads(args_json),
        kwargs=json.loads(kwargs_json),
        status="pending",
        priority=priority,
        run_after=returned[1],
        attempts=0,
        max_attempts=max_attempts,
        unique_key=unique_key,
        concurrency_key=conc_key,
        created_at=returned[2],
    )
    job._state.adding = False
    job._state.db = db
    return job


def enqueue(options: JobOptions, args_json: str, kwargs_json: str) -> Job:
    """INSERT one job in the current transaction of the queue database; one round trip.

    With a ``unique_key`` already held by a pending or running job of the same queue, nothing
    is inserted and that job is returned with ``deduplicated = True``.
    """
    from django_pgqueue.models import Job

    db = settings.DATABASE
    row = options.insert_row(args_json, kwargs_json)
    with connections[db].cursor() as cursor:
        for _ in range(3):
            inserted = sql.insert_one(cursor, row)
            if inserted is not None:
                job = _job_from_insert(options, row, inserted, db)
                job.deduplicated = False  # type: ignore[attr-defined]
                return job
            existing = (
                Job.objects.using(db)
                .filter(queue=row[0], unique_key=row[7], status__in=("pending", "running"))
                .first()
            )
            if existing is not None:
                existing.deduplicated = True  # type: ignore[attr-defined]
                return existing
            # The holder finished between our INSERT and SELECT: insert again.
    raise RuntimeError(f"Could not enqueue job {options.name!r} with unique key {row[7]!r}")


def enqueue_many(options: JobOptions, payloads: Sequence[tuple[str, str]]) -> list[int]:
    """Bulk-enqueue one job per ``(args_json, kwargs_json)``; returns ids in input order.

    Without a unique key: COPY, one statement per ``BULK_BATCH_SIZE`` jobs. With one, every job
    shares the key, so at most one is active: the first is enqueued (or the active holder of
    the key found) and every item gets that job's id.
    """
    if not payloads:
        return []
    if options.unique_key is None:
        return _copy_many(options, payloads)
    holder = enqueue(options, *payloads[0])
    return [holder.pk] * len(payloads)


def _copy_many(options: JobOptions, payloads: Sequence[tuple[str, str]]) -> list[int]:
    queue, name, _, _, priority, run_after, max_attempts, _, concurrency_key = options.insert_row(
        "", ""
    )
    ids: list[int] = []
    with connections[settings.DATABASE].cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor, for COPY
        if run_after is None:
            raw.execute("SELECT now()")
            run_after = raw.fetchone()[0]  # the transaction's now(), as the column default
        for start in range(0, len(payloads), BULK_BATCH_SIZE):
            ids += sql.copy_many(
                raw,
                queue,
                name,
                payloads[start : start + BULK_BATCH_SIZE],
                priority,
                run_after,
                max_attempts,
                concurrency_key,
            )
    return ids


def retry_delay(attempt: int, base: float, cap: float, jitter: float) -> float:
    """Seconds before the next attempt: ``base * 2**(attempt-1) * (1 + U(0, jitter))``, capped."""
    delay = base * float(2 ** max(attempt - 1, 0)) * (1 + random.uniform(0, jitter))
    return min(delay, cap)
