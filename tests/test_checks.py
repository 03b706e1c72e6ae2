"""System checks and migrations."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import override_settings


def check_ids(**settings):
    with override_settings(**settings):
        return [m.id for m in run_checks(tags=["django_pgqueue"])]


def test_default_settings_pass():
    assert check_ids() == []


def test_queue_database_must_be_postgresql(settings):
    databases = {**settings.DATABASES, "other": {"ENGINE": "django.db.backends.sqlite3"}}
    with pytest.warns(UserWarning, match="Overriding setting DATABASES"):
        assert check_ids(DATABASES=databases, PGQUEUE_DATABASE="other") == ["django_pgqueue.E001"]


def test_queue_database_must_exist():
    assert check_ids(PGQUEUE_DATABASE="missing") == ["django_pgqueue.E002"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PGQUEUE_MAX_ATTEMPTS", 0),
        ("PGQUEUE_MAX_ATTEMPTS", "3"),
        ("PGQUEUE_BACKOFF_BASE", -1),
        ("PGQUEUE_VISIBILITY_TIMEOUT", 0),
        ("PGQUEUE_LISTEN", "yes"),
        ("PGQUEUE_BATCH_SIZE", 2.5),
        ("PGQUEUE_DEFAULT_QUEUE", ""),
        ("PGQUEUE_RETENTION", "7 days"),
        ("PGQUEUE_POLL_INTERVAL", True),
        ("PGQUEUE_RETRY_LOG_LEVEL", "LOUD"),
        ("PGQUEUE_RETRY_LOG_LEVEL", 35),
        ("PGQUEUE_FAILURE_LOG_LEVEL", None),
        ("PGQUEUE_FAILURE_LOG_LEVEL", True),
    ],
)
def test_bad_settings_fail_with_e003_naming_the_setting(name, value):
    with override_settings(**{name: value}):
        messages = run_checks(tags=["django_pgqueue"])
    assert [m.id for m in messages] == ["django_pgqueue.E003"]
    assert name in messages[0].msg


def test_heartbeat_must_be_shorter_than_the_visibility_timeout():
    ids = check_ids(PGQUEUE_VISIBILITY_TIMEOUT=10, PGQUEUE_HEARTBEAT_INTERVAL=10)
    assert ids == ["django_pgqueue.E004"]


def test_manage_check_fails_on_bad_settings():
    from django.core.management.base import SystemCheckError

    with override_settings(PGQUEUE_MAX_ATTEMPTS=-1), pytest.raises(SystemCheckError, match="E003"):
        call_command("check")


@pytest.mark.django_db
def test_migrations_match_the_models():
    out = StringIO()
    call_command("makemigrations", "django_pgqueue", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_the_settings_page_lists_every_rule():
    """docs/settings.md shows what rules.py enforces, for every setting and job option."""
    from pathlib import Path

    from django_pgqueue import rules

    page = (Path(__file__).resolve().parent.parent / "docs" / "settings.md").read_text()
    for name, rule in rules.SETTINGS.items():
        assert f"| `PGQUEUE_{name}` | {rule.describe()} |" in page, name
    for name, rule in rules.JOB_OPTIONS.items():
        assert f"| `{name}` | {rule.describe()} |" in page, name
