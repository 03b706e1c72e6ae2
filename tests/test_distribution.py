"""The distribution: our own name on the package index, a wheel that holds the whole app, a
changelog section for every version."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import django_pgqueue

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
NAME = PYPROJECT["project"]["name"]


def test_the_distribution_name_is_ours_and_the_extras_refer_to_it():
    # "django-pgqueue" on the package index is an unrelated 2018 project.
    assert NAME == "django-pgqueue-jobs"
    for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items():
        for requirement in requirements:
            bare = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()
            assert bare.replace("_", "-") != "django-pgqueue", (extra, requirement)
            if bare.startswith("django-pgqueue"):
                assert bare == NAME, f"extra {extra!r} refers to {requirement!r}, not {NAME}"


def test_every_version_has_a_changelog_section():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (.+)$", changelog, flags=re.MULTILINE)
    assert headings[0] == "Unreleased"
    versions = [h.split(" ", 1)[0] for h in headings[1:]]
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in versions), versions
    assert "0.1.0" in versions
    version = django_pgqueue.__version__
    if re.fullmatch(r"\d+\.\d+\.\d+", version):
        assert version in versions, f"__version__ {version} has no section in CHANGELOG.md"
    else:
        # Between releases: the next version's .dev0, newer than every released one.
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)\.dev0", version)
        assert match, version
        released = [tuple(map(int, v.split("."))) for v in versions]
        assert tuple(map(int, match.groups())) > max(released)


def test_make_dist_builds_a_checked_sdist_and_wheel_with_the_whole_app(tmp_path):
    log = tmp_path / "build.log"
    with log.open("w") as out:
        # What `make dist` runs, without build isolation (no download in a test).
        built = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), "."],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    assert built.returncode == 0, log.read_text()[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    (sdist,) = tmp_path.glob("*.tar.gz")
    version = django_pgqueue.__version__
    assert wheel.name == f"django_pgqueue_jobs-{version}-py3-none-any.whl"
    assert sdist.name == f"django_pgqueue_jobs-{version}.tar.gz"

    with log.open("w") as out:
        checked = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    assert checked.returncode == 0, log.read_text()

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = Parser().parsestr(
            archive.read(f"django_pgqueue_jobs-{version}.dist-info/METADATA").decode()
        )
    assert metadata["Name"] == NAME
    assert metadata["Version"] == version
    assert metadata["License-Expression"] == "MIT"
    assert "binary" in metadata.get_all("Provides-Extra")
    requires = metadata.get_all("Requires-Dist")
    assert any(r.startswith("psycopg[binary]") and 'extra == "binary"' in r for r in requires)
    assert f"django_pgqueue_jobs-{version}.dist-info/licenses/LICENSE" in names
    # Everything the app needs at run time, not only the Python modules.
    package = ROOT / "django_pgqueue"
    shipped = {
        str(path.relative_to(ROOT))
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert shipped <= names, sorted(shipped - names)
    for needed in (
        "django_pgqueue/py.typed",
        "django_pgqueue/static/django_pgqueue/admin.css",
        "django_pgqueue/migrations/0001_initial.py",
        "django_pgqueue/sql/claim.py",
        "django_pgqueue/sql/schema.sql",
        # Each statement whole (scripts/sql_text.py).
        "django_pgqueue/sql/text/claim.sql",
        # The optional app of the tools, with its commands.
        "django_pgqueue/contrib/bench/apps.py",
        "django_pgqueue/contrib/bench/management/commands/pgqueue_bench.py",
    ):
        assert needed in names
    assert not {n for n in names if n.startswith(("tests/", "example_project/"))}

    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"README.md", "LICENSE", "pyproject.toml"} <= members
