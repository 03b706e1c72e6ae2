"""Test settings: PostgreSQL from DATABASE_URL, else the libpq PG* variables, else local."""

from __future__ import annotations

import os

import environ

env = environ.Env()

SECRET_KEY = "django_pgqueue-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if "DATABASE_URL" in os.environ:
    DATABASES = {"default": env.db("DATABASE_URL")}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": env("PGDATABASE", default="pgqueue"),
            "USER": env("PGUSER", default=""),
            "PASSWORD": env("PGPASSWORD", default=""),
            "HOST": env("PGHOST", default="127.0.0.1"),
            "PORT": env("PGPORT", default="5432"),
        }
    }
DATABASES["default"]["TEST"] = {"NAME": env("PGQUEUE_TEST_DATABASE", default="pgqueue_test")}
# A second database on the same server, for the tests of a dedicated queue database
# (tests/test_queue_database.py; pytest-django makes its test database only when they run).
# Their subprocesses get its test database's name in PGQUEUE_QUEUE_DATABASE_NAME.
DATABASES["queue"] = {
    **DATABASES["default"],
    "NAME": env("PGQUEUE_QUEUE_DATABASE_NAME", default=DATABASES["default"]["NAME"]),
    "TEST": {
        "NAME": env(
            "PGQUEUE_TEST_QUEUE_DATABASE", default=f"{DATABASES['default']['TEST']['NAME']}_queue"
        )
    },
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgqueue",
    # pgqueue_bench and pgqueue_chaos (tests/runtime_settings.py leaves it out).
    "django_pgqueue.contrib.bench",
    "tests.testapp",
]
# Apps a test writes in a temporary directory for its worker subprocesses (test_worker_reload.py).
INSTALLED_APPS += env.list("PGQUEUE_TEST_EXTRA_APPS", default=[])

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"

# The admin tests make a superuser each: the default hasher (PBKDF2, a million rounds) costs
# 0.3 s of CPU per user, a minute of the suite. Nothing here tests password strength.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Fast retries in tests; each test overrides what it checks.
PGQUEUE_BACKOFF_BASE = 0.0
PGQUEUE_BACKOFF_JITTER = 0.0

# The old migration path, without the squash (scripts/schema.py, tests/test_migrations_frozen.py).
if os.environ.get("PGQUEUE_MIGRATIONS_WITHOUT_SQUASH") == "1":
    MIGRATION_MODULES = {"django_pgqueue": "tests.migrations_without_squash"}

# Worker subprocesses started by tests get their timing settings from the environment.
for _name, _cast in {
    "VISIBILITY_TIMEOUT": float,
    "HEARTBEAT_INTERVAL": float,
    "POLL_INTERVAL": float,
    "BACKOFF_BASE": float,
    "BACKOFF_MAX": float,
    "BACKOFF_JITTER": float,
    "SHUTDOWN_TIMEOUT": float,
    "RETENTION": float,
    "REPAIR_INTERVAL": float,
    "BATCH_SIZE": int,
    # run_jobs' probe port (pgqueue_bench runs with and without it: docs/performance.md).
    "PROBE_PORT": int,
}.items():
    if f"PGQUEUE_{_name}" in os.environ:
        globals()[f"PGQUEUE_{_name}"] = _cast(os.environ[f"PGQUEUE_{_name}"])
if "PGQUEUE_LISTEN" in os.environ:
    PGQUEUE_LISTEN = os.environ["PGQUEUE_LISTEN"] == "1"
if "PGQUEUE_PREPARED_STATEMENTS" in os.environ:
    PGQUEUE_PREPARED_STATEMENTS = os.environ["PGQUEUE_PREPARED_STATEMENTS"] == "1"

# Worker subprocesses of tests that check a line's level print it (PGQUEUE_TEST_LOG_LEVELS=1).
_CONSOLE = {"class": "logging.StreamHandler"}
if os.environ.get("PGQUEUE_TEST_LOG_LEVELS") == "1":
    _CONSOLE["formatter"] = "levels"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"levels": {"format": "%(levelname)s %(message)s"}},
    "handlers": {"console": _CONSOLE},
    "loggers": {"django_pgqueue": {"handlers": ["console"], "level": "INFO"}},
}
