"""The must-show checks of issue 11 with real parts: the CLI in its own process against a live HTTP
server, a real Redis, a real RQ worker process scoring in bwrap, one shared database.

1. A demo predictions file without 10 of its lines, sent with ``submit --release demo --publish
   --wait``: the demo leaderboard's API row shows coverage below 100 % and ``ranked: false``.
2. ``release_errata demo --retire rope/"attention scores"`` gives a new release whose API rows carry
   the previous figures; the demo models' figures on it are re-scored by the worker.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from accounts.services import api_token_create
from catalog.models import Evaluation, LLMModel, Release, Snippet, SnippetResult
from catalog.aggregates import evaluation_aggregates_refresh
from submissions.models import PredictionSubmission, Status

from submissions_support import (
    PREDICTIONS,
    ROOT,
    RedisServer,
    demo_release_create,
    process_group_kill,
    wait_for,
    worker_env,
    worker_start,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),  # the worker and the live server use their own connections
    pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("bwrap") is None,
                       reason="needs redis-server and bubblewrap"),
]


def _demo_model_with_completions(release: Release) -> Evaluation:
    """A demo model as load_demo leaves it: a public DEMO evaluation whose results hold the completions.

    Its verdicts here are placeholders (all failed): the figure on the successor must come from
    the worker running the completions, whatever was stored before.
    """
    lines = [json.loads(ln) for ln in (PREDICTIONS / "demo-perfect.jsonl").read_text().splitlines() if ln.strip()]
    model = LLMModel.objects.create(key="demo-perfect", display_name="Demo perfect")
    ev = Evaluation.objects.create(model=model, release=release, source=Evaluation.DEMO, is_public=True)
    snippets = {(s.paper.paper_id, s.name): s for s in Snippet.objects.filter(release=release).select_related("paper")}
    for row in lines:
        SnippetResult.objects.create(evaluation=ev, snippet=snippets[(row["paper"], row["snippet"])], passed=False,
                                     category="logic", completion=row["completion"])
    return evaluation_aggregates_refresh(evaluation=ev)


def _api_rows(client, slug: str) -> dict[str, dict]:
    resp = client.get(f"/api/v1/leaderboard?release={slug}")
    assert resp.status_code == 200, resp.content
    return {row["name"]: row for row in resp.json()["rows"]}


def test_partial_file_published_unranked_then_errata_rescored_by_a_worker(tmp_path, settings, live_server, client):
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    worker = None
    try:
        demo = demo_release_create(slug="demo")
        demo_model = _demo_model_with_completions(demo)
        user = User.objects.create_user("maria", "maria@example.org", "pw-maria-123456!")
        token = api_token_create(user=user)[1]
        worker = worker_start(worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5"),
                              name="errata", log_dir=tmp_path)

        # 1. ten lines fewer, sent as a user sends them
        lines = (PREDICTIONS / "demo-imperfect.jsonl").read_text().splitlines(keepends=True)
        preds = tmp_path / "partial.jsonl"
        preds.write_text("".join(lines[:-10]))
        proc = subprocess.run(
            [sys.executable, "-m", "benchmark_core", "submit", str(preds), "--url", live_server.url, "--token", token,
             "--model-name", "Partial model", "--release", "demo", "--publish", "--wait", "--poll", "0.5",
             "--timeout", "600"],
            cwd=ROOT, capture_output=True, text=True, timeout=700,
        )
        log = lambda: (tmp_path / "errata.log").read_text(errors="replace")[-4000:]  # noqa: E731
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{log()}"
        total = Snippet.objects.filter(release=demo).count()
        # the CLI said how much before the site accepted it, and what follows
        assert f"predicts {len(lines) - 10} of the release's {total} snippets" in proc.stderr, proc.stderr
        assert "not ranked" in proc.stderr and "coverage" in proc.stdout and "published" in proc.stdout
        row = _api_rows(client, "demo")["Partial model"]
        assert row["coverage"] < 100.0 and row["ranked"] is False and row["tier"] is None, row
        assert row["coverage"] == pytest.approx(100.0 * (len(lines) - 10) / total, abs=0.01)
        partial_before = row["scaled_pass_rate"]
        assert partial_before is not None

        # 2. errata: a successor without one snippet; its rows carry the previous figures
        out = io.StringIO()
        call_command("release_errata", "demo", "--retire", "rope/attention scores", "--reason",
                     "passes with the snippet blanked", stdout=out)
        new = Release.objects.get(predecessor=demo)
        assert new.is_default and "2 evaluation(s) queued for re-scoring" in out.getvalue(), out.getvalue()
        assert not Snippet.objects.filter(release=new, paper__paper_id="rope", name="attention scores").exists()

        def rescored() -> bool:
            return (PredictionSubmission.objects.filter(release=new).count() == 2
                    and not PredictionSubmission.objects.filter(release=new).exclude(status=Status.FINISHED).exists())

        wait_for(rescored, timeout=600, what="the re-scoring of the demo models on the new release", interval=1)
        rows = _api_rows(client, new.slug)
        perfect, partial = rows["Demo perfect"], rows["Partial model"]
        for r in (perfect, partial):
            assert r["previous_release"] == "demo" and r["succession"] == "rescored", r
        # the worker ran the completions: the placeholders (all failed) are not what the new release shows
        assert perfect["previous_scaled_pass_rate"] == pytest.approx(demo_model.scaled_pass_rate, abs=0.01) == 0.0
        assert perfect["scaled_pass_rate"] == 100.0 and perfect["ranked"] is True and perfect["coverage"] == 100.0
        assert partial["previous_scaled_pass_rate"] == pytest.approx(partial_before, abs=0.01)
        assert partial["coverage"] < 100.0 and partial["ranked"] is False
        assert SnippetResult.objects.filter(evaluation__release=new, evaluation__model__key="demo-perfect",
                                            seconds__gt=0).count() == Snippet.objects.filter(release=new).count()
    finally:
        if worker is not None:
            process_group_kill(worker)
        redis.stop()
