"""The Django admin for the job queue: the job list and page, the actions, the dashboard.

Jobs are read-only here: operators change them only through the queue's own state changes
(``retry``, ``run_now``, ``cancel``) and delete. Every page stays fast on a table with millions
of finished jobs: counts are capped or estimated (:mod:`django_pgqueue.stats`), filters never
ask the table for its distinct values, and facet counts are off.

This module registers :class:`~django_pgqueue.admin.job.JobAdmin`, built from:

* :mod:`~django_pgqueue.admin.job`: the admin itself: list options, the job page and its buttons;
* :mod:`~django_pgqueue.admin.base`: its base: database, permissions, links and page rendering;
* :mod:`~django_pgqueue.admin.columns` and :mod:`~django_pgqueue.admin.formatting`: how a job shows;
* :mod:`~django_pgqueue.admin.changelist`: the job list's capped or estimated count;
* :mod:`~django_pgqueue.admin.filters` and :mod:`~django_pgqueue.admin.search`: finding jobs;
* :mod:`~django_pgqueue.admin.actions`: retry, run now, cancel, delete, and what they say;
* :mod:`~django_pgqueue.admin.dashboard`: the queue dashboard and its chart;
* :mod:`~django_pgqueue.admin.schedule`: the periodic schedules (registered on their own);
* :mod:`~django_pgqueue.admin.workflow`: a job's parents, dependents and batch, and the batches.

Importing it registers ``JobAdmin``, ``ScheduleAdmin`` and ``BatchAdmin`` and changes nothing
else: the admin index links the dashboard only on
:class:`django_pgqueue.admin_site.PgQueueAdminSite`.
"""

from __future__ import annotations

from django.contrib import admin

from django_pgqueue.admin.job import JobAdmin
from django_pgqueue.admin.schedule import ScheduleAdmin
from django_pgqueue.admin.workflow import BatchAdmin
from django_pgqueue.models import Batch, Job, Schedule

__all__ = ["BatchAdmin", "JobAdmin", "ScheduleAdmin"]

admin.site.register(Job, JobAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(Batch, BatchAdmin)
