"""The package's shape, as docs/development.md describes it, kept by tests."""

from __future__ import annotations

import ast
import itertools
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
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


# ----- imports -----------------------------------------------------------------------------

#: The import circles the package may have, each with its reason.
ALLOWED_CYCLES = {
    frozenset({"django_pgqueue.models", "django_pgqueue.managers"}): (
        "Django's own shape: the models module imports its managers (``objects = "
        "JobManager()``), whose QuerySet is typed with the model (an import under "
        "TYPE_CHECKING)"
    ),
}


def resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The module ``from ... import`` names, relative imports included."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> dict[str, int]:
    """The package's modules that ``name`` imports, with the line of the first import of each:
    every import outside a function, those under ``if TYPE_CHECKING:`` included (a circle
    of type-only imports is still two modules that need each other). Imports inside a function
    run when it is called: they defer model imports, as Django apps do."""
    found: dict[str, int] = {}

    def add(module: str, line: int) -> None:
        if module in known:
            found.setdefault(module, line)

    def visit(nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(node, ast.ImportFrom):
                base = resolve(name, path, node)
                for alias in node.names:
                    # ``from package import module`` imports the module, else the package.
                    full = f"{base}.{alias.name}"
                    add(full if full in known else base, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name, node.lineno)
            else:
                visit(ast.iter_child_nodes(node))

    visit(ast.parse(path.read_text()).body)
    found.pop(name, None)
    return found


def import_graph(known: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    return {name: imports_of(name, path, known) for name, path in known.items()}


def strongly_connected(graph: Mapping[str, Mapping[str, int]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or not (Tarjan's algorithm,
    without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, deps = work[-1]
            for dep in deps:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return groups


def shortest_cycle(start: str, group: set[str], graph: Mapping[str, Mapping[str, int]]) -> list:
    """The shortest circle of imports from ``start`` back to it, within ``group``."""
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for dep in sorted(graph[node]):
            if dep == start:
                return [*paths[node], start]
            if dep in group and dep not in paths:
                paths[dep] = [*paths[node], dep]
                queue.append(dep)
    raise AssertionError(f"{start} is in no circle of {group}")


def import_cycles(known: Mapping[str, Path]) -> list[str]:
    """Each circle of imports but the allowed ones, as lines a reader can follow: the modules
    in the circle, then each import in it with its file and line."""
    graph = import_graph(known)
    problems = []
    for group in strongly_connected(graph):
        if frozenset(group) in ALLOWED_CYCLES:
            continue
        # Show a circle that is not an allowed one where there is one.
        allowed = [members for members in ALLOWED_CYCLES if members <= group]
        starts = sorted(group - set().union(*allowed)) or sorted(group)
        cycle = shortest_cycle(starts[0], group, graph)
        lines = [" -> ".join(cycle)]
        for module, dep in itertools.pairwise(cycle):
            path = known[module].relative_to(PACKAGE.parent)
            lines.append(f"    {path}:{graph[module][dep]} imports {dep}")
        others = sorted(group - set(cycle))
        if others:
            lines.append(f"    (in the same knot: {', '.join(others)})")
        problems.append("\n".join(lines))
    return problems


def test_no_import_cycles_in_the_package():
    """No two modules of the package import each other, directly or through others, counting
    the imports under ``if TYPE_CHECKING:`` (only those inside functions are left out). The one
    exception is Django's models <-> managers (``ALLOWED_CYCLES``)."""
    cycles = import_cycles(modules())
    assert not cycles, "import circles (split by idea, pass callbacks):\n" + "\n".join(cycles)


def test_the_import_guard_sees_type_only_circles_and_not_deferred_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.b import B\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.sub import b\n"
        "def later():\n"
        "    from pkg import c\n"
    )
    (package / "sub" / "b.py").write_text("from .. import a\nclass B: ...\n")
    (package / "c.py").write_text("import pkg.a\n")
    known = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        known[".".join(parts)] = path
    graph = import_graph(known)
    assert graph["pkg.a"] == {"pkg.sub.b": 3}  # not pkg.c: that import waits for a call
    assert graph["pkg.sub.b"] == {"pkg.a": 1}  # a relative import
    assert graph["pkg.sub"] == {"pkg.sub.b": 1}
    assert graph["pkg.c"] == {"pkg.a": 1}
    assert strongly_connected(graph) == [{"pkg.a", "pkg.sub.b"}]
    assert shortest_cycle("pkg.a", {"pkg.a", "pkg.sub.b"}, graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]


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


# ----- SQL and statuses ----------------------------------------------------------------------


def package_sources(*, migrations: bool = False) -> dict[str, Path]:
    return {
        name: path
        for name, path in modules().items()
        if migrations or not name.startswith("django_pgqueue.migrations")
    }


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


# ----- private attributes --------------------------------------------------------------------

#: Private attributes of objects not its own that the package may read or set, each with why.
#: A key ``"_name"`` allows it on any object, ``"receiver._name"`` on that receiver only.
ALLOWED_PRIVATE = {
    "_meta": "Django's model metadata (Model._meta), a documented API despite its underscore",
    "_state": "Django's documented per-instance state (Model._state.adding, ._state.db)",
    "_default_manager": "Django's documented Model._default_manager",
    "os._exit": "leave a forked process at once, without the parent's cleanup (documented)",
    "sys._getframe": "the caller's frame (documented in sys)",
    "_replace": "namedtuple's public API (the underscore only avoids field names)",
    "_asdict": "namedtuple's public API",
    "_fields": "namedtuple's public API",
    "_make": "namedtuple's public API",
    "_return_value": (
        "django.tasks.TaskResult keeps a successful task's return value there and has no "
        "setter: set with object.__setattr__, as Django's own task backends do"
    ),
    "_out": (
        "django.core.management.base.OutputWrapper: the stream it wraps "
        "(pgqueue_bench writes its progress to the real terminal)"
    ),
}

#: Calls that reach an attribute by its name: ``getattr(obj, "_name")``...
BY_NAME = {"getattr", "setattr", "hasattr", "delattr", "__setattr__", "__getattribute__"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(path: Path) -> list[str]:
    """Reads and writes of ``obj._name`` where ``obj`` is not ``self``, ``cls``, ``super()``,
    ``type(self)`` or something the module itself defines (its own class's private class
    attribute), nor an allowed API (``ALLOWED_PRIVATE``); also ``getattr(obj, "_name")``
    and the like."""
    tree = ast.parse(path.read_text())
    own = {"self", "cls"}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own.update(t.id for t in targets if isinstance(t, ast.Name))

    def allowed(receiver: str, name: str) -> bool:
        return name in ALLOWED_PRIVATE or f"{receiver}.{name}" in ALLOWED_PRIVATE

    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in own:
                continue
            text = ast.unparse(receiver)
            if text in ("super()", "type(self)", "type(cls)") or allowed(text, node.attr):
                continue
            found.append((node.lineno, node.col_offset, f"{text}.{node.attr}"))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            name = node.args[1]
            if (
                called in BY_NAME
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and is_private(name.value)
            ):
                receiver = node.args[0]
                text = ast.unparse(receiver)
                if (isinstance(receiver, ast.Name) and receiver.id in own) or allowed(
                    text, name.value
                ):
                    continue
                found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{path.name}:{line} {text}" for line, _, text in sorted(found)]


def test_no_module_reaches_into_another_objects_private_attributes():
    """A part gets what it needs through its constructor or its arguments (GoodJob's Capsule
    wires its parts so): no module reads or sets another object's ``_private`` attribute."""
    offenders = {}
    for name, path in modules().items():
        found = private_reaches(path)
        if found:
            offenders[name] = found
    assert not offenders, f"pass what a part needs, don't reach in: {offenders}"


def test_the_private_guard_sees_what_it_must(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n"
        "class Part:\n"
        "    _shared = 1\n"
        "    def run(self, worker):\n"
        "        self._mine = worker._outcomes\n"
        "        self._other._state = Part._shared + type(self)._shared\n"
        "        worker._buffer = getattr(worker, '_claimed', None)\n"
        "        return job._meta, os._exit, worker.__class__, super()._run()\n"
        "def later(self):\n"
        "    object.__setattr__(result, '_return_value', 1)\n"
        "    object.__setattr__(result, '_private', 1)\n"
        "    other._exit\n"
    )
    assert [found.split(" ", 1)[1] for found in private_reaches(sample)] == [
        "worker._outcomes",
        "worker._buffer",
        "getattr(worker, '_claimed', None)",
        "object.__setattr__(result, '_private', 1)",
        "other._exit",
    ]
