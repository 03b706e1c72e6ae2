# django_pgqueue: the commands a developer needs. `make help` lists them.
#
# Everything runs in ./.venv, made on first use with the newest Python 3.12+ found
# (scripts/find-python; override with `make test PYTHON=/path/to/python3.12`).
# The database comes from scripts/pgdb.py: DATABASE_URL, else the local PostgreSQL server,
# else a private throwaway cluster in .pgdata/. `make test` first installs the other tools some
# tests need (PgBouncer, Chromium, Prometheus, ip, nft) where apt-get may run:
# scripts/provision.py.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
PYTEST_ARGS ?= --durations=40
# Three pytest processes, a module each at a time (a module's fixtures and workers stay in one):
# the suite mostly waits for worker subprocesses and servers, so 2 cores run it ~2.5x faster.
# PYTEST_PARALLEL= (empty) runs it in one process.
PYTEST_PARALLEL ?= -n 3 --dist loadfile
TOX_ARGS ?=

# tox finds python3.12 / python3.13 on PATH: put pyenv's installed versions there.
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
empty :=
space := $(empty) $(empty)
PYENV_BINS := $(subst $(space),:,$(strip $(wildcard $(PYENV_ROOT)/versions/3.1[2-9]*/bin)))
TOX_PATH := $(if $(PYENV_BINS),$(PYENV_BINS):)$(PATH)

.PHONY: help demo test lint format type tox check ci venv dist schema sql db db-url db-stop db-destroy clean

help: ## List the commands
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

demo: $(VENV)/.installed-example ## Run the demo: example project, jobs, workers, then the admin
	@$(PY) scripts/demo.py

test: $(VENV)/.installed-dev ## Run the test suite on the newest Django (what CI runs)
	@$(PY) scripts/provision.py
	@$(PY) scripts/pgdb.py exec -- $(PY) -m pytest $(PYTEST_PARALLEL) -m "not alone" $(PYTEST_ARGS)
	@$(PY) scripts/pgdb.py exec -- $(PY) -m pytest -m alone $(PYTEST_ARGS)

lint: $(VENV)/.installed-dev ## ruff check and ruff format --check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(VENV)/.installed-dev ## Reformat and fix what ruff can
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

type: $(VENV)/.installed-dev ## mypy --strict on django_pgqueue
	$(PY) -m mypy django_pgqueue

tox: $(VENV)/.installed-dev ## The tox matrix: Django 5.2/6.0/6.1 on Python 3.12/3.13, lint, type
	@PATH="$(TOX_PATH)" $(PY) scripts/pgdb.py exec -- $(VENV)/bin/tox $(TOX_ARGS)

check: test lint type ## test + lint + type

ci: ## What CI runs (.ci/run)
	bash .ci/run

venv: $(VENV)/.installed-dev ## Make .venv with the project and its dev tools

dist: $(VENV)/.installed-dev ## Build the sdist and the wheel into dist/ and check them (twine check)
	rm -rf dist build
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	@ls -l dist

schema: $(VENV)/.installed-dev ## Write django_pgqueue/sql/schema.sql again from the migrations (after adding one)
	@$(PY) scripts/schema.py

sql: $(VENV)/.installed-dev ## Write django_pgqueue/sql/text/*.sql again (each statement whole), after changing SQL
	@$(PY) scripts/sql_text.py

db-url: $(VENV)/.installed-example ## Print the DATABASE_URL the tests and the demo use
	@$(PY) scripts/pgdb.py url --database pgqueue_demo

db-stop: ## Stop the private cluster in .pgdata/ (if one was started)
	@if [ -x $(PY) ]; then $(PY) scripts/pgdb.py stop; fi

db-destroy: ## Stop and delete the private cluster in .pgdata/
	@if [ -x $(PY) ]; then $(PY) scripts/pgdb.py destroy; fi

clean: db-destroy ## Remove .venv, .tox, caches and the private cluster
	rm -rf $(VENV) .tox .mypy_cache .ruff_cache .pytest_cache build dist *.egg-info example_project/var

# ----- the virtualenv ---------------------------------------------------------------------------

$(VENV)/.created:
	@if [ -x $(PY) ] && $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		echo "Using the existing $(VENV) ($$($(PY) --version))"; \
	elif [ -e $(VENV) ]; then \
		echo "$(VENV) exists but is not Python 3.12+: remove it (rm -rf $(VENV)) and retry." >&2; \
		exit 1; \
	else \
		python=$$(scripts/find-python); \
		echo "Creating $(VENV) with $$python ($$($$python --version))"; \
		$$python -m venv $(VENV); \
	fi
	@touch $@

# A .venv made before the distribution was renamed has it installed as "django-pgqueue" (the
# name of an unrelated project on the package index): that registration goes first.
$(VENV)/.installed-example: pyproject.toml | $(VENV)/.created
	@$(PIP) uninstall --quiet --yes django-pgqueue 2>/dev/null || true
	@echo "Installing django_pgqueue and the example project's dependencies into $(VENV)..."
	@$(PIP) install --quiet --editable '.[example]'
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/.created
	@$(PIP) uninstall --quiet --yes django-pgqueue 2>/dev/null || true
	@echo "Installing django_pgqueue with its test and dev tools into $(VENV)..."
	@$(PIP) install --quiet --editable '.[dev]'
	@touch $@ $(VENV)/.installed-example
