"""The job list's filters. Their choices come from indexes, statistics and the registry: never
from a ``SELECT DISTINCT`` over a big table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_pgqueue import stats
from django_pgqueue.admin.base import as_jobs
from django_pgqueue.states import Event, JobStatus

if TYPE_CHECKING:
    from django_pgqueue.managers import JobQuerySet


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"
    #: What Django's own ``list_filter = ["status"]`` wrote, and so what links and bookmarks
    #: from before this filter hold: the list redirects it to ``?status=``.
    ALIAS = "status__exact"

    CHOICES: dict[str, tuple[str, Callable[[JobQuerySet], JobQuerySet]]] = {
        JobStatus.PENDING.value: ("Pending (all)", lambda qs: qs.pending()),
        "runnable": ("Pending: runnable now", lambda qs: qs.runnable()),
        "scheduled": ("Pending: scheduled", lambda qs: qs.scheduled()),
        # Failed, and its next attempt is later: one made runnable by hand (Run now), or whose
        # retry time has come, is under "runnable now" like the job list's badge says.
        Event.FAILED.value: ("Pending: failed, awaiting retry", lambda qs: qs.failed().scheduled()),
        JobStatus.WAITING.value: ("Waiting for other jobs", lambda qs: qs.waiting()),
        JobStatus.RUNNING.value: ("Running", lambda qs: qs.running()),
        JobStatus.COMPLETED.value: ("Completed", lambda qs: qs.completed()),
        JobStatus.DEAD.value: ("Dead", lambda qs: qs.dead()),
        JobStatus.CANCELLED.value: ("Cancelled", lambda qs: qs.cancelled()),
    }

    @classmethod
    def unaliased(cls, request: HttpRequest) -> str:
        """The request's path and query string with ``?status__exact=`` read as ``?status=``."""
        params = [(k, v) for k, values in request.GET.lists() for v in values if k != cls.ALIAS]
        if cls.parameter_name not in request.GET:
            params.append((cls.parameter_name, request.GET[cls.ALIAS]))
        return f"{request.path}?{urlencode(params)}"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, (label, _) in self.CHOICES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        choice = self.CHOICES.get(self.value() or "")
        return None if choice is None else choice[1](as_jobs(queryset))


class KnownValueFilter(admin.SimpleListFilter):
    """Jobs whose column ``parameter_name`` equals the chosen value. The choices are
    :meth:`known_values`, plus the value in the URL when it is not one of them."""

    parameter_name: str

    def known_values(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = self.known_values()
        value = self.value()
        if value and value not in values:
            values.append(value)
        return [(v, v) for v in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        return queryset.filter(**{self.parameter_name: value}) if value else None


class QueueFilter(KnownValueFilter):
    title = "queue"
    parameter_name = "queue"

    def known_values(self) -> list[str]:
        return stats.queue_names()


class NameFilter(KnownValueFilter):
    title = "job name"
    parameter_name = "name"

    def known_values(self) -> list[str]:
        return stats.job_names()
