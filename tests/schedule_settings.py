"""tests.settings plus an app whose jobs module declares periodic jobs (worker subprocesses)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.scheduleapp"]
