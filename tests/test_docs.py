"""Every Python block of README.md and docs/*.md compiles and says whether it runs; every
relative link between them resolves, anchors included.

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


def test_every_file_a_page_shows_is_shown_as_it_is():
    """A block right after ``<!-- docs-file: PATH -->`` is the whole text of PATH (from the
    repository's root): the page shows the file, and neither can drift from the other."""
    shown = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            match = re.fullmatch(r"<!-- docs-file: (\S+) -->", line.strip())
            if not match:
                continue
            ticks = re.match(r"`{3,}", lines[i + 1])
            assert ticks, f"{page.name}:{i + 2}: a fenced block must follow {line.strip()}"
            end = next(j for j in range(i + 2, len(lines)) if lines[j] == ticks[0])
            block = "\n".join(lines[i + 2 : end]) + "\n"
            path = ROOT / match[1]
            assert block == path.read_text(), f"{page.name}:{i + 3} differs from {match[1]}"
            shown.append(match[1])
    assert "docs/deploy/Dockerfile" in shown and "docs/deploy/compose.yaml" in shown


def anchors(page):
    """GitHub's ids of a page's headings: lower case, punctuation dropped, spaces as hyphens,
    ``-1``, ``-2``... for repeats."""
    found, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for title in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        anchor = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        found.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return found


def test_every_relative_link_and_anchor_in_the_docs_resolves():
    broken = []
    for page in PAGES:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            name, _, anchor = target.partition("#")
            linked = (page.parent / name).resolve() if name else page
            if not linked.exists() or (
                anchor and linked.suffix == ".md" and anchor not in anchors(linked)
            ):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
