"""Comparable numbers when only part of a release can be scored here (issue 8): every model is
ranked on the scorable subset, published ones from their per-paper totals, the whole-release
figure beside it (pages and API), and the queries do not grow with the number of models."""
from __future__ import annotations

import datetime as dt

import pytest

from catalog.models import Evaluation, LLMModel, ReleasePaper, Snippet, SnippetResult
from leaderboard.selectors import boards
from catalog.aggregates import evaluation_aggregates_refresh

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


# -- issue 21: a release published on top of a release whose papers have no code here -------------


def _evaluation_on(release, key: str, papers: list[str], *, source: str, completions: bool = False,
                   skip: int = 0) -> Evaluation:
    """A public evaluation with a verdict on each snippet of ``papers`` but the last ``skip`` ones."""
    from scoring.results import ResultRow, evaluation_results_write

    model, _ = LLMModel.objects.get_or_create(key=key, defaults={"display_name": key})
    ev = Evaluation.objects.create(model=model, release=release, source=source, is_public=True)
    snippets = list(Snippet.objects.filter(release=release, paper__paper_id__in=papers)
                    .order_by("paper__paper_id", "position"))
    evaluation_results_write(evaluation=ev, rows=[
        ResultRow(snippet_id=s.pk, sample=0, passed=i % 3 != 0, category="logic" if i % 3 == 0 else "",
                  completion=s.code if completions else "")
        for i, s in enumerate(snippets[: len(snippets) - skip])])
    ev.refresh_from_db()
    return ev


@pytest.fixture
def succession_scenario(settings, tmp_path):
    """Published release 'v1' (rope and lion, no code here) with two imported models and a demo model;
    a contributed paper (focal-loss, with its code) approved into the draft; the draft published."""
    from contributions import release_services
    from catalog.models import Paper, Release
    from submissions_support import DEMO, demo_release_create

    settings.RCB_PSET_ROOT = tmp_path / "psets"
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    published = demo_release_create(slug="v1", papers=["rope", "lion"])
    for key in ("imported-a", "imported-b"):
        _evaluation_on(published, key, ["rope", "lion"], source=Evaluation.PUBLISHED)
    _evaluation_on(published, "demo-model", ["rope", "lion"], source=Evaluation.DEMO, completions=True)
    ReleasePaper.objects.filter(release=published).update(folder="")  # no code on this site
    draft = release_services.release_draft_get_or_create(name="v1.1")
    # what an approval adds: the contributed paper with its code (release_draft_paper_add's rows)
    contributed = demo_release_create(slug="contributed", papers=["focal-loss"])
    source = ReleasePaper.objects.get(release=contributed)
    Release.objects.filter(pk=contributed.pk).update(is_default=False)
    Release.objects.filter(pk=published.pk).update(is_default=True)
    rp = ReleasePaper.objects.create(release=draft, paper=source.paper, folder=str(DEMO / "focal-loss"),
                                     snippet_count=source.snippet_count, total_weight=source.total_weight)
    for s in Snippet.objects.filter(release=contributed):
        Snippet.objects.create(release=draft, paper=rp.paper, file=s.file, name=s.name, depth=s.depth,
                               position=s.position, start_line=s.start_line, end_line=s.end_line, weight=s.weight,
                               code=s.code)
    Release.objects.filter(pk=contributed.pk).delete()
    release_services.release_publish(release=draft, by=None, make_default=True)
    draft.refresh_from_db()
    return published, draft


