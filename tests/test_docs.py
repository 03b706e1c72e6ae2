"""Every Python block of README.md and docs/*.md compiles and says whether it runs.

The blocks marked ``run`` are executed against the example project by
example_project/shop/tests/test_docs.py; the conventions are in tests/docsnippets.py and
docs/development.md ("Docs that run").
"""

from __future__ import annotations

import re

import pytest

from tests.docsnippets import HIDDEN, PAGES, ROOT, RUN, all_snippets, runnable_pages

SNIPPETS = all_snippets()
# The pages that name the admin's list actions.
DOC_PAGES = ("admin.md", "retries.md")


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_every_python_block_compiles(snippet):
    snippet.compiled()


def test_every_python_block_is_marked_run_or_fragment():
    unmarked = [s.where for s in SNIPPETS if not s.kind]
    assert not unmarked, (
        "Mark each ```python block with <!-- docs-test: run --> or "
        f"<!-- docs-test: fragment (why) --> on the line before: {unmarked}"
    )


def test_the_pages_people_copy_from_have_running_blocks():
    running = {page.name for page in runnable_pages()}
    for name in ("README.md", "quickstart.md", "jobs.md", "scheduling.md", "testing.md"):
        assert name in running
    assert len(PAGES) >= 15
    # Hidden code only serves blocks that run.
    for page in {s.page for s in SNIPPETS if s.kind == HIDDEN}:
        assert page in runnable_pages()
    assert sum(s.kind == RUN for s in SNIPPETS) >= 21


def test_the_docs_name_the_admin_actions_as_the_admin_does():
    from django_pgqueue.admin import JobAdmin

    pages = {name: " ".join((ROOT / "docs" / name).read_text().split()) for name in DOC_PAGES}
    for action in JobAdmin.actions:
        label = getattr(JobAdmin, action).short_description
        for name, text in pages.items():
            assert f"**{label}**" in text, f"docs/{name} does not name the action {label!r}"
    buttons = (
        ROOT / "django_pgqueue/templates/admin/django_pgqueue/job/change_form.html"
    ).read_text()
    for button in re.findall(r'value="[a-z-]+">([^<]+)</button>', buttons):
        assert f"**{button}**" in pages["admin.md"], button
