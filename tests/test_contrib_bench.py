"""``django_pgqueue.contrib.bench`` is an optional app: without it in ``INSTALLED_APPS`` a
project has no benchmark or chaos command, and what a worker or the admin imports never
reaches it (with it installed, only its app module). Real processes, a few seconds."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRIB = ROOT / "django_pgqueue" / "contrib"
TOOL_COMMANDS = ("pgqueue_bench", "pgqueue_chaos")

#: What a worker run and the admin import.
RUNTIME_IMPORTS = (
    "django_pgqueue.worker",
    "django_pgqueue.worker.supervisor",
    "django_pgqueue.worker.loop",
    "django_pgqueue.management.commands.run_jobs",
    "django_pgqueue.admin",
    "tests.urls",  # the admin's URLs, the dashboard's
)


def python(code: str, settings: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": settings},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def help_commands(settings: str) -> set[str]:
    """The command names ``manage.py help`` lists (``python -m django`` is the same utility)."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "help", f"--settings={settings}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Note that only Django core commands are listed" not in done.stderr  # settings loaded
    return {line.strip() for line in done.stdout.splitlines() if line.startswith("    ")}


def test_help_lists_the_tools_only_where_the_app_is_installed():
    without = help_commands("tests.runtime_settings")
    assert "run_jobs" in without and "pgqueue_status" in without
    assert not without & set(TOOL_COMMANDS)
    assert set(TOOL_COMMANDS) <= help_commands("tests.settings")


CONTRIB_MODULES = (
    "import sys, django, importlib\n"
    "django.setup()\n"
    f"for name in {RUNTIME_IMPORTS!r}: importlib.import_module(name)\n"
    "print(sorted(m for m in sys.modules if m.startswith('django_pgqueue.contrib')))\n"
)


def test_a_worker_and_the_admin_import_nothing_of_it():
    assert python(CONTRIB_MODULES, "tests.runtime_settings").strip() == "[]"


def test_installed_it_costs_the_worker_only_its_app_module():
    # Django imports an installed app's package and its apps.py; the package imports nothing
    # else, and its jobs live in `workload`, which the worker's autodiscovery of `jobs` misses.
    assert python(CONTRIB_MODULES, "tests.settings").strip() == repr(
        [
            "django_pgqueue.contrib",
            "django_pgqueue.contrib.bench",
            "django_pgqueue.contrib.bench.apps",
        ]
    )


def imports(path: Path, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``path`` imports anywhere: at the top, inside functions
    and under ``if TYPE_CHECKING:`` alike."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def test_no_import_cycle_in_it_not_even_for_types():
    modules = {}
    for path in CONTRIB.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    assert "django_pgqueue.contrib.bench.run" in modules
    known = set(modules)
    # A package importing its own submodules (to re-export them) is not a cycle.
    graph = {
        name: {dep for dep in imports(path, known) if not dep.startswith(name + ".")}
        for name, path in modules.items()
    }
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)
