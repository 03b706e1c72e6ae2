"""What every part of the job admin shares: the queue's database, who may do what, and how its
own pages are linked and rendered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import django
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.text import capfirst

from django_pgqueue.conf import settings
from django_pgqueue.models import Job
from django_pgqueue.states import JobStatus

if TYPE_CHECKING:
    from django_pgqueue.managers import JobQuerySet

    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


def as_jobs(queryset: QuerySet[Any]) -> JobQuerySet:
    """The queryset, typed as the :class:`JobQuerySet` it is (for its status methods)."""
    return cast("JobQuerySet", queryset)


class JobAdminBase(_ModelAdmin):
    """The base of :class:`~django_pgqueue.admin.job.JobAdmin` and of its parts."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).using(settings.DATABASE)

    # ----- permissions ----------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code, not typed in

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # ``change_job`` allows the actions; no job is ever edited through a form.
        if obj is not None:
            return False
        return super().has_change_permission(request)

    def can_operate(self, request: HttpRequest) -> bool:
        """Whether the user may retry, run now and cancel jobs (``change_job``)."""
        return super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None and obj.status == JobStatus.RUNNING:
            return False  # a worker has it in hand
        return super().has_delete_permission(request, obj)

    # ----- pages ----------------------------------------------------------------------------

    def admin_url(self, name: str, *args: Any) -> str:
        """The URL of one of this admin's views: ``changelist``, ``change``, ``dashboard``..."""
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args)

    def changelist_crumb(self) -> tuple[str, str]:
        """The jobs list as a link in a page's breadcrumbs (see :meth:`render_page`)."""
        return capfirst(str(self.opts.verbose_name_plural)), self.admin_url("changelist")

    def render_page(
        self,
        request: HttpRequest,
        template: str,
        title: str,
        *,
        trail: Sequence[tuple[str, str]],
        here: str,
        **context: Any,
    ) -> TemplateResponse:
        """One of the job admin's own pages, with the context every admin page has.

        Its breadcrumbs are Home, the app, the ``(label, url)`` links of ``trail``, then
        ``here``; django_pgqueue/admin/breadcrumbs.html draws them with the markup of the
        Django that renders the page, which its admin CSS styles: a ``<div>`` up to 6.0, an
        ``<ol>`` from 6.1 (the other one shows as a numbered list).
        """
        return TemplateResponse(
            request,
            template,
            {
                **self.admin_site.each_context(request),
                "title": title,
                "opts": self.opts,
                "pgqueue_trail": trail,
                "pgqueue_here": here,
                "pgqueue_breadcrumbs_list": django.VERSION >= (6, 1),
                **context,
                "media": self.media,
            },
        )
