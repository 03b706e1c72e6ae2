"""The system tools some tests need (PgBouncer, Chromium): found, or their tests skipped loudly.

``scripts/provision.py`` lists the tools and installs them where it may (``make test`` runs it
first). A test that needs one asks for its fixture (``pgbouncer_binary``, ``chromium_binary``);
when the tool is missing, the test is skipped, never an error, and pytest ends with one line
per missing tool naming the package to install. Under CI (``CI=true``, as ``.ci/run`` sets)
such a skip fails the run: CI installs every tool, so a missing one is a broken CI.

tests/conftest.py imports the fixtures and hooks below; a pytest run outside ``tests/`` loads
them with ``-p tests.tools`` (tests/test_tools.py does, to prove the missing-tool path).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from scripts import provision
from scripts.provision import Tool

#: The tools found missing in this session (by the fixtures below).
_missing: set[Tool] = set()


def require(tool: Tool) -> str:
    """The tool's executable; skips the test when it is missing."""
    path = provision.find(tool)
    if path is None:
        _missing.add(tool)
        pytest.skip(skip_reason(tool))
    return path


def skip_reason(tool: Tool) -> str:
    return f"{tool.name} is not installed ({tool.install_hint()})"


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


@pytest.fixture(scope="session")
def pgbouncer_binary() -> str:
    """Debian's pgbouncer (tests/pgbouncer.py runs it)."""
    return require(provision.PGBOUNCER)


@pytest.fixture(scope="session")
def chromium_binary() -> str:
    """The system's Chromium, for Playwright (tests/test_admin_browser.py)."""
    return require(provision.CHROMIUM)


@pytest.fixture(scope="session")
def promtool_binary() -> str:
    """Debian's promtool (tests/test_monitoring.py); ``prometheus`` is next to it."""
    return require(provision.PROMETHEUS)


@pytest.fixture(scope="session")
def netns_tools() -> tuple[str, str]:
    """``ip`` and ``nft``, for workers on separate hosts (tests/hosts.py). Network namespaces
    need root: without it the tests are skipped, except under CI, where that fails."""
    tools = require(provision.IPROUTE), require(provision.NFTABLES)
    if os.geteuid() != 0:
        if under_ci():
            pytest.fail("the hosts tests need root (network namespaces), and CI runs as root")
        pytest.skip("the hosts tests need root (network namespaces)")
    return tools


def _skipped_per_tool(stats: dict[str, list[Any]]) -> Counter[Tool]:
    counts: Counter[Tool] = Counter()
    for report in stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        for tool in _missing:
            if skip_reason(tool) in reason:
                counts[tool] += 1
    return counts


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    counts = _skipped_per_tool(terminalreporter.stats)
    for tool in sorted(_missing, key=lambda t: t.name):
        why = (
            "CI=true: a missing tool fails the run"
            if under_ci()
            else "make test installs it where it may run apt-get: scripts/provision.py"
        )
        terminalreporter.write_line(
            f"MISSING TOOL: {counts[tool]} tests skipped ({tool.needed_by}): {tool.name} is "
            f"not installed. Install it: sudo {tool.install_hint()} ({why})",
            red=True,
            bold=True,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _missing and under_ci() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
