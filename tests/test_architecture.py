"""The package's shape, as docs/development.md describes it, kept by tests."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import django

PACKAGE = Path(__file__).resolve().parent.parent / "django_pgqueue"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def top_level_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of the package imported when ``path`` is imported (not inside functions or
    ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in ast.walk(node) if not isinstance(node, ast.FunctionDef) else []:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                base = child.module
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    names.add(full if full in known else base)
            elif isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
    return {n for n in names if n in known}


def test_no_import_cycles_in_the_package():
    known = modules()
    graph = {name: top_level_imports(path, known) for name, path in known.items()}
    # A package imports its own submodules through __init__: that is not a cycle.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not d.startswith(name + ".")}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_runtime_does_not_import_the_benchmark():
    """``import django_pgqueue``, the app's start-up, the worker, the admin and the other
    commands never import ``django_pgqueue.contrib.bench`` (a tool, not part of the runtime)."""
    runtime = [
        name
        for name in modules()
        if not name.startswith("django_pgqueue.contrib.bench")
        and not name.startswith("django_pgqueue.migrations")
        # The django.tasks backend needs django.tasks (Django 6.0+): on 5.2 it refuses import.
        and (django.VERSION >= (6, 0) or not name.startswith("django_pgqueue.tasks"))
        and name
        not in (
            "django_pgqueue.management.commands.pgqueue_bench",
            "django_pgqueue.management.commands.pgqueue_chaos",
        )
    ]
    code = (
        "import sys, django\n"
        "import django_pgqueue\n"
        "django.setup()\n"
        "import importlib\n"
        f"for name in {runtime!r}: importlib.import_module(name)\n"
        "import tests.urls\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_pgqueue.contrib.bench')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.runtime_settings"},
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert len(runtime) > 40  # the worker, the admin, the commands... were all imported


# ----- size, SQL and statuses --------------------------------------------------------------

MAX_LINES = 400


def package_sources(*, migrations: bool = False) -> dict[str, Path]:
    return {
        name: path
        for name, path in modules().items()
        if migrations or not name.startswith("django_pgqueue.migrations")
    }


def test_no_module_is_over_400_lines():
    long = {
        name: n
        for name, path in package_sources().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these by idea (docs/development.md): {long}"


#: Where SQL may run: the operations, the worker's connection wrapper (it opens cursors for
#: them) and the benchmark, a tool outside the runtime that measures the server itself.
SQL_RUNNERS = ("django_pgqueue.operations", "django_pgqueue.worker.connection")
SQL_TOOLS = ("django_pgqueue.contrib.bench",)
#: Calls that run SQL text or open a cursor to run it.
SQL_CALLS = {"execute", "executemany", "cursor", "raw", "extra", "RawSQL", "copy"}


def sql_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in SQL_CALLS:
            found.append(f"{path.name}:{node.lineno} {ast.unparse(func)}(...)")
    return found


def test_sql_is_executed_only_by_operations():
    offenders = {}
    for name, path in package_sources().items():
        if name.startswith(SQL_RUNNERS + SQL_TOOLS):
            continue
        calls = sql_calls(path)
        if calls:
            offenders[name] = calls
    assert not offenders, f"run SQL through django_pgqueue.operations: {offenders}"


def test_the_guards_see_what_they_must(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "with connection.cursor() as c:\n"
        "    c.execute(\"UPDATE pgqueue_job SET status = 'dead'\")\n"
        "q = Q(RawSQL('true', []))\n"
        "jobs.filter(status='pending')\n"
    )
    calls = sql_calls(sample)
    assert [call.split(" ", 1)[1] for call in calls] == [
        "connection.cursor(...)",
        "c.execute(...)",
        "RawSQL(...)",
    ]
    assert [
        found.split(":")[1].split(" ")[0] for found in raw_statuses(sample, status_words())
    ] == [
        "2",
        "4",
    ]


def status_words() -> set[str]:
    from django_pgqueue import states

    words: set[str] = set()
    for enum in (
        states.JobStatus,
        states.Attempt,
        states.Event,
        states.WorkerState,
        states.QueueState,
    ):
        words.update(member.value for member in enum)
    return words


def raw_statuses(path: Path, words: set[str]) -> list[str]:
    """String literals that are a status (``"dead"``), or spell one in SQL (``'dead'``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in words or any(f"'{word}'" in text for word in words):
                found.append(f"{path.name}:{node.lineno} {text[:60]!r}")
    return found


def test_statuses_are_names_outside_states_py():
    words = status_words()
    offenders = {}
    for name, path in package_sources().items():
        if name == "django_pgqueue.states":
            continue
        found = raw_statuses(path, words)
        if found:
            offenders[name] = found
    assert not offenders, f"use django_pgqueue.states: {offenders}"


def test_templates_compare_statuses_with_values_they_are_given():
    words = status_words()
    offenders = []
    for path in (PACKAGE / "templates").rglob("*.html"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(f'"{word}"' in line and "==" in line for word in words):
                offenders.append(f"{path.name}:{number}")
    assert not offenders, offenders
