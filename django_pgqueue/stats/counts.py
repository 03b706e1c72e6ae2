"""What a count is, and row counts that never read the rows.

A :class:`Count` says whether it is exact, a lower bound (counting stopped at a cap) or the
planner's estimate. The estimates come from ``EXPLAIN``: PostgreSQL's statistics, no rows read.
:func:`capped_count` reads a QuerySet's rows up to a cap, then estimates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from django.db.models import QuerySet

from django_pgqueue.operations import DjangoDatabase
from django_pgqueue.operations.stats import plan_rows
from django_pgqueue.stats import limits

CountKind = Literal["exact", "at_least", "estimate"]


@dataclass(frozen=True)
class Count:
    """A row count: ``exact``, a lower bound (``at_least``) or a planner ``estimate``."""

    value: int
    kind: CountKind = "exact"

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def __str__(self) -> str:
        if self.kind == "at_least":
            return f"{self.value:,}+"
        if self.kind == "estimate":
            return f"~{_two_significant_digits(self.value):,}"
        return f"{self.value:,}"

    @property
    def note(self) -> str:
        """Why the number is not exact (empty when it is)."""
        if self.kind == "at_least":
            return f"Counted up to {self.value:,} rows and stopped there."
        if self.kind == "estimate":
            return "PostgreSQL's estimate from the table statistics (as of the last ANALYZE)."
        return ""


def _two_significant_digits(value: int) -> int:
    """An estimate of 1,234,567 rows reads as ~1,200,000."""
    if value < 100:
        return value
    digits = len(str(value)) - 2
    return round(value, -digits)


def add_counts(a: Count, b: Count) -> Count:
    """The sum, as exact as the least exact of the two."""
    kinds = {a.kind, b.kind}
    kind: CountKind = (
        "estimate" if "estimate" in kinds else "at_least" if "at_least" in kinds else "exact"
    )
    return Count(a.value + b.value, kind)


def over_cap(estimate: int, cap: int) -> Count:
    """The count of rows that were counted up to ``cap`` and went past it."""
    # Statistics may lag behind the table: never show less than what was counted.
    if estimate > cap:
        return Count(estimate, "estimate")
    return Count(cap, "at_least")


def estimate_rows(queryset: QuerySet[Any]) -> int:
    """The planner's row estimate for ``queryset`` (no rows are read)."""
    statement, params = queryset.order_by().query.sql_with_params()
    return plan_rows(DjangoDatabase(queryset.db), statement, params)


def capped_count(queryset: QuerySet[Any], cap: int | None = None) -> Count:
    """``queryset.count()`` that reads at most ``cap + 1`` rows; an estimate above ``cap``
    (default: ``limits.COUNT_CAP``)."""
    if cap is None:
        cap = limits.COUNT_CAP
    counted = queryset.order_by().values("pk")[: cap + 1].count()
    if counted <= cap:
        return Count(counted)
    return over_cap(estimate_rows(queryset), cap)
