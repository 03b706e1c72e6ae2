"""The settings module: values read once and kept until Django says one of ours changed."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

from django_pgqueue.conf import settings


def test_a_setting_is_read_again_after_override_settings_and_restored_after_it():
    before = settings.VISIBILITY_TIMEOUT
    with override_settings(PGQUEUE_VISIBILITY_TIMEOUT=123):
        assert settings.VISIBILITY_TIMEOUT == 123.0
        assert settings.HEARTBEAT_INTERVAL == 123.0 / 4
    assert before == settings.VISIBILITY_TIMEOUT


@pytest.fixture
def settings_fixture_value(settings):
    settings.PGQUEUE_MAX_ATTEMPTS = 9
    return 9


def test_the_pytest_settings_fixture_changes_are_seen_too(settings_fixture_value):
    assert settings_fixture_value == settings.MAX_ATTEMPTS


def test_a_change_of_another_apps_setting_keeps_what_was_read():
    settings.MAX_ATTEMPTS  # noqa: B018 - read it once
    with override_settings(USE_TZ=True, TIME_ZONE="UTC"):
        assert settings.MAX_ATTEMPTS == 5  # the default, still


def test_a_value_another_thread_read_during_an_override_is_forgotten_after_it():
    seen = []

    def read():
        seen.append(settings.BACKOFF_JITTER)

    with override_settings(PGQUEUE_BACKOFF_JITTER=0.9):
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    assert seen == [0.9]
    assert settings.BACKOFF_JITTER == 0.0  # the test settings', read again after the change


def test_now_follows_use_tz_as_djangos_does():
    from django.utils import timezone

    from django_pgqueue.conf import now

    assert now().tzinfo is not None and timezone.is_aware(timezone.now())
    with override_settings(USE_TZ=False):
        assert now().tzinfo is None
    assert now().tzinfo is not None
