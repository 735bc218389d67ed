"""Atom feeds of new ranked results and of releases/errata (issue 21, item 17)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from django.utils import timezone

from catalog.models import Evaluation, LLMModel, Release
from tests.factories import make_demo

pytestmark = pytest.mark.django_db
ATOM = "{http://www.w3.org/2005/Atom}"


def _entries(client, url: str) -> list[dict[str, str]]:
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("application/atom+xml")
    root = ET.fromstring(response.content)
    return [{"title": e.findtext(f"{ATOM}title"), "summary": e.findtext(f"{ATOM}summary") or "",
             "link": e.find(f"{ATOM}link").get("href")} for e in root.findall(f"{ATOM}entry")]


def test_results_feed_lists_ranked_results_of_published_releases_only(client, fresh_page_cache):
    demo = make_demo(n_models=3)
    draft = Release.objects.create(name="Next draft", slug="next-draft", status=Release.DRAFT)
    secret = LLMModel.objects.create(key="model-on-draft", display_name="Model On Draft")
    Evaluation.objects.create(model=secret, release=draft, is_public=True, scaled_pass_rate=99.0, pass_rate=99.0)
    entries = _entries(client, "/feeds/results.atom")
    titles = " ".join(e["title"] for e in entries)
    ranked = {f"model-{i}" for i in range(3)}
    assert {e["link"].split("/models/", 1)[1].split("/", 1)[0] for e in entries} == ranked
    assert "Model On Draft" not in titles and "Next draft" not in titles
    assert "Partial Model" not in titles  # shown on the board, not ranked (missing snippets)
    assert "reference" not in titles.lower()  # baselines are not ranked
    assert all(e["link"].endswith("?release=v-test") for e in entries)
    assert all(demo.release.name in e["title"] for e in entries)


def test_releases_feed_names_errata_and_escapes_what_people_wrote(client, fresh_page_cache):
    demo = make_demo(n_models=2)
    Release.objects.create(name="Secret draft", slug="secret-draft", status=Release.DRAFT)
    Release.objects.create(
        name="Test release v2", slug="v2", status=Release.PUBLISHED, published_at=timezone.now(), predecessor=demo.release,
        description="<script>alert(1)</script>",
        changelog=[{"release": "v2", "kind": "retired", "paper": "paper-1", "snippet": "multiply",
                    "reason": "test was <b>wrong</b>", "by": "staffer"}])
    entries = _entries(client, "/feeds/releases.atom")
    assert [e["title"] for e in entries][0] == f"Test release v2: errata of {demo.release.name} (1 snippet(s) retired)"
    assert all("Secret draft" not in e["title"] for e in entries)
    summary = entries[0]["summary"]  # an HTML summary: the text people wrote arrives escaped
    assert "<script>" not in summary and "&lt;script&gt;" in summary
    assert "&lt;b&gt;wrong&lt;/b&gt;" in summary and "staffer" not in summary


def test_every_page_links_both_feeds(client, fresh_page_cache):
    make_demo(n_models=2)
    for url in ("/", "/leaderboard/", "/releases/", "/compare/"):
        head = client.get(url).content.decode().split("</head>", 1)[0]
        assert 'rel="alternate" type="application/atom+xml" title="New ranked results" href="/feeds/results.atom"' in head
        assert 'href="/feeds/releases.atom"' in head
