"""One bootstrap: the CLI's interval and the site's (stored, then served by the API) agree."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache

from benchmark_core import runner
from catalog.models import Evaluation, LLMModel, Release, Snippet
from leaderboard.importers.pset import pset_import
from scoring.results import evaluation_results_write, result_row_from_run

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("cli") / "results.json"
    subprocess.run(
        [sys.executable, "-m", "benchmark_core", "score", str(DEMO), str(DEMO / "predictions" / "demo-imperfect.jsonl"),
         "--backend", "local", "-o", str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=600,
    )
    return json.loads(out.read_text())


def test_cli_and_site_give_the_same_interval(cli_results, client, tmp_path):
    cache.clear()
    release = pset_import(path=DEMO, release_name="agree", status=Release.PUBLISHED).release
    model = LLMModel.objects.create(key="imperfect", display_name="Imperfect")
    ev = Evaluation.objects.create(model=model, release=release, with_paper=True, is_public=True,
                                   source=Evaluation.DEMO)
    fields = set(runner.TestRun.__dataclass_fields__)
    runs = [runner.TestRun(**{k: v for k, v in row.items() if k in fields}) for row in cli_results["snippets"]]
    ids = {(p, f, n): i for i, p, f, n in Snippet.objects.filter(release=release).values_list("id", "paper__paper_id", "file", "name")}
    evaluation_results_write(evaluation=ev, replace=True,  # the CLI's verdicts, stored as the site stores its own
                             rows=[result_row_from_run(snippet_id=ids[(r.paper, r.file, r.snippet)], run=r) for r in runs])
    data = client.get(f"/api/v1/leaderboard?release={release.slug}", HTTP_HOST="localhost").json()
    row = next(r for r in data["rows"] if r["model"] == "imperfect")
    cli_lo, cli_hi = cli_results["summary"]["scaled_pass_rate_ci95"]
    site_lo, site_hi = row["ci95"]
    assert row["scaled_pass_rate"] == pytest.approx(cli_results["summary"]["scaled_pass_rate"], abs=0.01)
    assert site_lo == pytest.approx(cli_lo, abs=0.01) and site_hi == pytest.approx(cli_hi, abs=0.01)
    assert cli_lo < row["scaled_pass_rate"] < cli_hi
