"""The package's shape, as docs/development.md describes it, kept by tests."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

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
    commands never import ``django_pgqueue.bench`` (a tool, not part of the runtime)."""
    runtime = [
        name
        for name in modules()
        if not name.startswith("django_pgqueue.bench")
        and not name.startswith("django_pgqueue.migrations")
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
        "print(sorted(m for m in sys.modules if m.startswith('django_pgqueue.bench')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert len(runtime) > 40  # the worker, the admin, the commands... were all imported
