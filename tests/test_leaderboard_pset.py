"""import_pset (draft releases, attaching code to the published release) and load_demo."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from benchmark_core.problemset import load_problemset
from catalog.models import Evaluation, LLMModel, Release, ReleasePaper, Snippet, SnippetResult
from leaderboard.selectors import boards, details
from leaderboard.importers.pset import pset_import
from leaderboard.importers.published import published_import

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
QUIRKY = ROOT / "tests" / "data" / "quirky_pset"
BAD = ROOT / "tests" / "data" / "bad_pset"


@pytest.fixture(autouse=True)
def pset_root(settings, tmp_path):
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    return settings.RCB_PSET_ROOT


def _subset(dst: Path, papers: list[str]) -> Path:
    """A copy of the demo problem set with only some papers."""
    dst.mkdir()
    entries = yaml.safe_load((DEMO / "papers.yaml").read_text(encoding="utf-8"))
    (dst / "papers.yaml").write_text(yaml.safe_dump([e for e in entries if e["id"] in papers]), encoding="utf-8")
    for paper in papers:
        shutil.copytree(DEMO / paper, dst / paper)
    return dst


def _fake_published(pset_dir: Path, out: Path) -> Path:
    """An overall_stats.json in the published layout whose papers and snippets are the folder's."""
    pset = load_problemset(pset_dir)
    results, overall = {}, {}
    for paper in pset.papers:
        model_results = {}
        for m, key in enumerate(("MODEL_A", "MODEL_B")):
            model_results[key] = {
                "results": {
                    s.name: [{"snippet_code_line_count": s.weight, "completion_idx": 0, "passed": (i + m) % 2 == 0,
                              "exit_code": 0 if (i + m) % 2 == 0 else 1}]
                    for i, s in enumerate(paper.snippets)
                }
            }
        results[paper.id] = {"paper_metadata": {"id": paper.id, "title": paper.title,
                                                "first_commit_date": str(paper.first_commit_date)},
                             "results": model_results, "problem_scores": {}}
    for key in ("MODEL_A", "MODEL_B"):
        overall[key] = {"llm_cfg": {"pretty_name": key.title(), "developer": "Lab", "is_open": False,
                                    "knowledge_cutoff_date": "2023-6"}}
    out.write_text(json.dumps({"results": results, "overall_scores": overall}), encoding="utf-8")
    return out


@pytest.mark.django_db
def test_draft_release_from_a_folder(pset_root):
    result = pset_import(path=QUIRKY, release_name="quirky draft")
    release = result.release
    assert not result.attached and release.status == Release.DRAFT and len(release.content_hash) == 64
    pset = load_problemset(QUIRKY)
    assert Snippet.objects.filter(release=release).count() == len(pset.snippets) == result.snippets
    for paper, core in pset.snippets:
        snip = Snippet.objects.get(release=release, paper__paper_id=paper.id, file=core.file, name=core.name)
        assert (snip.weight, snip.start_line, snip.end_line, snip.code) == (core.weight, core.start_line, core.end_line, core.code)
        assert (snip.parent.name if snip.parent else None) == core.parent
    for rp in ReleasePaper.objects.filter(release=release):
        folder = Path(rp.folder)
        assert folder.is_relative_to(pset_root / release.slug) and (folder / "paper2code_test.py").is_file()
        assert len(rp.content_hash) == 64
    # idempotent
    again = pset_import(path=QUIRKY, release_name="quirky draft")
    assert again.release.pk == release.pk and again.release.content_hash == release.content_hash
    assert Snippet.objects.filter(release=release).count() == len(pset.snippets)
    assert Release.objects.count() == 1


@pytest.mark.django_db
def test_invalid_folder_gives_every_problem_and_writes_nothing(tmp_path):
    with pytest.raises(CommandError) as info:
        call_command("import_pset", str(BAD))
    message = str(info.value)
    assert "problem(s): nothing was imported" in message and ":" in message.splitlines()[0]
    assert "Traceback" not in message
    with pytest.raises(CommandError, match="not a folder"):
        call_command("import_pset", str(tmp_path / "nowhere"))
    assert Release.objects.count() == 0 and Snippet.objects.count() == 0


