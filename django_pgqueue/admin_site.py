"""An admin site whose index links the queue dashboard, for projects that want the link there.

Importing :mod:`django_pgqueue.admin` changes nothing global: the dashboard is linked from the
job list and from the *Job queue* app page in any project. To link it from the admin index
too, use this site: in ``INSTALLED_APPS``, replace ``"django.contrib.admin"`` with
``"django_pgqueue.admin_site.PgQueueAdminConfig"`` (``admin.site`` is then a
:class:`PgQueueAdminSite`), or give your own site's index template
``{% include "django_pgqueue/admin/dashboard_link.html" %}``.

This module imports no model, so ``INSTALLED_APPS`` can name it.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig


class PgQueueAdminSite(admin.AdminSite):
    """Django's admin site, with the queue dashboard linked from its index."""

    index_template = "django_pgqueue/admin/index.html"


class PgQueueAdminConfig(AdminConfig):
    """``django.contrib.admin`` with :class:`PgQueueAdminSite` as ``admin.site``."""

    default_site = "django_pgqueue.admin_site.PgQueueAdminSite"
