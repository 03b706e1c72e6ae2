from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

EXAMPLE = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """DATABASE_URL for the test database, for worker subprocesses (django-environ syntax)."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "", safe="")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"], safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    host = db["HOST"] or ""
    name = quote(db["NAME"])
    if host.startswith("/"):
        return f"postgres://{auth}@{port}/{quote(host, safe='')}/{name}"
    return f"postgres://{auth}@{host}{port}/{name}"


@pytest.fixture
def run_worker(transactional_db):
    """Run ``manage.py run_jobs --burst`` on the test database, retries without delay."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=database_url(),
            DJANGO_SETTINGS_MODULE="example.settings",
            PGQUEUE_BACKOFF_BASE="0",
            PGQUEUE_BACKOFF_JITTER="0",
            EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend",
            PYTHONUNBUFFERED="1",
        )
        result = subprocess.run(
            [sys.executable, "manage.py", "run_jobs", "--burst", *args],
            cwd=EXAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    return run
