"""The tools some tests need (scripts/provision.py, tests/tools.py): a missing one skips its
tests with one loud line, never an error, and fails the run under CI.

The machine running this suite has PgBouncer and Chromium; their absence is faked by pointing
``PGQUEUE_TEST_PGBOUNCER`` / ``PGQUEUE_TEST_CHROMIUM`` at a path with nothing there, in a pytest
subprocess running a tiny test file. Nothing is uninstalled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import provision

ROOT = Path(__file__).resolve().parent.parent

TINY_TESTS = """
def test_needs_pgbouncer(pgbouncer_binary):
    assert pgbouncer_binary

def test_needs_chromium(chromium_binary):
    assert chromium_binary

def test_needs_chromium_too(chromium_binary):
    assert chromium_binary

def test_needs_nothing():
    pass
"""


def run_tiny_suite(tmp_path: Path, ci: bool, **tools: str) -> subprocess.CompletedProcess[str]:
    test_file = tmp_path / "test_tiny.py"
    test_file.write_text(TINY_TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", *tools)}
    env.update(tools, PYTHONPATH=str(ROOT))
    if ci:
        env["CI"] = "true"
    config = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.tools", "-q", *config, str(test_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def missing_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("MISSING TOOL:")]


@pytest.fixture
def absent(tmp_path: Path) -> dict[str, str]:
    return {
        "PGQUEUE_TEST_PGBOUNCER": str(tmp_path / "no-pgbouncer"),
        "PGQUEUE_TEST_CHROMIUM": str(tmp_path / "no-chromium"),
    }


def test_missing_tools_skip_their_tests_with_one_line_each(tmp_path, absent):
    result = run_tiny_suite(tmp_path, ci=False, **absent)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed, 3 skipped" in output
    assert "error" not in output.lower()
    assert missing_lines(output) == [
        "MISSING TOOL: 2 tests skipped (the browser tests): Chromium is not installed. Install "
        "it: sudo apt-get install chromium chromium-driver (make test installs it where it may "
        "run apt-get: scripts/provision.py)",
        "MISSING TOOL: 1 tests skipped (the PgBouncer tests): PgBouncer is not installed. "
        "Install it: sudo apt-get install pgbouncer (make test installs it where it may run "
        "apt-get: scripts/provision.py)",
    ]


def test_under_ci_a_missing_tool_fails_the_run(tmp_path, absent):
    pgbouncer = absent["PGQUEUE_TEST_PGBOUNCER"]
    result = run_tiny_suite(tmp_path, ci=True, PGQUEUE_TEST_PGBOUNCER=pgbouncer)
    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, output
    assert missing_lines(output) == [
        "MISSING TOOL: 1 tests skipped (the PgBouncer tests): PgBouncer is not installed. "
        "Install it: sudo apt-get install pgbouncer (CI=true: a missing tool fails the run)"
    ]


def test_present_tools_run_their_tests_even_under_ci(tmp_path):
    fake = tmp_path / "tool"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    tools = {"PGQUEUE_TEST_PGBOUNCER": str(fake), "PGQUEUE_TEST_CHROMIUM": str(fake)}
    result = run_tiny_suite(tmp_path, ci=True, **tools)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "4 passed" in output
    assert missing_lines(output) == []


def test_provision_installs_what_is_missing_when_apt_get_may_run(monkeypatch, capsys):
    installed: list[tuple[list[str], list[str]]] = []
    monkeypatch.setattr(provision, "find", lambda t: None if t is provision.PGBOUNCER else "/x")
    monkeypatch.setattr(provision, "apt_prefix", lambda: ["sudo", "-n"])
    monkeypatch.setattr(provision, "install", lambda p, pre: installed.append((p, pre)) or True)
    assert provision.main() == 0
    assert installed == [(["pgbouncer"], ["sudo", "-n"])]


def test_provision_only_says_what_is_missing_when_apt_get_may_not_run(monkeypatch, capsys):
    monkeypatch.setattr(provision, "find", lambda tool: None)
    monkeypatch.setattr(provision, "apt_prefix", lambda: None)
    monkeypatch.setattr(provision, "install", lambda p, pre: pytest.fail("installed"))
    assert provision.main() == 0
    assert capsys.readouterr().err == (
        "[provision] PgBouncer, Chromium, Prometheus, iproute2 and nftables missing and "
        "apt-get cannot run here without a password: their tests will be skipped "
        "(sudo apt-get install pgbouncer chromium chromium-driver prometheus iproute2 "
        "nftables).\n"
    )


def test_provision_finds_nothing_at_an_override_that_is_not_an_executable(monkeypatch, tmp_path):
    monkeypatch.setenv(provision.PGBOUNCER.env, str(tmp_path / "nothing"))
    assert provision.find(provision.PGBOUNCER) is None
    monkeypatch.setenv(provision.PGBOUNCER.env, str(tmp_path))  # a directory
    assert provision.find(provision.PGBOUNCER) is None
