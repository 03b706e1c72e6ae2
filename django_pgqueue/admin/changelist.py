"""The job list's count and rows: capped or estimated, never a ``COUNT(*)`` over the table."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest

from django_pgqueue import stats
from django_pgqueue.admin.columns import mark_still_running

if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator


class EstimatedCountPaginator(_Paginator):
    """Counts at most ``stats.limits.COUNT_CAP`` rows; above that, the planner's estimate.

    The admin counts the (filtered) changelist on every page view; on a table with millions of
    finished jobs an exact ``COUNT(*)`` would cost more than the rest of the page. A result that
    fits on one page is counted by reading that page (one query, not two: a search that matches
    a few rows of a big table scans it once).
    """

    first_page: list[Any] | None = None

    @cached_property
    def counted(self) -> stats.Count:
        object_list = self.object_list
        if not isinstance(object_list, QuerySet):
            return stats.Count(len(object_list))
        rows = list(object_list[: self.per_page + 1])
        if len(rows) <= self.per_page:
            self.first_page = rows
            return stats.Count(len(rows))
        return stats.capped_count(object_list)

    @cached_property
    def count(self) -> int:
        return self.counted.value

    @property
    def count_is_exact(self) -> bool:
        return self.counted.exact


class JobChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        # The list never shows these (possibly large) columns.
        qs = super().get_queryset(request, exclude_parameters)
        return qs.defer("errors", "result", "args", "kwargs")

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        first_page = getattr(self.paginator, "first_page", None)
        if first_page is not None and not self.multi_page:
            self.result_list = first_page  # already read while counting
        self.result_list = list(self.result_list)
        mark_still_running(self.result_list)
