"""The queue's migrations without the squash: the old path, one by one, on any Django.

Django 6 migrates a new database to a replaced migration along the replaced ones when asked
(``migrate django_pgqueue 0011_ready_held_queues``); Django 5.2 no longer knows the replaced
names once a squash replaces them. ``tests.settings`` points ``MIGRATION_MODULES`` here when
``PGQUEUE_MIGRATIONS_WITHOUT_SQUASH=1`` (``scripts/schema.py`` sets it for the old path): a
package whose path holds links to every migration file but the squash.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import django_pgqueue.migrations

_SOURCE = Path(django_pgqueue.migrations.__file__).parent
_DIRECTORY = Path(tempfile.mkdtemp(prefix="pgqueue-migrations-without-squash-"))
atexit.register(shutil.rmtree, _DIRECTORY, ignore_errors=True)
for _migration in _SOURCE.glob("[0-9]*.py"):
    if "_squashed_" not in _migration.name:
        (_DIRECTORY / _migration.name).symlink_to(_migration)

__path__ = [str(_DIRECTORY)]
