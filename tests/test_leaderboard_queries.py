"""Selectors and API endpoints issue a number of queries that does not grow with the number of models."""
from __future__ import annotations

import datetime as dt
import random

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from leaderboard.selectors import boards, details, release_info
from catalog.aggregates import evaluation_aggregates_refresh, release_tiers_refresh

N_PAPERS = 6


def _release_with_models(n_models: int, *, hidden_extra: int = 0) -> Release:
    """A release of N_PAPERS papers with 4 snippets each and n_models scored public models; every
    second model also has a without-paper evaluation (a little worse)."""
    rng = random.Random(n_models)
    release = Release.objects.create(name=f"q{n_models}", slug=f"q{n_models}", status=Release.PUBLISHED)
    snippets = []
    for p in range(N_PAPERS):
        paper, _ = Paper.objects.get_or_create(
            paper_id=f"qp{p}", defaults={"title": f"Paper {p}", "first_commit_date": dt.date(2024, 1 + p, 1)}
        )
        weights = [rng.randint(1, 9) for _ in range(4)]
        ReleasePaper.objects.create(release=release, paper=paper, snippet_count=4, total_weight=sum(weights))
        snippets += [Snippet(release=release, paper=paper, name=f"s{i}", weight=w, position=i) for i, w in enumerate(weights)]
    snippets = Snippet.objects.bulk_create(snippets)
    for m in range(n_models + hidden_extra):
        model = LLMModel.objects.create(
            key=f"m{n_models}-{m}", display_name=f"Model {m}", organisation=["A", "B", "C"][m % 3],
            open_weights=bool(m % 2), knowledge_cutoff="2024-03", knowledge_cutoff_date=dt.date(2024, 3, 31),
        )
        ev = Evaluation.objects.create(model=model, release=release, is_public=True, hidden=m >= n_models)
        skill = rng.random()
        SnippetResult.objects.bulk_create(
            SnippetResult(evaluation=ev, snippet=s, passed=rng.random() < skill, category="logic") for s in snippets
        )
        evaluation_aggregates_refresh(evaluation=ev, n_boot=50, refresh_release=False)
        if m % 2 == 0 and m < n_models:
            bare = Evaluation.objects.create(model=model, release=release, is_public=True, with_paper=False)
            SnippetResult.objects.bulk_create(
                SnippetResult(evaluation=bare, snippet=s, passed=r.passed and rng.random() < 0.7, category="logic")
                for s, r in zip(snippets, SnippetResult.objects.filter(evaluation=ev).order_by("snippet_id"))
            )
            evaluation_aggregates_refresh(evaluation=bare, n_boot=50, refresh_release=False)
    release_tiers_refresh(release=release, n_boot=50)
    release.refresh_from_db()
    return release


def _count(fn) -> int:
    cache.clear()
    with CaptureQueriesContext(connection) as ctx:
        fn()
    return len(ctx.captured_queries)


CALLS = {
    "overall": lambda r: boards.leaderboard_rows(release=r),
    "window": lambda r: boards.leaderboard_rows(release=r, view="contamination_safe", cutoff=dt.date(2024, 2, 1)),
    "filtered": lambda r: boards.leaderboard_rows(release=r, open_weights=True, organisation="A"),
    "paper": lambda r: boards.paper_leaderboard(release=r, paper_id="qp1"),
    "heatmap": lambda r: boards.heatmap(release=r),
    "errors": lambda r: boards.error_categories(release=r),
    "contamination": lambda r: boards.contamination_per_model(release=r),
    "ablation": lambda r: boards.paper_ablation(release=r),
    "paper_detail": lambda r: details.paper_detail(release=r, paper_id="qp2"),
    "releases": lambda r: release_info.releases_list(),
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(CALLS))
def test_selector_queries_do_not_grow_with_models(name):
    few = _release_with_models(3)
    many = _release_with_models(30, hidden_extra=2)
    call = CALLS[name]
    assert _count(lambda: call(few)) == _count(lambda: call(many)) <= 4


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    ["/api/v1/leaderboard?release={slug}", "/api/v1/leaderboard?release={slug}&view=contamination_safe&cutoff=2024-02-01",
     "/api/v1/papers/qp1/leaderboard?release={slug}", "/api/v1/heatmap?release={slug}",
     "/api/v1/contamination?release={slug}&format=csv"],
)
def test_api_queries_do_not_grow_with_models(client, url):
    few = _release_with_models(3)
    many = _release_with_models(30)

    def get(release):
        response = client.get(url.format(slug=release.slug), HTTP_HOST="localhost")
        assert response.status_code == 200

    assert _count(lambda: get(few)) == _count(lambda: get(many)) <= 6


