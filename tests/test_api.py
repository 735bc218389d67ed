"""The read API under /api/v1/: must-show figures, 404s, bad parameters, CSV, caching."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from django.core.cache import cache

from catalog.models import LLMModel, Paper, Release
from leaderboard.importers.published import published_import

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"  # as tests/conftest.py
STATS = SHARED / "upstream" / "overall_stats.json"


@pytest.fixture(scope="module")
def published(django_db_setup, django_db_blocker):
    if not STATS.exists():
        pytest.fail(f"../shared/upstream/overall_stats.json is missing (expected at {STATS})")
    with django_db_blocker.unblock():
        result = published_import(path=STATS)
    yield result.release
    with django_db_blocker.unblock():  # remove exactly what the import made
        data = json.loads(STATS.read_text(encoding="utf-8"))
        Release.objects.filter(pk=result.release.pk).delete()
        LLMModel.objects.filter(key__in=list(data["overall_scores"])).delete()
        Paper.objects.filter(paper_id__in=list(data["results"])).delete()


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def api(client):
    def get(url: str, status: int = 200):
        response = client.get(url, HTTP_HOST="localhost")
        assert response.status_code == status, (url, response.content[:300])
        return response

    return get


@pytest.mark.django_db
def test_leaderboard_must_show(published, api):
    data = api("/api/v1/leaderboard").json()
    assert data["release"]["name"] == "v1.0 (published)"
    assert data["view"] == "overall" and data["snippets"] == 212 and len(data["papers"]) == 20
    assert len(data["rows"]) == 32
    rows = {r["name"]: r for r in data["rows"]}
    gemini = rows["Gemini-2.5-Pro-Preview-05-06"]
    assert gemini["scaled_pass_rate"] == 37.34 and gemini["pass_rate"] == 64.15
    assert rows["O3 (High)"]["scaled_pass_rate"] == 32.16
    assert rows["O4-Mini (High)"]["scaled_pass_rate"] == 30.78
    assert data["rows"][0]["name"] == "Gemini-2.5-Pro-Preview-05-06" and data["rows"][0]["tier"] == 1
    lo, hi = gemini["ci95"]
    assert lo < 37.34 < hi
    for key in ("model", "organisation", "open_weights", "ranked", "coverage", "snippets", "knowledge_cutoff",
                "input_cost", "samples", "baseline", "verified"):
        assert key in gemini
    tiers = [r["tier"] for r in data["rows"]]
    assert tiers == sorted(tiers)  # tiers never go back up down the table


@pytest.mark.django_db
def test_contamination_safe_window(published, api):
    data = api("/api/v1/leaderboard?view=contamination_safe&cutoff=2025-01-31").json()
    expected = sorted(p.paper_id for p in Paper.objects.filter(first_commit_date__gt="2025-01-31"))
    assert len(expected) == 13
    assert data["papers"] == expected and data["view"] == "contamination_safe"
    assert data["snippets"] < 212 and len(data["rows"]) == 32
    # a window with few papers is flagged, and 'to' narrows it
    narrow = api("/api/v1/leaderboard?view=contamination_safe&cutoff=2025-01-31&to=2025-02-20").json()
    assert 0 < len(narrow["papers"]) < 5 and narrow["warning"]
    # the default cutoff is the latest knowledge cutoff among the ranked models (2025-01)
    default = api("/api/v1/leaderboard?view=contamination_safe").json()
    assert default["cutoff"] == "2025-01-31" and default["papers"] == expected


@pytest.mark.django_db
def test_filters(published, api):
    open_rows = api("/api/v1/leaderboard?open_weights=1").json()["rows"]
    assert open_rows and all(r["open_weights"] for r in open_rows)
    google = api("/api/v1/leaderboard?organisation=google").json()["rows"]
    assert google and {r["organisation"] for r in google} == {"Google"}


@pytest.mark.django_db
def test_unknown_objects_are_404_json(published, api):
    for url in ("/api/v1/leaderboard?release=nope", "/api/v1/papers/nope/leaderboard", "/api/v1/models/NOPE",
                "/api/v1/papers/nope"):
        response = api(url, status=404)
        assert response["Content-Type"] == "application/json" and response.json()["error"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query, word",
    [("view=bogus", "view"), ("cutoff=yesterday", "cutoff"), ("from=2025-05-01&to=2025-01-01", "after"),
     ("open_weights=maybe", "open_weights"), ("format=xml", "format"), ("color=red", "color")],
)
def test_bad_parameters_are_400_json(published, api, query, word):
    body = api(f"/api/v1/leaderboard?{query}", status=400).json()
    assert word in body["error"] and body["messages"]


@pytest.mark.django_db
def test_every_read_endpoint_refuses_a_parameter_it_does_not_document(published, api):
    """A filter an endpoint does not have (the contamination table has no cutoff; a misspelled name)
    is a 400 naming it, never figures served as if filtered; what the document lists is accepted."""
    from leaderboard.openapi import READ_QUERY

    routes = {"ping": "/api/v1/ping", "releases": "/api/v1/releases", "leaderboard": "/api/v1/leaderboard",
              "heatmap": "/api/v1/heatmap", "error_categories": "/api/v1/error-categories",
              "paper_ablation": "/api/v1/paper-ablation", "contamination": "/api/v1/contamination",
              "paper": "/api/v1/papers/DyT", "paper_leaderboard": "/api/v1/papers/DyT/leaderboard",
              "model_search": "/api/v1/models", "model": "/api/v1/models/O3_HIGH"}
    assert set(routes) <= set(READ_QUERY) and "cutoff" not in READ_QUERY["contamination"]
    for name, url in routes.items():
        body = api(url + "?cutoff=2025-01-01&colour=red" if name != "leaderboard" else url + "?colour=red",
                   status=400).json()
        assert "unknown parameter 'colour'" in body["messages"], (url, body)
        assert ("unknown parameter 'cutoff'" in body["messages"]) == (name != "leaderboard"), (url, body)
        if "release" in READ_QUERY[name]:
            api(f"{url}?release={published.slug}")  # a documented parameter is still taken
    # every problem in one answer: a bad value and an unknown name together
    body = api("/api/v1/leaderboard?view=bogus&colour=red", status=400).json()
    assert any("view" in m for m in body["messages"]) and "unknown parameter 'colour'" in body["messages"]
    assert api("/api/v1/contamination?release=" + published.slug + "&format=csv").content.startswith(b"model,")


@pytest.mark.django_db
def test_csv_twins(published, api):
    response = api("/api/v1/leaderboard?format=csv")
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 32 and rows[0]["name"] == "Gemini-2.5-Pro-Preview-05-06"
    assert float(rows[0]["scaled_pass_rate"]) == pytest.approx(37.34, abs=0.005)
    for url in ("/api/v1/papers/DyT/leaderboard", "/api/v1/heatmap", "/api/v1/error-categories",
                "/api/v1/contamination", "/api/v1/paper-ablation"):
        text = api(url + "?format=csv").content.decode()
        assert text.splitlines()[0].startswith("model,") or text.splitlines()[0].startswith("tier,"), url
    heat = list(csv.reader(io.StringIO(api("/api/v1/heatmap?format=csv").content.decode())))
    assert len(heat) == 33 and len(heat[0]) == 22


@pytest.mark.django_db
def test_other_endpoints(published, api):
    assert api("/api/v1/ping").json() == {"ok": True}
    releases = api("/api/v1/releases").json()["releases"]
    assert releases[0]["slug"] == published.slug and releases[0]["models"] == 32 and "@misc" in releases[0]["citation"]
    paper = api("/api/v1/papers/DyT/leaderboard").json()
    assert paper["paper"]["id"] == "DyT" and len(paper["rows"]) == 32
    model = api("/api/v1/models/O3_HIGH").json()
    card = model["evaluations"][0]
    assert model["name"] == "O3 (High)" and card["scaled_pass_rate"] == 32.16
    assert card["release_hash"] == published.content_hash and card["samples"] == 1 and card["harness_version"]
    detail = api("/api/v1/papers/DyT").json()
    assert detail["snippets"] and all(0 <= s["pass_rate"] <= 100 for s in detail["snippets"])
    cont = api("/api/v1/contamination").json()["rows"]
    assert {r["model"] for r in cont} >= {"O3_HIGH"} and all(r["paper_count"] == len(r["papers"]) for r in cont)


@pytest.mark.django_db
def test_cached_response_goes_stale_on_write(published, api):
    first = api("/api/v1/leaderboard").json()
    o3 = LLMModel.objects.get(key="O3_HIGH")
    o3.display_name = "O3 renamed"
    o3.save()  # any write moves the release's data_version
    second = api("/api/v1/leaderboard").json()
    assert "O3 renamed" in {r["name"] for r in second["rows"]}
    assert "O3 renamed" not in {r["name"] for r in first["rows"]}
    o3.display_name = "O3 (High)"
    o3.save()


def test_csv_cells_cannot_become_formulas():
    from leaderboard.csv import csv_text

    text = csv_text(["name", "rate", "diff"], [["=HYPERLINK(\"http://x\")", 12.5, -3.25], ["@cmd", None, True],
                                               ["-1+cmd|' /C calc'!A0", "+5", "-3.20"]])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1] == ["'=HYPERLINK(\"http://x\")", "12.5000", "-3.2500"]  # numbers stay numbers
    assert rows[2] == ["'@cmd", "", "yes"]
    # numbers the pages format as text ('-3.20') stay numbers too; a formula starting with a sign does not
    assert rows[3] == ["'-1+cmd|' /C calc'!A0", "+5", "-3.20"]


@pytest.mark.django_db
def test_import_command_reports_the_check(published, capsys):
    from django.core.management import call_command

    call_command("import_published", str(STATS))
    out = capsys.readouterr().out
    assert "20 papers, 212 snippets, 32 models" in out and "match the file's overall_scores" in out
