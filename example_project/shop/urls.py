from __future__ import annotations

from django.urls import path

from shop import views

app_name = "shop"

urlpatterns = [
    path("", views.index, name="index"),
    path("stores/<int:store_id>/rebuild-report/", views.rebuild_report, name="rebuild-report"),
    path("search-index/rebuild/", views.rebuild_index, name="rebuild-index"),
]
