"""Every admin URL the demo prints and the docs show opens (issue 36: the dead-jobs link
was a 400), and the job list's links from before its status filter still work."""

from __future__ import annotations

import re

import pytest
from django.utils.http import urlencode

from tests.docsnippets import ROOT
from tests.test_admin import CHANGELIST, make

pytestmark = pytest.mark.django_db

# The files that show or print admin URLs to a person.
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "scripts").glob("*.py")),
    *sorted(p for p in (ROOT / "example_project").rglob("*") if p.suffix in (".py", ".html")),
]
# A URL after "POST " is an example of a refused request (docs/reliability.md), not a link.
ADMIN_URL = re.compile(r"(?<!POST )/admin/django_pgqueue/[^\s`)>'\"{}]*")


def shown_admin_urls() -> list[str]:
    found = {url for path in SOURCES for url in ADMIN_URL.findall(path.read_text())}
    return sorted(found)


URLS = shown_admin_urls()


def test_the_demo_and_the_docs_show_admin_urls():
    assert "/admin/django_pgqueue/job/" in URLS
    assert any("dead" in url for url in URLS)  # the demo's dead-jobs link


@pytest.mark.parametrize("url", URLS)
def test_every_admin_url_shown_opens(admin_client, url):
    make("dead")
    response = admin_client.get(url)
    assert response.status_code in (200, 302), (url, response.status_code)
    if response.status_code == 302:
        assert admin_client.get(response["Location"]).status_code == 200


def test_status_exact_from_before_redirects_to_the_status_filter(admin_client):
    dead, pending = make("dead"), make("pending")
    response = admin_client.get(f"{CHANGELIST}?{urlencode({'status__exact': 'dead', 'q': 'x'})}")
    assert response.status_code == 302
    assert response["Location"] == f"{CHANGELIST}?q=x&status=dead"
    followed = admin_client.get(f"{CHANGELIST}?status__exact=dead", follow=True)
    assert followed.status_code == 200
    listed = followed.content.decode()
    assert f'value="{dead.pk}"' in listed and f'value="{pending.pk}"' not in listed


def test_another_field_lookup_is_still_refused(admin_client):
    assert admin_client.get(f"{CHANGELIST}?status__regex=d").status_code == 400
