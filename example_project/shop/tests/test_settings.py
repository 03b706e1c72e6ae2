from __future__ import annotations

import environ
from django.core.management import call_command


def test_system_checks_pass():
    call_command("check", "--fail-level", "WARNING")


def test_database_url_syntax_for_a_socket():
    """The syntax scripts/pgdb.py writes for a private cluster's Unix socket."""
    config = environ.Env.db_url_config("postgres://pgqueue@:5432/%2Ftmp%2Fpg%2Frun/pgqueue_demo")
    assert (config["HOST"], config["NAME"], config["USER"], config["PORT"]) == (
        "/tmp/pg/run",
        "pgqueue_demo",
        "pgqueue",
        5432,
    )