@pytest.mark.django_db
def test_stored_tiers_are_used_and_hidden_models_leave_the_table():
    release = _release_with_models(8, hidden_extra=1)
    table = boards.leaderboard_rows(release=release)
    assert len(table.rows) == 8  # the hidden evaluation is not shown
    stored = release.tiers["with_paper"]["tiers"]
    assert {r.model_key: r.tier for r in table.rows} == stored
    # tiers never decrease down the table, and the best model is in tier 1
    tiers = [r.tier for r in table.rows]
    assert tiers[0] == 1 and tiers == sorted(tiers)


@pytest.mark.django_db
def test_incomplete_and_baseline_rows_are_shown_unranked():
    release = _release_with_models(4)
    ev = Evaluation.objects.filter(release=release, with_paper=True).first()
    SnippetResult.objects.filter(evaluation=ev, snippet__paper__paper_id="qp0").delete()
    evaluation_aggregates_refresh(evaluation=ev, n_boot=50)
    baseline = LLMModel.objects.create(key="ref", display_name="Reference", baseline=LLMModel.REFERENCE)
    ref = Evaluation.objects.create(model=baseline, release=release, is_public=True, source=Evaluation.BASELINE)
    SnippetResult.objects.bulk_create(
        SnippetResult(evaluation=ref, snippet=s, passed=True) for s in Snippet.objects.filter(release=release)
    )
    evaluation_aggregates_refresh(evaluation=ref, n_boot=50)
    rows = {r.model_key: r for r in boards.leaderboard_rows(release=release).rows}
    partial = rows[ev.model.key]
    assert partial.coverage < 100 and not partial.ranked and partial.tier is None
    assert rows["ref"].baseline == "reference" and not rows["ref"].ranked and rows["ref"].scaled_pass_rate == 100.0
    assert all(r.tier is not None for r in rows.values() if r.ranked)


@pytest.mark.django_db
def test_stale_tiers_are_recomputed_with_constant_queries():
    few, many = _release_with_models(3), _release_with_models(30)
    for release in (few, many):  # a publish/hide that does not refresh the stored tiers
        ev = Evaluation.objects.filter(release=release, with_paper=True).order_by("id").first()
        ev.hidden = True
        ev.save(update_fields=["hidden"])
        release.refresh_from_db()
    tables = {}

    def call(release):
        tables[release.pk] = boards.leaderboard_rows(release=release)

    assert _count(lambda: call(few)) == _count(lambda: call(many)) <= 5
    for release in (few, many):
        rows = tables[release.pk].rows
        assert len(rows) == Evaluation.objects.filter(release=release, hidden=False, with_paper=True).count()
        tiers = [r.tier for r in rows]
        assert all(t is not None for t in tiers) and tiers[0] == 1 and tiers == sorted(tiers)


@pytest.mark.django_db
def test_paper_ablation_pairs_the_two_prompt_variants():
    release = _release_with_models(6)
    rows = boards.paper_ablation(release=release)
    assert {r.model_key for r in rows} == {"m6-0", "m6-2", "m6-4"}
    for r in rows:
        with_ev = Evaluation.objects.get(model__key=r.model_key, with_paper=True)
        without = Evaluation.objects.get(model__key=r.model_key, with_paper=False)
        assert r.diff == pytest.approx(with_ev.scaled_pass_rate - without.scaled_pass_rate)
        assert r.diff >= 0  # the bare variant only loses passes here
        assert r.ci_low <= r.diff <= r.ci_high
