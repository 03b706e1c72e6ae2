"""Migrations are history: frozen, and both paths through them make one schema.

* No migration imports the package (its SQL builders, its states) except
  ``django_pgqueue.fields``, kept stable for them: editing live code never changes what an old
  migration runs.
* A new database migrated along 0001-0011 one by one (the old path: what a database that has
  some of them applied goes on with) and one migrated through the squashed migration have the
  same ``pg_dump --schema-only``, and that schema is ``django_pgqueue/sql/schema.sql``
  (``make schema`` writes it again after a migration is added).

The two databases are made on the test server, named after the test database, and dropped.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

from scripts import pgdb, schema

MIGRATIONS = Path(schema.MIGRATIONS)
#: What a migration may import from the package: field classes and field defaults.
STABLE = {"django_pgqueue.fields"}
SQUASH = "0001_squashed_0011_ready_held_queues"


def package_imports(path: Path) -> list[str]:
    """The modules of ``django_pgqueue`` that ``path`` imports (relative imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x, from ..sql import y
                names = ["." * node.level + (node.module or "")]
            else:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
                # "from django_pgqueue import fields" imports the module django_pgqueue.fields
        else:
            continue
        for name in names:
            if name.startswith(".") or name.split(".")[0] == "django_pgqueue":
                found.append(f"{path.name}:{node.lineno} {name}")
    return found


def allowed(found: str) -> bool:
    name = found.split(" ")[1]
    return any(name == module or name.startswith(module + ".") for module in STABLE)


def test_migrations_import_nothing_of_the_package_but_its_fields():
    migrations = sorted(MIGRATIONS.glob("*.py"))
    assert len(migrations) > 12
    offenders = [f for path in migrations for f in package_imports(path) if not allowed(f)]
    assert not offenders, (
        "migrations are frozen: spell the SQL and the statuses they use inline, and put field "
        f"classes and defaults in django_pgqueue/fields.py: {offenders}"
    )
    # The stable module stays stable: it imports nothing of the package either.
    assert package_imports(MIGRATIONS.parent / "fields.py") == []


def test_the_import_check_sees_what_it_must(tmp_path):
    sample = tmp_path / "0099_sample.py"
    sample.write_text(
        "from django_pgqueue.sql import ready\n"
        "import django_pgqueue.states\n"
        "from ..sql import held\n"
        "import django_pgqueue.fields\n"
        "from django_pgqueue.fields import default_zone\n"
    )
    found = [f for f in package_imports(sample) if not allowed(f)]
    assert [f.split(" ")[1] for f in found] == [
        "django_pgqueue.sql.ready",
        "django_pgqueue.states",
        "..sql",
    ]


@pytest.fixture(scope="module")
def server() -> pgdb.Database:
    db = connection.settings_dict
    return pgdb.Database(
        host=str(db["HOST"] or ""),
        port=int(db["PORT"]) if db["PORT"] else None,
        user=str(db["USER"] or ""),
        password=str(db["PASSWORD"] or ""),
        name=str(db["NAME"]),
        source="the test server",
    )


def migrated(
    server: pgdb.Database, name: str, *steps: tuple[str, ...], old_path: bool = False
) -> tuple[str, str]:
    """A new database ``name`` migrated by each of ``steps`` (``migrate`` arguments) in turn
    (``old_path``: without the squash): the migrations' output and the normalised schema."""
    with schema.new_database(server, name) as db:
        output = "".join(schema.migrate(db, *step, old_path=old_path) for step in steps)
        return output, schema.dump(db)


@pytest.fixture(scope="module")
def paths(server: pgdb.Database) -> Iterator[dict[str, tuple[str, str]]]:
    """The old path (to 0011 one by one, then on to the newest), the new one (``migrate``),
    and the new one undone (``migrate django_pgqueue zero``), each on its own new database, side
    by side."""
    base = connection.settings_dict["TEST"].get("NAME") or f"test_{server.name}"
    with ThreadPoolExecutor(3) as pool:
        old = pool.submit(
            migrated, server, f"{base}_old_path", (schema.OLD_PATH_END,), (), old_path=True
        )
        new = pool.submit(migrated, server, f"{base}_squash", ())
        zero = pool.submit(migrated, server, f"{base}_zero", (), ("zero",))
        yield {"old": old.result(), "new": new.result(), "zero": zero.result()}


def test_a_new_database_migrates_through_the_squash_the_old_path_one_by_one(paths):
    old_output, _ = paths["old"]
    new_output, _ = paths["new"]
    assert f"Applying django_pgqueue.{SQUASH}..." in new_output
    assert "0006_ready_ring" not in new_output
    for step in ("0001_initial", "0006_ready_ring", schema.OLD_PATH_END):
        assert f"Applying django_pgqueue.{step}..." in old_output
    assert SQUASH not in old_output


def test_both_paths_make_the_same_schema(paths):
    _, old_schema = paths["old"]
    _, new_schema = paths["new"]
    assert "CREATE TABLE public.pgqueue_ready_held" in new_schema
    if new_schema != old_schema:
        pytest.fail(
            "the squash and 0001-0011 differ:\n" + schema.differences(old_schema, new_schema)
        )


def test_the_squash_undone_leaves_nothing_of_the_queue(paths):
    output, left = paths["zero"]
    assert f"Unapplying django_pgqueue.{SQUASH}..." in output
    assert left == ""


def test_schema_sql_is_the_schema_the_migrations_make(paths):
    _, new_schema = paths["new"]
    expected = schema.render(new_schema)
    written = schema.SCHEMA_FILE.read_text()
    if written != expected:
        pytest.fail(
            f"{schema.differences(written, expected)}\n"
            f"django_pgqueue/sql/schema.sql is out of date: {schema.REGENERATE}."
        )
