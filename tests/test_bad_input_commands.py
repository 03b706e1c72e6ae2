"""Bad input to the management commands: refused by argparse (exit status 2) before anything
runs, with the ranges of ``rules.py``; values from rows printed with control characters escaped.

The enqueue edge is in ``test_bad_input.py``, the admin in ``test_bad_input_admin.py``.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import subprocess
from io import StringIO
from pathlib import Path

import django
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import django_pgqueue
from django_pgqueue.models import Job, Worker
from django_pgqueue.printable import PrintableFilter, printable, printable_json
from django_pgqueue.worker import Supervisor
from django_pgqueue.worker.loop import Worker as WorkerLoop
from tests.testapp import jobs
from tests.utils import ROOT, manage, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

#: What no line printed for a person may hold raw.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

BAD_OPTIONS = [
    # run_jobs
    ("run_jobs", "--queue=", "--queue/-q: must not be empty or blank"),
    ("run_jobs", "--queue=   ", "--queue/-q: must not be empty or blank"),
    ("run_jobs", "--queue=" + "q" * 150, "--queue/-q: must be at most 100 characters, got 150"),
    ("run_jobs", "--queue=a\x1b[2Jb", "--queue/-q: must not hold control characters"),
    ("run_jobs", "--shutdown-timeout=-5", "--shutdown-timeout: must be at least 0 and at most"),
    ("run_jobs", "--shutdown-timeout=nan", "--shutdown-timeout: must be finite, got nan"),
    ("run_jobs", "--shutdown-timeout=inf", "--shutdown-timeout: must be finite, got inf"),
    ("run_jobs", "--shutdown-timeout=1e300", "--shutdown-timeout: must be at least 0"),
    ("run_jobs", "--shutdown-timeout=soon", "--shutdown-timeout: must be a number of seconds"),
    ("run_jobs", "--processes=0", "--processes: must be between 1 and 1,000, got 0"),
    ("run_jobs", "--processes=-1", "--processes: must be between 1 and 1,000, got -1"),
    ("run_jobs", "--processes=nan", "--processes: must be a whole number, got 'nan'"),
    ("run_jobs", "--processes=1.5", "--processes: must be a whole number, got '1.5'"),
    ("run_jobs", "--threads=inf", "--threads: must be a whole number, got 'inf'"),
    ("run_jobs", "--threads=1001", "--threads: must be between 1 and 1,000"),
    ("run_jobs", "--batch-size=0", "--batch-size: must be between 1 and 10,000, got 0"),
    ("run_jobs", "--batch-size=-3", "--batch-size: must be between 1 and 10,000"),
    ("run_jobs", "--max-jobs=nan", "--max-jobs: must be a whole number"),
    ("run_jobs", "--max-jobs=-1", "--max-jobs: must be between 1 and"),
    ("run_jobs", "--max-jobs=" + "9" * 5000, "--max-jobs: invalid integer value"),
    ("run_jobs", "--worker-id=", "--worker-id: must not be empty or blank"),
    ("run_jobs", "--worker-id=a\nb", "--worker-id: must not hold control characters"),
    ("run_jobs", "--worker-id=" + "w" * 251, "--worker-id: must be at most 250 characters"),
    # pgqueue_status
    ("pgqueue_status", "--queue=", "--queue: must not be empty or blank"),
    ("pgqueue_status", "--queue=" + "q" * 101, "--queue: must be at most 100 characters"),
    # pgqueue_bench: every numeric option
    ("pgqueue_bench", "--jobs=nan", "--jobs: must be a whole number"),
    ("pgqueue_bench", "--jobs=-1", "--jobs: must be between 1 and 10,000,000, got -1"),
    ("pgqueue_bench", "--processes=inf", "--processes: must be a whole number"),
    ("pgqueue_bench", "--threads=-1", "--threads: must be between 1 and 1,000"),
    ("pgqueue_bench", "--batch-size=nan", "--batch-size: must be a whole number"),
    ("pgqueue_bench", "--single-samples=0", "--single-samples: must be between 1"),
    ("pgqueue_bench", "--pickup-samples=-1", "--pickup-samples: must be between 1"),
    ("pgqueue_bench", "--history-rows=inf", "--history-rows: must be a whole number"),
    ("pgqueue_bench", "--claim-jobs=nan", "--claim-jobs: must be a whole number"),
    ("pgqueue_bench", "--claim-repeats=-1", "--claim-repeats: must be between 1 and 1,000"),
    ("pgqueue_bench", "--memory-jobs=0", "--memory-jobs: must be between 1"),
    ("pgqueue_bench", "--minutes=nan", "--minutes: must be finite, got nan"),
    ("pgqueue_bench", "--minutes=0", "--minutes: must be more than 0 and at most 10080"),
    ("pgqueue_bench", "--rate=inf", "--rate: must be finite, got inf"),
    ("pgqueue_bench", "--rate=-1", "--rate: must be more than 0"),
    ("pgqueue_bench", "--stress-rate=nan", "--stress-rate: must be finite"),
    ("pgqueue_bench", "--job-ms=-5", "--job-ms: must be more than 0"),
    ("pgqueue_bench", "--warmup=nan", "--warmup: must be finite"),
    ("pgqueue_bench", "--clean=-1", "--clean: must be at least 0"),
    ("pgqueue_bench", "--stress=inf", "--stress: must be finite"),
    ("pgqueue_bench", "--recovery=-0.5", "--recovery: must be at least 0"),
    ("pgqueue_bench", "--drain-timeout=nan", "--drain-timeout: must be finite"),
    ("pgqueue_bench", "--sample-seconds=0", "--sample-seconds: must be more than 0"),
    ("pgqueue_bench", "--reader-transaction-seconds=inf", "--reader-transaction-seconds: must"),
    ("pgqueue_bench", "--reader-pause=-1", "--reader-pause: must be at least 0"),
    ("pgqueue_bench", "--readers=0", "--readers: must be between 1 and 1,000"),
    ("pgqueue_bench", "--readers=nan", "--readers: must be a whole number"),
    ("pgqueue_bench", "--phases=,", "--phases: no phase given"),
    # pgqueue_chaos
    ("pgqueue_chaos", "--rate=nan", "--rate: must be finite, got nan"),
    ("pgqueue_chaos", "--rate=0", "--rate: must be more than 0"),
    ("pgqueue_chaos", "--job-ms=inf", "--job-ms: must be finite"),
    ("pgqueue_chaos", "--fault-interval=-1", "--fault-interval: must be more than 0"),
    ("pgqueue_chaos", "--rounds=nan", "--rounds: must be a whole number"),
    ("pgqueue_chaos", "--rounds=101", "--rounds: must be between 1 and 100"),
    ("pgqueue_chaos", "--processes=-1", "--processes: must be between 1 and 1,000"),
    ("pgqueue_chaos", "--drain-timeout=nan", "--drain-timeout: must be finite"),
    ("pgqueue_bench", "--phases=drain,nope", "--phases: unknown phases nope"),
]


@pytest.mark.parametrize(
    ("command", "option", "message"),
    [pytest.param(*case, id=f"{case[0]} {case[1][:40]!r}") for case in BAD_OPTIONS],
)
def test_bad_option_is_an_argparse_error_before_anything_runs(command, option, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command(command, option, stdout=StringIO(), stderr=StringIO())
    assert not Worker.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["pause", ""], "NAME: must not be empty or blank"),
        (["resume", "   "], "NAME: must not be empty or blank"),
        (["pause", "q" * 101], "NAME: must be at most 100 characters"),
        (["pause", "a\x1b[2J"], "NAME: must not hold control characters"),
        (["limit", "q", "--concurrency=nan"], "--concurrency: must be a whole number"),
        (["limit", "q", "--concurrency=0"], "--concurrency: must be between 1"),
        (["limit", "q", "--rate=inf"], "--rate: "),
        (["limit", "q", "--rate=-1/s"], "--rate: "),
    ],
)
def test_pgqueue_queue_refuses_bad_names_and_limits(arguments, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("pgqueue_queue", *arguments, stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize(
    ("command", "option", "message"),
    [
        BAD_OPTIONS[0],  # run_jobs --queue ''
        BAD_OPTIONS[1],  # run_jobs --queue '   '
        BAD_OPTIONS[2],  # run_jobs --queue q*150
        BAD_OPTIONS[4],  # run_jobs --shutdown-timeout -5
        BAD_OPTIONS[5],  # run_jobs --shutdown-timeout nan
        ("pgqueue_status", "--queue=   ", "--queue: must not be empty or blank"),
        ("pgqueue_bench", "--jobs=inf", "--jobs: must be a whole number"),
    ],
    ids=lambda value: value[:30] if isinstance(value, str) else None,
)
def test_from_the_command_line_a_bad_option_exits_with_status_2(tmp_path, command, option, message):
    log = tmp_path / "out.log"
    with log.open("w") as out:
        code = subprocess.run(
            manage(command, option),
            env=worker_env(),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        ).returncode
    text = log.read_text()
    assert code == 2, text
    assert "usage:" in text
    assert f"error: argument {message}" in text
    assert not Worker.objects.exists()


def test_run_jobs_takes_a_negative_looking_value_as_the_option_s_value(tmp_path):
    """``--shutdown-timeout -5`` (two words) is the same error, not "expected one argument"."""
    log = tmp_path / "out.log"
    with log.open("w") as out:
        code = subprocess.run(
            manage("run_jobs", "--shutdown-timeout", "-5", "--burst"),
            env=worker_env(),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        ).returncode
    assert code == 2
    assert "--shutdown-timeout: must be at least 0 and at most 100 years, got -5" in (
        log.read_text()
    )


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"queues": [""]}, ValueError, "queue must not be empty or blank"),
        ({"queues": "emails"}, TypeError, "queues must be a list of queue names"),
        ({"threads": 0}, ValueError, "threads must be between 1 and 1,000"),
        ({"shutdown_timeout": float("nan")}, ValueError, "shutdown_timeout must be finite"),
        ({"batch_size": True}, TypeError, "batch_size must be an int, not bool"),
        ({"worker_id": "a\x1bb"}, ValueError, "worker_id must not hold control characters"),
    ],
)
def test_the_worker_checks_its_options_with_the_same_rules(options, error, message):
    """``call_command("run_jobs", threads=0)`` bypasses argparse; the worker still refuses."""
    with pytest.raises(error, match=re.escape(message)):
        WorkerLoop(**options)
    with pytest.raises(error, match=re.escape(message)):
        Supervisor(1, **options)
    with pytest.raises(ValueError, match="processes must be between 1 and 1,000, got 0"):
        Supervisor(0)


# ----- values from rows, printed ------------------------------------------------------------

HOSTILE = [
    "clear\x1b[2J\x1b[Hscreen",
    "two\nlines",
    "return\roverwrite",
    "tab\there",
    "csi\x9b31m",
    "del\x7f",
    "bidi\u202eesrever",
    "sep\u2028line",
]


def test_printable_escapes_every_control_character():
    assert printable("clear\x1b[2J") == "clear\\x1b[2J"
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("\x9b\x7f\u202e\u2028") == "\\x9b\\x7f\\u202e\\u2028"
    assert printable("café 😀 zwj👩‍💻") == "café 😀 zwj👩‍💻"
    assert printable("tb\nline \x1b", keep_newlines=True) == "tb\nline \\x1b"
    assert json.loads(printable_json({"k\x7f": "\x1b\x7f"})) == {"k\x7f": "\x1b\x7f"}
    assert "\x7f" not in printable_json("\x7f")


def test_pgqueue_status_escapes_control_characters_in_queue_names():
    for name in HOSTILE:
        Job.objects.create(name="tests.testapp.jobs.add", queue=name)
    Worker.objects.create(
        worker_id="w\x1b[2J",
        hostname="h\nforged",
        pid=1,
        queues=HOSTILE,
        last_seen_at=timezone.now(),
    )
    out = StringIO()
    call_command("pgqueue_status", stdout=out)
    text = out.getvalue()
    assert not CONTROL.search(text), repr(text)
    lines = text.splitlines()
    rows = lines[1 : lines.index("")]  # the header, one line per queue, a blank line
    assert all(len(row.split()) == 11 for row in rows), text  # no broken or forged row
    assert {printable(name) for name in HOSTILE} <= {row.split()[0] for row in rows}

    out = StringIO()
    call_command("pgqueue_status", "--json", stdout=out)
    raw = out.getvalue()
    assert not CONTROL.search(raw), repr(raw)
    report = json.loads(raw)
    assert set(HOSTILE) <= {q["queue"] for q in report["queues"]}
    assert report["workers"][0]["worker_id"] == "w\x1b[2J"


def test_pgqueue_status_queue_filter_takes_a_hostile_name_that_exists():
    """Control characters in ``--queue`` are refused (no queue can be enqueued with them)."""
    Job.objects.create(name="tests.testapp.jobs.add", queue="plain")
    out = StringIO()
    call_command("pgqueue_status", "--queue=plain", "--json", stdout=out)
    assert [q["queue"] for q in json.loads(out.getvalue())["queues"]] == ["plain"]


def test_run_jobs_log_lines_escape_what_a_job_and_its_row_hold(tmp_path):
    """A job's error text and a row's queue name can't clear the screen or forge a log line."""
    jobs.always_fails.using(max_attempts=1).enqueue("\x1b[2Jred\rFORGED")
    Job.objects.create(name="tests.testapp.jobs.add", args=[1, 2], queue="q\x1b[31m\nFORGED")
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        code = subprocess.run(
            manage("run_jobs", "--burst"),
            env=worker_env(),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        ).returncode
    text = log.read_text()
    assert code == 0, text
    assert not CONTROL.search(text), repr(text)
    assert "RuntimeError: \\x1b[2Jred\\rFORGED" in text
    assert "queue=q\\x1b[31m\\nFORGED attempt 1/5 completed" in text
    assert not any(line.startswith("FORGED") for line in text.splitlines())


def test_every_logger_of_the_package_escapes_control_characters():
    """Whatever module logs, its records pass through ``PrintableFilter``."""
    for path in sorted(Path(django_pgqueue.__file__).parent.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        skip = ["migrations", "management.commands"] + (
            ["django_pgqueue.tasks"] if django.VERSION < (6, 0) else []  # django.tasks is 6.0+
        )
        if not any(part in module for part in skip):
            importlib.import_module(module.removesuffix(".__init__"))
    names = [
        name
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.startswith("django_pgqueue.") and isinstance(logger, logging.Logger)
    ]
    assert "django_pgqueue.worker" in names
    assert [
        n for n in names if PrintableFilter not in map(type, logging.getLogger(n).filters)
    ] == []
