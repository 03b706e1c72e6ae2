"""The queue's URLs, for a project's urlconf::

path("pgqueue/", include("django_pgqueue.urls"))
"""

from __future__ import annotations

from django.urls import path

from django_pgqueue import views

app_name = "django_pgqueue"

urlpatterns = [path("metrics", views.metrics, name="metrics")]
