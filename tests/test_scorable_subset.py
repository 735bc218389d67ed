"""Comparable numbers when only part of a release can be scored here (issue 8): every model is
ranked on the scorable subset, published ones from their per-paper totals, the whole-release
figure beside it (pages and API), and the queries do not grow with the number of models."""
from __future__ import annotations

import datetime as dt

import pytest

from leaderboard.models import Evaluation, LLMModel, ReleasePaper, Snippet, SnippetResult
from leaderboard.selectors import boards
from leaderboard.aggregates import evaluation_aggregates_refresh

from test_leaderboard_queries import _count, _release_with_models

SUBSET = ["qp1", "qp3", "qp4"]

pytestmark = pytest.mark.django_db


def _attach(release, papers=SUBSET, broken: str | None = None):
    """Code on this site for some papers; ``broken``: one of them whose environment fails."""
    ReleasePaper.objects.filter(release=release, paper__paper_id__in=papers).update(folder="/srv/psets/x")
    if broken:
        ReleasePaper.objects.filter(release=release, paper__paper_id=broken).update(
            environment_ok=False, environment="torch-cpu", environment_error="No module named 'torch'")
    return release


def _subset_rate(ev: Evaluation, papers: list[str]) -> float:
    totals = [ev.paper_totals[p] for p in papers]
    return 100.0 * sum(t[0] for t in totals) / sum(t[1] for t in totals)


def test_rows_rank_on_the_scorable_subset_and_keep_the_whole_release_figure():
    release = _attach(_release_with_models(6), broken="qp4")
    table = boards.leaderboard_rows(release=release)
    assert table.scorable_subset and table.papers == ["qp1", "qp3"] and table.release_papers == 6
    assert {r["paper"] for r in table.not_scorable} == {"qp0", "qp2", "qp4", "qp5"}
    assert table.snippets == 8 and table.release_snippets == 24
    evs = {ev.model.key: ev for ev in Evaluation.objects.filter(release=release, with_paper=True)}
    for row in table.rows:
        ev = evs[row.model_key]
        assert row.scaled_pass_rate == pytest.approx(_subset_rate(ev, ["qp1", "qp3"]))
        assert row.full_scaled_pass_rate == ev.scaled_pass_rate and row.full_pass_rate == ev.pass_rate
        assert row.ranked and row.tier is not None and row.papers == 2 and row.snippets == 8
    rates = [r.scaled_pass_rate for r in table.rows]
    assert rates == sorted(rates, reverse=True)
    # the contamination-safe view keeps to the subset too
    window = boards.leaderboard_rows(release=release, view="contamination_safe", cutoff=dt.date(2024, 2, 1))
    assert window.papers == ["qp3"]
    # a release scorable everywhere (or nowhere) ranks as before, on every paper
    _attach(release, papers=[f"qp{i}" for i in range(6)])
    ReleasePaper.objects.filter(release=release).update(environment_ok=True)
    full = boards.leaderboard_rows(release=release)
    assert not full.scorable_subset and len(full.papers) == 6 and full.rows[0].full_scaled_pass_rate is None


def test_a_submission_that_covers_the_subset_is_ranked_beside_the_published_models():
    release = _attach(_release_with_models(3))
    model = LLMModel.objects.create(key="newcomer", display_name="Newcomer")
    ev = Evaluation.objects.create(model=model, release=release, is_public=True, source=Evaluation.SUBMISSION)
    SnippetResult.objects.bulk_create(
        SnippetResult(evaluation=ev, snippet=s, passed=True)
        for s in Snippet.objects.filter(release=release, paper__paper_id__in=SUBSET)
    )
    evaluation_aggregates_refresh(evaluation=ev, n_boot=50)
    rows = {r.model_key: r for r in boards.leaderboard_rows(release=release).rows}
    new = rows["newcomer"]
    assert new.scaled_pass_rate == 100.0 and new.ranked and new.tier == 1
    assert new.full_scaled_pass_rate < 100.0 and new.coverage < 100.0  # the whole release says otherwise
    # missing one snippet of the subset: shown, not ranked
    SnippetResult.objects.filter(evaluation=ev).order_by("id").first().delete()
    evaluation_aggregates_refresh(evaluation=ev, n_boot=50)
    assert not {r.model_key: r for r in boards.leaderboard_rows(release=release).rows}["newcomer"].ranked


def test_pages_and_api_say_which_subset(client):
    release = _attach(_release_with_models(3), broken="qp4")
    data = client.get(f"/api/v1/leaderboard?release={release.slug}", HTTP_HOST="localhost").json()
    assert data["scorable_subset"] is True and data["papers"] == ["qp1", "qp3"] and data["release_papers"] == 6
    assert {r["paper"] for r in data["not_scorable"]} == {"qp0", "qp2", "qp4", "qp5"}
    assert all(r["full_scaled_pass_rate"] is not None for r in data["rows"])
    page = client.get(f"/leaderboard/?release={release.slug}").content.decode()
    assert 'id="scorable-subset"' in page and "qp1, qp3" in page and "whole release" in page


@pytest.mark.parametrize("view", ["overall", "contamination_safe"])
def test_subset_queries_do_not_grow_with_models(client, view):
    few, many = _attach(_release_with_models(3), broken="qp4"), _attach(_release_with_models(30), broken="qp4")
    call = lambda r: boards.leaderboard_rows(release=r, view=view)  # noqa: E731
    assert _count(lambda: call(few)) == _count(lambda: call(many)) <= 4

    def get(release):
        assert client.get(f"/api/v1/leaderboard?release={release.slug}&view={view}", HTTP_HOST="localhost").status_code == 200

    assert _count(lambda: get(few)) == _count(lambda: get(many)) <= 6
