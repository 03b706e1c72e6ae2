"""The system tools some tests need besides PostgreSQL, installed where this machine allows it.

    python scripts/provision.py          install what is missing (apt-get), if it may; else say so

``make test`` runs it before pytest, as ``scripts/pgdb.py`` finds or makes PostgreSQL:

* PgBouncer (Debian's ``pgbouncer``) for ``tests/test_pgbouncer.py``;
* Chromium (Debian's ``chromium`` and ``chromium-driver``) for the browser tests, driven by
  Playwright (never ``playwright install``: the system's browser only);
* Prometheus (Debian's ``prometheus``): ``promtool`` checks the alerting rules of
  docs/monitoring/ (``tests/test_monitoring.py``), and ``prometheus`` scrapes a worker's probe
  port (``tests/test_metrics.py``);
* iproute2 (``ip``: network namespaces and veth links) and nftables (``nft``: a link's packets
  dropped) for ``tests/test_hosts.py``, workers on separate hosts (``tests/hosts.py``).

A tool that is missing is installed with ``apt-get`` when that can run without a question:
as root, or through ``sudo -n``. Otherwise nothing is installed and nothing fails: the tests
that need the tool are skipped, and pytest ends with one line per missing tool naming the
package to install (``tests/tools.py``). Under CI (``CI=true``) such a skip fails the run.

This module is the one list of those tools: ``tests/tools.py`` finds them through it. Each can
be pointed elsewhere with an environment variable (``PGQUEUE_TEST_PGBOUNCER``,
``PGQUEUE_TEST_CHROMIUM``: the path of the binary); a path that is not an executable file
counts as missing, which is how the tests prove the missing-tool path on a machine that has
both. Only the standard library: it runs before anything else is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Tool:
    name: str  # for humans
    binary: str  # looked up on PATH
    fallbacks: tuple[str, ...]  # where Debian puts it, when that is not on PATH (/usr/sbin)
    packages: tuple[str, ...]  # the Debian packages that provide it
    env: str  # overrides the path of the binary
    needed_by: str  # the tests that need it

    def install_hint(self) -> str:
        return f"apt-get install {' '.join(self.packages)}"


PGBOUNCER = Tool(
    name="PgBouncer",
    binary="pgbouncer",
    fallbacks=("/usr/sbin/pgbouncer",),
    packages=("pgbouncer",),
    env="PGQUEUE_TEST_PGBOUNCER",
    needed_by="the PgBouncer tests",
)
CHROMIUM = Tool(
    name="Chromium",
    binary="chromium",
    fallbacks=("/usr/bin/chromium",),
    packages=("chromium", "chromium-driver"),
    env="PGQUEUE_TEST_CHROMIUM",
    needed_by="the browser tests",
)
PROMETHEUS = Tool(
    name="Prometheus",
    binary="promtool",
    fallbacks=("/usr/bin/promtool",),
    packages=("prometheus",),
    env="PGQUEUE_TEST_PROMTOOL",
    needed_by="the monitoring tests",
)
IPROUTE = Tool(
    name="iproute2",
    binary="ip",
    fallbacks=("/usr/sbin/ip", "/sbin/ip"),
    packages=("iproute2",),
    env="PGQUEUE_TEST_IP",
    needed_by="the tests of workers on separate hosts",
)
NFTABLES = Tool(
    name="nftables",
    binary="nft",
    fallbacks=("/usr/sbin/nft",),
    packages=("nftables",),
    env="PGQUEUE_TEST_NFT",
    needed_by="the tests of workers on separate hosts",
)
TOOLS = (PGBOUNCER, CHROMIUM, PROMETHEUS, IPROUTE, NFTABLES)


def find(tool: Tool) -> str | None:
    """The tool's executable, or None when it is missing."""
    override = os.environ.get(tool.env)
    candidates = [override] if override else [shutil.which(tool.binary), *tool.fallbacks]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def apt_prefix() -> list[str] | None:
    """How to run apt-get without a question (root, or passwordless sudo); None if we can't."""
    if not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo"):
        probe = subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["sudo", "-n"]
    return None


def log(message: str) -> None:
    print(f"[provision] {message}", file=sys.stderr, flush=True)


def install(packages: list[str], prefix: list[str]) -> bool:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        if subprocess.run([*prefix, *argv], env=env, check=False).returncode != 0:
            return False
    return True


def main() -> int:
    missing = [tool for tool in TOOLS if find(tool) is None]
    if not missing:
        return 0
    packages = [package for tool in missing for package in tool.packages]
    names = " and ".join(
        filter(None, [", ".join(tool.name for tool in missing[:-1]), missing[-1].name])
    )
    prefix = apt_prefix()
    if prefix is None:
        log(
            f"{names} missing and apt-get cannot run here without a password: "
            f"their tests will be skipped (sudo apt-get install {' '.join(packages)})."
        )
        return 0
    log(f"{names} missing: apt-get install {' '.join(packages)}")
    if not install(packages, prefix) or any(find(tool) is None for tool in missing):
        log(f"Could not install {names}: their tests will be skipped.")
    return 0  # never fails `make test`: pytest says what was skipped, and CI fails on it


if __name__ == "__main__":
    sys.exit(main())
