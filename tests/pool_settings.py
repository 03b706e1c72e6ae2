"""tests.settings for the worker subprocesses of tests/test_pool.py: the job threads' Django
connections come from a pool (``PGQUEUE_TEST_POOL``: its options as JSON; unset, no pool) and
carry an application_name of the test's (``PGQUEUE_TEST_APPLICATION_NAME``), so the test tells
them from the worker's own in pg_stat_activity."""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.poolapp"]

DATABASES = {
    alias: {**value, "OPTIONS": {**value.get("OPTIONS", {})}} for alias, value in DATABASES.items()
}
_default = DATABASES["default"]
if "PGQUEUE_TEST_APPLICATION_NAME" in os.environ:
    _default["OPTIONS"]["application_name"] = os.environ["PGQUEUE_TEST_APPLICATION_NAME"]
if "PGQUEUE_TEST_POOL" in os.environ:
    _default["OPTIONS"]["pool"] = json.loads(os.environ["PGQUEUE_TEST_POOL"])
    _default["CONN_MAX_AGE"] = 0
elif "PGQUEUE_TEST_CONN_MAX_AGE" in os.environ:
    _default["CONN_MAX_AGE"] = json.loads(os.environ["PGQUEUE_TEST_CONN_MAX_AGE"])
if os.environ.get("PGQUEUE_TEST_HEALTH_CHECKS") == "1":
    _default["CONN_HEALTH_CHECKS"] = True
