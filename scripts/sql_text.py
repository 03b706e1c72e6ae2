"""django_pgqueue/sql/text/<module>.sql: every statement of ``django_pgqueue.sql``, whole.

    python scripts/sql_text.py           write the files again (``make sql``), after changing SQL
    python scripts/sql_text.py --check   exit 1 and show the difference if one is not up to date

The statements are built in ``django_pgqueue/sql/*.py`` from fragments; these files show each
one as the module's constant holds it, to read it whole. One file per module of the package
(its ``__init__`` aside), each statement under a ``-- name: CONSTANT`` header, in source order.

A statement is a name assigned at the module's top level (not imported), public (the private
``_NAMES`` are the fragments and templates the public ones are built from) and in capitals,
whose value is a str that holds whitespace and starts with a SQL verb (``VERBS``): table
names, channels and conditions (``KWARGS_HAS_VALUE``) are not statements. A tuple, list or
dict of such strings gives one statement per item (``LOOSE_QUEUES[0]``, ``LISTEN['pgqueue']``).
Statements that functions build from their arguments are not here.

The text is dedented, trailing whitespace is stripped, leading and trailing blank lines are
dropped and a run of blank lines becomes one: only whitespace between tokens changes (a
statement with a line break inside a quoted literal is written as it is).
``tests/test_sql_text.py`` keeps the files up to date. Imports only the package (no settings,
no database).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import pkgutil
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: scripts/ is sys.path[0], not the project
    sys.path.insert(0, str(ROOT))

PACKAGE = "django_pgqueue.sql"
TEXT_DIR = ROOT / "django_pgqueue" / "sql" / "text"
REGENERATE = "run `make sql` (python scripts/sql_text.py) and commit the files"
#: The first word of a statement.
VERBS = (
    "ALTER", "ANALYZE", "CALL", "COPY", "CREATE", "DELETE", "DROP", "EXPLAIN", "INSERT", "LISTEN",
    "LOCK", "MERGE", "NOTIFY", "RESET", "SELECT", "SET", "SHOW", "TRUNCATE", "UNLISTEN", "UPDATE",
    "VACUUM", "VALUES", "WITH",
)  # fmt: skip
_VERB = re.compile(rf"({'|'.join(VERBS)})\b", re.IGNORECASE)
_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")
# What whitespace must not be touched in: quoted literals and identifiers, dollar quotes. The
# comments are matched so that an apostrophe in one opens no literal.
_QUOTED = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\$\w*\$).*?\1", re.DOTALL
)


def modules() -> list[ModuleType]:
    """Every module of ``django_pgqueue.sql``, by name."""
    package = importlib.import_module(PACKAGE)
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__))
    return [importlib.import_module(f"{PACKAGE}.{name}") for name in names]


def short_name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[1]


def is_statement(value: object) -> bool:
    if not isinstance(value, str):
        return False
    text = value.strip()
    return bool(_VERB.match(text)) and any(c.isspace() for c in text)


def assigned_names(module: ModuleType) -> list[str]:
    """The names the module's own source assigns at its top level, in order."""
    assert module.__file__
    tree = ast.parse(Path(module.__file__).read_text(), module.__file__)
    names: list[str] = []
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else []
        )
        names += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in names]
    return names


def statements(module: ModuleType) -> list[tuple[str, str]]:
    """``(name, text)`` of each statement of ``module``, in source order (the text as is)."""
    found = []
    for name in assigned_names(module):
        if not _CONSTANT.fullmatch(name):
            continue
        value = getattr(module, name)
        items: list[tuple[str, object]] = [(name, value)]
        if isinstance(value, tuple | list):
            items = [(f"{name}[{i}]", item) for i, item in enumerate(value)]
        elif isinstance(value, dict):
            items = [(f"{name}[{key!r}]", item) for key, item in value.items()]
        found += [(label, item) for label, item in items if isinstance(item, str)]
    return [(label, text) for label, text in found if is_statement(text)]


def literals(sql: str) -> list[str]:
    """The quoted literals and identifiers of ``sql``, as written (comments skipped)."""
    found = (match.group() for match in _QUOTED.finditer(sql))
    return [text for text in found if not text.startswith(("--", "/*"))]


def readable(sql: str) -> str:
    """``sql`` for reading: dedented, no trailing whitespace, no run of blank lines."""
    lines = [line.rstrip() for line in textwrap.dedent(sql).strip("\n").splitlines()]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    # Whitespace inside a literal is part of it: such a statement stays as it is.
    return text if literals(text) == literals(sql) else sql.strip()


def render(module: ModuleType) -> str:
    """The text of ``<module>.sql``."""
    blocks = [f"-- name: {name}\n{readable(sql)}\n" for name, sql in statements(module)]
    header = (
        f"-- {module.__name__}: each statement whole, as its constant holds it (whitespace\n"
        "-- aside). Generated by scripts/sql_text.py: do not edit; after changing a statement\n"
        "-- in the module, run `make sql`.\n"
    )
    body = "\n".join(blocks) if blocks else "-- (no statement: the module holds fragments only)\n"
    return f"{header}\n{body}"


def rendered() -> dict[str, str]:
    """File name -> the text it should hold, for every module."""
    return {f"{short_name(module)}.sql": render(module) for module in modules()}


def parse(text: str) -> list[tuple[str, str]]:
    """``(name, text)`` of each statement of a ``<module>.sql`` file."""
    parts = re.split(r"^-- name: (.+)\n", text, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1].strip("\n")) for i in range(1, len(parts), 2)]


def written() -> dict[str, str]:
    """File name -> its text, for every ``.sql`` file in ``sql/text/``."""
    return {path.name: path.read_text() for path in sorted(TEXT_DIR.glob("*.sql"))}


def differences(current: dict[str, str], expected: dict[str, str]) -> str:
    """A unified diff from the files to what they should be (a missing file is empty, a stale
    one should be)."""
    out: list[str] = []
    for name in sorted(current.keys() | expected.keys()):
        path = f"django_pgqueue/sql/text/{name}"
        old, new = current.get(name, ""), expected.get(name, "")
        out += difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            path if name in current else "/dev/null",
            f"{path} (rendered)" if name in expected else "/dev/null (no such module)",
        )
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, don't write")
    args = parser.parse_args(argv)
    expected, current = rendered(), written()
    where = TEXT_DIR.relative_to(ROOT)
    if args.check:
        if current != expected:
            print(f"{differences(current, expected)}\nOut of date: {REGENERATE}.", file=sys.stderr)
            return 1
        print(f"{where}/ is up to date ({len(expected)} files).")
        return 0
    TEXT_DIR.mkdir(exist_ok=True)
    changed = [name for name in expected if current.get(name) != expected[name]]
    for name in changed:
        (TEXT_DIR / name).write_text(expected[name])
    stale = sorted(current.keys() - expected.keys())
    for name in stale:
        (TEXT_DIR / name).unlink()
    count = sum(len(parse(text)) for text in expected.values())
    print(
        f"{where}/: {len(expected)} files, {count} statements; "
        f"written: {', '.join(changed) or 'none'}; removed: {', '.join(stale) or 'none'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
