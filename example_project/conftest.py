"""The example project's tests need the example's settings; the library's suite uses
``tests.settings``. Django has one settings module per process, so:

* under ``tests.settings`` (a plain ``pytest``, ``make test``), only ``test_example_project.py``
  is collected here: it runs the example's own tests in a second pytest process with
  ``--ds=example.settings``, and fails if they fail (or if none ran);
* under ``example.settings`` (that second process, or
  ``pytest --ds=example.settings example_project`` by hand), the example's tests run directly.

So the library's test run never imports the example's apps, and one command runs both.
"""

from __future__ import annotations

import os

if os.environ.get("DJANGO_SETTINGS_MODULE") == "example.settings":
    collect_ignore = ["test_example_project.py"]
else:
    collect_ignore = ["example", "shop", "manage.py"]
