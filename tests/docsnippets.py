"""The Python code blocks of README.md and docs/*.md, for the tests that check them.

Every ```python block is preceded by a marker, an HTML comment GitHub doesn't show:

* ``<!-- docs-test: run -->``: the block runs, in order with the page's other running blocks,
  in one namespace per page, against the example project (example_project/shop/tests/
  test_docs.py);
* ``<!-- docs-test: fragment (why) -->``: the block only compiles (a settings excerpt, a
  pytest function, a line that shows an error...);
* ``<!-- docs-test: hidden`` + code + ``-->``: code the reader doesn't need but a running block
  does (a row to act on, an assertion that the block did what the prose says), run in place.

tests/test_docs.py compiles every block and fails on a block without a marker.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# docs/benchmarks/ (the diary) too.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

RUN = "run"
FRAGMENT = "fragment"
HIDDEN = "hidden"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!-- docs-test: (?P<kind>run|fragment)\b[^>]*-->\s*$")
_HIDDEN_START = re.compile(r"^\s*<!-- docs-test: hidden\s*$")


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int  # 1-based line of the code's first line in the page
    kind: str  # RUN, FRAGMENT, HIDDEN, or "" when the block has no marker
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def compiled(self) -> object:
        """The code compiled with the page's name and line numbers, so a traceback points at
        the Markdown line."""
        return compile("\n" * (self.line - 1) + self.code, str(self.page), "exec")


def snippets(page: Path) -> list[Snippet]:
    """Every Python block and hidden block of ``page``, in order."""
    lines = page.read_text().splitlines()
    found: list[Snippet] = []
    marker = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if _HIDDEN_START.match(line):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->")
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            found.append(Snippet(page, i + 2, HIDDEN, code))
            i = end + 1
            continue
        match = _MARKER.match(line)
        if match:
            marker = match["kind"]
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            ticks = fence["ticks"]
            end = next(
                j
                for j in range(i + 1, len(lines))
                if lines[j].strip().startswith(ticks) and not lines[j].strip().strip("`")
            )
            if fence["info"].strip().split(" ")[0] == "python":
                code = textwrap.dedent("\n".join(lines[i + 1 : end]))
                found.append(Snippet(page, i + 2, marker, code))
            marker = ""
            i = end + 1
            continue
        if line.strip():
            marker = ""  # a marker applies to the block right after it
        i += 1
    return found


def all_snippets() -> list[Snippet]:
    return [snippet for page in PAGES for snippet in snippets(page)]


def runnable_pages() -> list[Path]:
    return [page for page in PAGES if any(s.kind == RUN for s in snippets(page))]
