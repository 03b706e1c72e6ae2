"""WSGI entry point: ``gunicorn example.wsgi`` (workers run separately: ``manage.py run_jobs``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example.settings")

application = get_wsgi_application()
