"""django_pgqueue/sql/schema.sql: the queue's whole schema, as the migrations leave it.

    python scripts/schema.py           write the file again (``make schema``), after a migration
    python scripts/schema.py --check   exit 1 and show the difference if it is not up to date

Migrates a new database (``pgqueue_schema_<pid>``, on the server ``scripts/pgdb.py`` finds,
dropped afterwards) with ``manage.py migrate django_pgqueue`` (the test settings), dumps it with
``pg_dump --schema-only`` and keeps the ``pgqueue_*`` objects, normalised: no comments, ``SET``
lines or owners, one block per object in a fixed order. ``tests/test_migrations_frozen.py``
uses the same functions to compare the two migration paths and this file.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from psycopg import sql

if __package__ in (None, ""):  # run as a script: scripts/ is sys.path[0], not the project
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import pgdb

ROOT = pgdb.ROOT
SCHEMA_FILE = ROOT / "django_pgqueue" / "sql" / "schema.sql"
MIGRATIONS = ROOT / "django_pgqueue" / "migrations"
#: The last migration of the replaced ones: migrating to it on a new database runs 0001-0011
#: one by one (the old path); a plain ``migrate`` runs the squashed migration instead.
OLD_PATH_END = "0011_ready_held_queues"
REGENERATE = "run `make schema` (python scripts/schema.py) and commit the file"

# pg_dump's header before each object: "--\n-- Name: x; Type: TABLE; Schema: public; Owner: -\n--"
_HEADER = re.compile(r"^--\n-- Name: (.+?); Type: (.+?); Schema: .*?; Owner: .*?\n--\n", re.M)
# Lines that are not the schema: settings of the dump's session and psql's \restrict guard.
_NOISE = re.compile(r"^(SET |SELECT pg_catalog\.set_config\(|\\restrict |\\unrestrict ).*\n?", re.M)
#: The order of the blocks in the file: what a reader looks for first, then pg_dump's own.
_TYPES = ("FUNCTION", "TABLE", "TABLE ATTACH", "SEQUENCE", "DEFAULT", "CONSTRAINT", "INDEX")
_LAST_TYPES = ("INDEX ATTACH", "TRIGGER")


def pg_dump_binary() -> str:
    """pg_dump on PATH, else the newest in /usr/lib/postgresql/*/bin (and the like)."""
    found = pgdb.find_binary("pg_dump")
    if not found:
        raise pgdb.Problem("pg_dump not found: install PostgreSQL's client (postgresql-client).")
    return found


def normalise(dump: str) -> str:
    """The ``pgqueue_*`` objects of a ``pg_dump --schema-only`` text, one block per object
    (``-- TYPE name`` and its statements), in a fixed order: by type, then name."""
    parts = _HEADER.split(dump.split("--\n-- PostgreSQL database dump complete")[0])
    blocks = []
    # parts: the preamble, then (name, type, body) for each object.
    for i in range(1, len(parts) - 2, 3):
        name, kind, body = parts[i], parts[i + 1], parts[i + 2]
        if not name.split(" ")[0].startswith("pgqueue_"):
            continue
        body = _NOISE.sub("", body).strip("\n")
        order = (
            _TYPES.index(kind)
            if kind in _TYPES
            else len(_TYPES) + 1 + _LAST_TYPES.index(kind)
            if kind in _LAST_TYPES
            else len(_TYPES)
        )
        blocks.append((order, kind, name, body))
    text = "\n\n".join(f"-- {kind} {name}\n{body}" for _, kind, name, body in sorted(blocks))
    return text + "\n" if text else ""


def dump(db: pgdb.Database) -> str:
    """``pg_dump --schema-only`` of ``db``, normalised."""
    done = subprocess.run(
        [pg_dump_binary(), "--schema-only", "--no-owner", "--no-privileges", db.name],
        env={**os.environ, **db.libpq_env()},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise pgdb.Problem(f"pg_dump of {db.name!r} failed:\n{done.stderr}")
    return normalise(done.stdout)


def migrate(db: pgdb.Database, *target: str, old_path: bool = False) -> str:
    """``manage.py migrate django_pgqueue [target]`` on ``db`` (the test settings, in a new
    process); its output, which names each migration applied. ``old_path``: with the
    migrations but the squash (``tests/migrations_without_squash``), so 0001-0011 run one by
    one on any Django."""
    env = {**os.environ, **db.libpq_env(), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env["PGQUEUE_MIGRATIONS_WITHOUT_SQUASH"] = "1" if old_path else "0"
    env.pop("DATABASE_URL", None)  # tests.settings reads PG* without it
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "django_pgqueue", *target, "--noinput"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise pgdb.Problem(f"migrate {' '.join(target)} failed on {db.name!r}:\n{done.stderr}")
    return done.stdout


@contextlib.contextmanager
def new_database(server: pgdb.Database, name: str) -> Iterator[pgdb.Database]:
    """An empty database ``name`` on ``server`` (dropped first if a failed run left it), dropped
    afterwards."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with server.connect(dbname="postgres") as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield dataclasses.replace(server, name=name)
    finally:
        with server.connect(dbname="postgres") as conn:
            conn.execute(drop)


def latest_migration() -> str:
    return max(p.stem for p in MIGRATIONS.glob("[0-9]*.py") if "_squashed_" not in p.stem)


def render(schema: str) -> str:
    """The text of ``schema.sql``: a header, then the normalised schema."""
    return (
        f"-- The queue's schema after migration {latest_migration()}: every pgqueue_* object.\n"
        "-- Generated: pg_dump --schema-only of a newly migrated database, normalised by\n"
        "-- scripts/schema.py. Do not edit; after adding a migration, run `make schema`.\n"
        "\n" + schema
    )


def differences(expected: str, actual: str) -> str:
    return "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            "django_pgqueue/sql/schema.sql",
            "the migrations' schema",
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, don't write")
    args = parser.parse_args(argv)
    try:
        server = pgdb.resolve("postgres", create=False)
        with new_database(server, f"pgqueue_schema_{os.getpid()}") as db:
            migrate(db)
            text = render(dump(db))
    except pgdb.Problem as exc:
        print(exc, file=sys.stderr)
        return 2
    current = SCHEMA_FILE.read_text() if SCHEMA_FILE.exists() else ""
    if args.check:
        if current != text:
            print(differences(current, text) + f"\nOut of date: {REGENERATE}.", file=sys.stderr)
            return 1
        print(f"{SCHEMA_FILE.relative_to(ROOT)} is up to date.")
        return 0
    SCHEMA_FILE.write_text(text)
    state = "unchanged" if current == text else "written"
    print(f"{SCHEMA_FILE.relative_to(ROOT)} {state} ({latest_migration()}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
