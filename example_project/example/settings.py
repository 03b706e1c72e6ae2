"""Settings for the example project, read from the environment with django-environ.

Every value has a default that works for ``make demo`` on a laptop; set the environment
variable (or put it in ``example_project/.env``) to change it.
"""

from __future__ import annotations

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    env.read_env(BASE_DIR / ".env")

SECRET_KEY = env("SECRET_KEY", default="django-insecure-example-project-only")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "django_pgqueue.admin_site.PgQueueAdminConfig",  # django.contrib.admin, dashboard on the index
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgqueue",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example.urls"
WSGI_APPLICATION = "example.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# PostgreSQL, from DATABASE_URL (e.g. postgres://user:password@host:5432/dbname). The default
# is the database pgqueue_demo on the local server, over its Unix socket, as the current user.
DATABASES = {"default": env.db("DATABASE_URL", default="postgres:///pgqueue_demo")}
DATABASES["default"]["TEST"] = {
    "NAME": env("EXAMPLE_TEST_DATABASE", default="pgqueue_example_test")
}

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Order confirmations and newsletters are printed by the worker that sends them.
_email_backend = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": _email_backend}}
else:
    EMAIL_BACKEND = _email_backend
DEFAULT_FROM_EMAIL = "shop@example.com"

# ----- django_pgqueue (docs/settings.md lists every setting) ------------------------------------
# Retries are quick here so the demo's flaky jobs recover while you watch: 1s, 2s, 4s...
# The library's default is 10s, 20s, 40s... up to an hour.
PGQUEUE_BACKOFF_BASE = env.float("PGQUEUE_BACKOFF_BASE", default=1.0)
PGQUEUE_BACKOFF_JITTER = env.float("PGQUEUE_BACKOFF_JITTER", default=0.3)
# False behind PgBouncer in transaction mode (docs/operations.md).
PGQUEUE_LISTEN = env.bool("PGQUEUE_LISTEN", default=True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_pgqueue": {
            "handlers": ["console"],
            "level": env("PGQUEUE_LOG_LEVEL", default="INFO"),
        },
        "shop": {"handlers": ["console"], "level": "INFO"},
    },
}
