"""Runs the example project's tests (example_project/shop/tests) with the example's settings.

See conftest.py here for why this is a separate pytest process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from django.conf import settings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def database_url(db: dict[str, object]) -> str:
    """A DATABASE_URL for the server the library's tests use (django-environ's syntax)."""
    user = quote(str(db.get("USER") or ""), safe="")
    password = str(db.get("PASSWORD") or "")
    auth = f"{user}:{quote(password, safe='')}" if password else user
    host = str(db.get("HOST") or "")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    if host.startswith("/"):
        return f"postgres://{auth}@{port}/{quote(host, safe='')}/pgqueue_example"
    return f"postgres://{auth}@{host}{port}/pgqueue_example"


def test_example_project_suite() -> None:
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(settings.DATABASES["default"])
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--ds=example.settings",
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            str(HERE),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    # 5 = no tests collected: a broken collection must not pass silently.
    assert result.returncode == 0, f"example tests failed (exit {result.returncode}):\n{output}"
    assert " passed" in output, output
    print(output.strip().splitlines()[-1])
