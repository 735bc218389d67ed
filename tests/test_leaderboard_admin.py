"""The leaderboard admin: pages load, and hiding an evaluation takes it off the table at once."""
from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User

from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog import ranking
from leaderboard.selectors import boards
from catalog.aggregates import evaluation_aggregates_refresh, release_tiers_refresh


@pytest.fixture
def release():
    release = Release.objects.create(name="adm", slug="adm", status=Release.PUBLISHED)
    paper = Paper.objects.create(paper_id="adm-paper", title="A paper", first_commit_date=dt.date(2024, 5, 1))
    ReleasePaper.objects.create(release=release, paper=paper, snippet_count=3, total_weight=6)
    snippets = [Snippet.objects.create(release=release, paper=paper, name=f"s{i}", weight=i + 1) for i in range(3)]
    for m in range(3):
        model = LLMModel.objects.create(key=f"adm-{m}", display_name=f"Adm {m}")
        ev = Evaluation.objects.create(model=model, release=release, is_public=True)
        for i, snip in enumerate(snippets):
            SnippetResult.objects.create(evaluation=ev, snippet=snip, passed=i < m, category="" if i < m else "logic")
        evaluation_aggregates_refresh(evaluation=ev, n_boot=50, refresh_release=False)
    release_tiers_refresh(release=release, n_boot=50)
    return release


@pytest.fixture
def admin_client(client):
    user = User.objects.create_superuser("root", "root@example.org", "pw-not-used")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_admin_pages_load(admin_client, release):
    for url in ("/admin/catalog/release/", f"/admin/catalog/release/{release.pk}/change/",
                "/admin/catalog/evaluation/", "/admin/catalog/llmmodel/", "/admin/catalog/paper/",
                "/admin/catalog/snippet/", "/admin/catalog/snippetresult/"):
        assert admin_client.get(url, HTTP_HOST="localhost").status_code == 200, url


@pytest.mark.django_db
def test_hide_action_removes_the_row_and_refreshes_tiers(admin_client, release):
    assert len(boards.leaderboard_rows(release=release).rows) == 3
    ev = Evaluation.objects.get(model__key="adm-2")
    response = admin_client.post(
        "/admin/catalog/evaluation/",
        {"action": "hide", "_selected_action": [ev.pk]},
        HTTP_HOST="localhost",
    )
    assert response.status_code == 302
    release.refresh_from_db()
    rows = boards.leaderboard_rows(release=release).rows
    assert {r.model_key for r in rows} == {"adm-0", "adm-1"}
    # the stored tiers were recomputed without the hidden model, so pages use them as they are
    assert set(release.tiers["with_paper"]["tiers"]) == {"adm-0", "adm-1"}
    assert {r.model_key: r.tier for r in rows} == release.tiers["with_paper"]["tiers"]
    visible = Evaluation.objects.filter(release=release, hidden=False).select_related("model")
    assert release.tiers["with_paper"]["fingerprint"] == ranking.tiers_fingerprint(visible)