def test_after_a_succession_no_model_without_verdicts_on_the_scorable_papers_is_ranked(client, succession_scenario):
    published, new = succession_scenario
    table = boards.leaderboard_rows(release=new)
    assert table.scorable_subset and table.papers == ["focal-loss"]
    rows = {r.model_key: r for r in table.rows}
    # carried: the imported models' verdicts came along, none on the contributed paper
    for key in ("imported-a", "imported-b"):
        row = rows[key]
        assert row.succession == "carried" and row.no_verdict and not row.ranked and row.tier is None
        assert row.scaled_pass_rate is None and row.pass_rate is None  # not 0 %: not run there
        assert row.full_scaled_pass_rate is not None and row.coverage > 50
        assert "no verdict on the 1 paper(s) this site can score (focal-loss)" in row.unranked_reason
    # re-scored: queued, not public until its scoring finishes
    assert "demo-model" not in rows
    assert {r.model_key for r in table.apart} == {"imported-a", "imported-b"}
    # a new result on the contributed paper is ranked; one missing some of its snippets is not
    _evaluation_on(new, "newcomer", ["focal-loss"], source=Evaluation.SUBMISSION)
    _evaluation_on(new, "half-done", ["focal-loss"], source=Evaluation.SUBMISSION, skip=1)
    rows = {r.model_key: r for r in boards.leaderboard_rows(release=new).rows}
    assert rows["newcomer"].ranked and rows["newcomer"].tier == 1 and not rows["newcomer"].no_verdict
    assert not rows["half-done"].ranked and not rows["half-done"].no_verdict
    assert "results are missing for 1 of the" in rows["half-done"].unranked_reason
    assert [k for k, r in rows.items() if r.ranked] == ["newcomer"]
    # the page and the API agree, and say why
    api = {r["model"]: r for r in client.get(f"/api/v1/leaderboard?release={new.slug}").json()["rows"]}
    assert {k for k, r in api.items() if r["ranked"]} == {"newcomer"}
    for key, row in rows.items():
        assert api[key]["unranked_reason"] == (row.unranked_reason or None)
        assert api[key]["scaled_pass_rate"] is None if row.no_verdict else True
    page = client.get(f"/leaderboard/?release={new.slug}").content.decode()
    main, apart = page.split('id="leaderboard-apart"')
    assert 'data-model="imported-a"' not in main and 'data-model="newcomer"' in main
    assert 'data-model="imported-a"' in apart and "no verdict on the 1 paper(s) this site can score" in apart
    assert "1 ranked" in main and "results are missing for 1 of the" in main  # the half-done row's tooltip
    # the predecessor, with no code at all here, ranks its imported models over the whole release as before
    old = {r.model_key: r for r in boards.leaderboard_rows(release=published).rows}
    assert old["imported-a"].ranked and old["imported-b"].ranked and not old["imported-a"].unranked_reason


def test_every_unranked_reason_is_its_own(settings, tmp_path):
    """Issue 21 item 2: hidden, baseline, flags awaiting review, missing snippets and a failing
    environment each say themselves, all of them when several apply."""
    from catalog.ranking import evaluation_unranked_reason
    from catalog.ranking import release_scorability, scorable_unranked_reason
    from submissions_support import demo_release_create

    release = demo_release_create(slug="reasons", papers=["rope", "focal-loss"])
    rope = Snippet.objects.filter(release=release, paper__paper_id="rope").count()
    total = Snippet.objects.filter(release=release).count()
    complete = _evaluation_on(release, "complete", ["rope", "focal-loss"], source=Evaluation.SUBMISSION)
    partial = _evaluation_on(release, "partial", ["focal-loss"], source=Evaluation.SUBMISSION)
    assert evaluation_unranked_reason(complete) == ""
    assert evaluation_unranked_reason(partial) == f"results are missing for {rope} of {total} snippets"
    complete.hidden, complete.flagged_results = True, 2
    assert evaluation_unranked_reason(complete) == "hidden by an admin; 2 result(s) flagged by the engine await a reviewer"
    baseline = _evaluation_on(release, "baseline-empty", ["rope", "focal-loss"], source=Evaluation.BASELINE)
    LLMModel.objects.filter(key="baseline-empty").update(baseline=LLMModel.EMPTY)
    baseline.refresh_from_db()
    assert evaluation_unranked_reason(baseline) == "a baseline, shown for scale (an empty completion)"
    # rope's environment fails here and no other paper can be scored: the missing results wait for it
    ReleasePaper.objects.filter(release=release, paper__paper_id="rope").update(
        environment_ok=False, environment="torch-cpu", environment_error="No module named 'torch'")
    ReleasePaper.objects.filter(release=release, paper__paper_id="focal-loss").update(folder="")
    scorability = release_scorability(release=release)
    assert not scorability.partial and scorability.failing == {"rope": rope}
    assert scorable_unranked_reason(partial, scorability=scorability) == (
        "the environment of rope fails on this site: its snippets wait for a re-check")