@pytest.mark.django_db
def test_published_folder_attaches_to_the_published_release(tmp_path, pset_root):
    folder = _subset(tmp_path / "pset", ["rope", "lion"])
    published = published_import(path=_fake_published(folder, tmp_path / "overall_stats.json")).release
    before = {(s.paper.paper_id, s.name): (s.id, s.weight) for s in Snippet.objects.filter(release=published)}
    figures = {ev.model.key: ev.scaled_pass_rate for ev in Evaluation.objects.filter(release=published)}
    assert all(s.code == "" for s in Snippet.objects.filter(release=published))

    result = pset_import(path=folder)
    assert result.attached and result.release.pk == published.pk
    assert Release.objects.count() == 1  # no draft was made
    after = {(s.paper.paper_id, s.name): s for s in Snippet.objects.filter(release=published)}
    assert {k: (s.id, s.weight) for k, s in after.items()} == before  # same rows: results stay attached
    pset = load_problemset(folder)
    for paper, core in pset.snippets:
        snip = after[(paper.id, core.name)]
        assert (snip.file, snip.code, snip.start_line) == (core.file, core.code, core.start_line)
    for rp in ReleasePaper.objects.filter(release=published):
        assert rp.folder and (Path(rp.folder) / "paper2code_test.py").is_file()
    assert {ev.model.key: ev.scaled_pass_rate for ev in Evaluation.objects.filter(release=published)} == figures
    # re-importing the published results keeps the attached code
    published_import(path=tmp_path / "overall_stats.json")
    assert Snippet.objects.filter(release=published).exclude(code="").count() == len(pset.snippets)
    # a folder with a paper the published release does not have becomes its own draft
    other = pset_import(path=_subset(tmp_path / "other", ["focal-loss"]))
    assert not other.attached and other.release.pk != published.pk


@pytest.mark.django_db
def test_published_release_name_refuses_another_folder(tmp_path):
    folder = _subset(tmp_path / "pset", ["lion"])
    published = published_import(path=_fake_published(folder, tmp_path / "overall_stats.json")).release
    with pytest.raises(CommandError, match="frozen"):
        call_command("import_pset", str(QUIRKY), "--release", published.name)


@pytest.mark.slow
@pytest.mark.django_db
def test_load_demo_scores_predictions_and_baselines(tmp_path):
    folder = _subset(tmp_path / "demo", ["minp-sampling"])
    (folder / "predictions").mkdir()
    shutil.copy(DEMO / "predictions" / "models.yaml", folder / "predictions" / "models.yaml")
    for name in ("demo-perfect", "demo-imperfect", "demo-imperfect.without-paper"):
        lines = (DEMO / "predictions" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if json.loads(line)["paper"] == "minp-sampling"]
        (folder / "predictions" / f"{name}.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")
    call_command("load_demo", "--path", str(folder), "--backend", "local", "--timeout", "20")
    release = Release.objects.get(name="demo")
    assert release.status == Release.PUBLISHED
    rows = {r.model_key: r for r in boards.leaderboard_rows(release=release).rows}
    assert set(rows) == {"demo-perfect", "demo-imperfect", "baseline-reference", "baseline-empty"}
    assert rows["demo-perfect"].scaled_pass_rate == 100.0 and rows["demo-perfect"].ranked
    assert rows["baseline-reference"].scaled_pass_rate == 100.0 and rows["baseline-reference"].baseline == "reference"
    assert rows["baseline-empty"].scaled_pass_rate == 0.0 and not rows["baseline-empty"].ranked
    assert 0 < rows["demo-imperfect"].scaled_pass_rate < 100
    assert LLMModel.objects.get(key="demo-imperfect").display_name == "Demo Imperfect"
    # <model>.without-paper.jsonl is the same model without the paper: the ablation page has it
    without = Evaluation.objects.get(release=release, model__key="demo-imperfect", with_paper=False)
    assert without.is_public and without.scaled_pass_rate is not None
    [ablation] = boards.paper_ablation(release=release)
    assert ablation.model_key == "demo-imperfect" and ablation.without_paper == without.scaled_pass_rate
    summary = (DEMO / "minp-sampling" / "paper2code_paper.md").read_text(encoding="utf-8")
    assert details.paper_detail(release=release, paper_id="minp-sampling").paper.summary == summary
    # completions and test output are kept for the drill-down
    failed = SnippetResult.objects.filter(evaluation__model__key="demo-imperfect", passed=False).first()
    assert failed.completion and failed.output_tail and failed.category
    drill = details.snippet_drilldown(release=release, paper_id="minp-sampling", snippet=failed.snippet.name,
                                        model_key="demo-imperfect")
    assert drill.results[0]["diff"].startswith("--- reference")
    count = SnippetResult.objects.count()
    call_command("load_demo", "--path", str(folder), "--backend", "local")  # idempotent: nothing re-scored
    assert SnippetResult.objects.count() == count and Evaluation.objects.filter(release=release).count() == 5
