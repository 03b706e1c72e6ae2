"""The docs' runnable Python blocks, run against this project (tests/docsnippets.py says how
blocks are marked; tests/test_docs.py compiles every block)."""

from __future__ import annotations

import pytest

from tests.docsnippets import FRAGMENT, runnable_pages, snippets

PAGES = runnable_pages()


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_page_runs(page):
    """A page's running and hidden blocks run in order in one namespace, like a session."""
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    for snippet in snippets(page):
        if snippet.kind != FRAGMENT:
            exec(snippet.compiled(), namespace)
