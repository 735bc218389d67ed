"""import_published reproduces every published figure; imports are idempotent and refuse bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from leaderboard.selectors import boards
from leaderboard.importers.published import published_import

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"  # as tests/conftest.py

STATS = SHARED / "upstream" / "overall_stats.json"


@pytest.fixture(scope="module")
def published(django_db_setup, django_db_blocker):
    """Import the published file once for the module (it takes a few seconds), remove it after."""
    if not STATS.exists():
        pytest.fail(f"../shared/upstream/overall_stats.json is missing (expected at {STATS})")
    with django_db_blocker.unblock():
        result = published_import(path=STATS)
    yield result
    with django_db_blocker.unblock():  # remove exactly what the import made
        data = json.loads(STATS.read_text(encoding="utf-8"))
        Release.objects.filter(pk=result.release.pk).delete()
        LLMModel.objects.filter(key__in=list(data["overall_scores"])).delete()
        Paper.objects.filter(paper_id__in=list(data["results"])).delete()


def _expected() -> dict:
    return json.loads(STATS.read_text(encoding="utf-8"))


@pytest.mark.django_db
def test_counts_match_the_published_release(published):
    release = published.release
    assert release.name == "v1.0 (published)" and release.status == Release.PUBLISHED
    assert release.release_date.isoformat().startswith("2025-06")
    assert len(release.content_hash) == 64
    assert ReleasePaper.objects.filter(release=release).count() == 20
    assert Snippet.objects.filter(release=release).count() == 212
    assert sum(ReleasePaper.objects.filter(release=release).values_list("total_weight", flat=True)) == 1449
    assert Evaluation.objects.filter(release=release, is_public=True).count() == 32
    assert SnippetResult.objects.filter(evaluation__release=release).count() == 32 * 212
    assert not SnippetResult.objects.exclude(completion="").exists()  # the file has no completions
    assert published.mismatches == []


@pytest.mark.django_db
def test_every_model_reproduces_overall_scores(published):
    data = _expected()
    table = boards.leaderboard_rows(release=published.release)
    rows = {r.model_key: r for r in table.rows}
    assert set(rows) == set(data["overall_scores"])
    for key, scores in data["overall_scores"].items():
        row = rows[key]
        assert row.name == scores["llm_cfg"]["pretty_name"]
        assert row.scaled_pass_rate == pytest.approx(scores["line_rates"]["mean"], abs=0.01), key
        assert row.pass_rate == pytest.approx(scores["task_rates"]["mean"], abs=0.01), key
        assert row.coverage == 100.0 and row.ranked and row.snippets == 212


@pytest.mark.django_db
def test_headline_figures(published):
    rows = {r.name: r for r in boards.leaderboard_rows(release=published.release).rows}
    assert round(rows["Gemini-2.5-Pro-Preview-05-06"].scaled_pass_rate, 2) == 37.34
    assert round(rows["Gemini-2.5-Pro-Preview-05-06"].pass_rate, 2) == 64.15
    assert round(rows["O3 (High)"].scaled_pass_rate, 2) == 32.16
    assert round(rows["O4-Mini (High)"].scaled_pass_rate, 2) == 30.78
    best = rows["Gemini-2.5-Pro-Preview-05-06"]
    assert best.tier == 1 and best.ci_low < best.scaled_pass_rate < best.ci_high


@pytest.mark.django_db
def test_per_paper_figures_match_problem_scores(published):
    data = _expected()
    evs = {ev.model.key: ev for ev in Evaluation.objects.filter(release=published.release).select_related("model")}
    for paper_id, paper in data["results"].items():
        for key, score in paper["problem_scores"].items():
            assert evs[key].per_paper[paper_id]["scaled_pass_rate"] == pytest.approx(score["mean"], abs=0.01)


@pytest.mark.django_db
def test_models_metadata(published):
    gemini = LLMModel.objects.get(key="GEMINI_2_5_PRO_PREVIEW_05_06")
    assert gemini.organisation == "Google" and not gemini.open_weights
    assert gemini.knowledge_cutoff == "2025-01" and gemini.knowledge_cutoff_date.isoformat() == "2025-01-31"
    assert gemini.input_cost == 1.25 and gemini.output_cost == 10.0
    grok = LLMModel.objects.get(key="GROK_3_BETA")
    assert grok.knowledge_cutoff_date.isoformat() == "2024-11-17"
    qwen = LLMModel.objects.get(key="QWEN_2_5_CODER_32B_INSTRUCT")  # "2024-6" in the file
    assert qwen.knowledge_cutoff_date.isoformat() == "2024-06-30" and qwen.open_weights


@pytest.mark.django_db
def test_contamination_window_and_per_model_cutoff(published):
    import datetime as dt

    table = boards.leaderboard_rows(release=published.release, view="contamination_safe", cutoff=dt.date(2025, 1, 31))
    assert len(table.papers) == 13
    assert all(Paper.objects.get(paper_id=p).first_commit_date > dt.date(2025, 1, 31) for p in table.papers)
    rows = boards.contamination_per_model(release=published.release)
    gemini = next(r for r in rows if r.model_key == "GEMINI_2_5_PRO_PREVIEW_05_06")
    assert len(gemini.papers) == 13
    gpt4o = next(r for r in rows if r.model_key == "GPT_4O_2024_08_06")  # cutoff 2023-10: more papers are safe
    assert len(gpt4o.papers) > 13


@pytest.mark.django_db
def test_reimport_creates_no_duplicates(published):
    before = (Release.objects.count(), Snippet.objects.count(), LLMModel.objects.count(), Evaluation.objects.count(),
              SnippetResult.objects.count(), Paper.objects.count())
    again = published_import(path=STATS)
    after = (Release.objects.count(), Snippet.objects.count(), LLMModel.objects.count(), Evaluation.objects.count(),
             SnippetResult.objects.count(), Paper.objects.count())
    assert before == after
    assert again.release.pk == published.release.pk and again.mismatches == []


@pytest.mark.django_db
def test_command_refuses_bad_files(tmp_path: Path):
    before = (Release.objects.count(), Evaluation.objects.count())
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_published", str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("import_published", str(bad))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"results": []}), encoding="utf-8")
    with pytest.raises(CommandError, match="not an overall_stats.json"):
        call_command("import_published", str(wrong))
    assert (Release.objects.count(), Evaluation.objects.count()) == before


@pytest.mark.django_db
def test_imported_verdicts_are_shown_as_verdicts_without_links_to_nothing(client, published):
    """Issue 21 item 4: no "completion & output" link for an imported verdict, the reason said once,
    and imported failures' category named "not published", not "unknown"."""
    from catalog.models import IMPORTED_NOTE

    release = published.release
    snippet = Snippet.objects.filter(release=release).select_related("paper").order_by("id").first()
    url = (f"/papers/{snippet.paper.paper_id}/snippet/?release={release.slug}"
           f"&file={snippet.file}&name={snippet.name}")
    page = client.get(url)
    assert page.status_code == 200, url
    text = page.content.decode()
    assert text.count('id="imported-note"') == 1 and "do not include the completions" in text
    assert "completion &amp; output" not in text and text.count("verdict only") >= 32
    assert ">unknown<" not in text
    if SnippetResult.objects.filter(snippet=snippet, passed=False).exists():
        assert ">not published<" in text
    # the drill-down of one imported verdict says why, instead of "No completion stored… No output stored"
    model = Evaluation.objects.filter(release=release).select_related("model").first().model
    drill = client.get(f"{url}&model={model.key}").content.decode()
    assert "imported-note" in drill and "No output stored" not in drill and "No completion stored" not in drill
    assert "the published results hold no completion or test output" in drill  # its raw outputs, too
    errors = client.get(f"/leaderboard/errors/?release={release.slug}").content.decode()
    assert 'id="imported-note"' in errors and ">not published</a></th>" in errors and ">unknown</a>" not in errors
