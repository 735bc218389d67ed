"""The Inspect AI task: ``inspect eval`` on the demo against a real OpenAI-compatible server on
127.0.0.1 answering with the reference code, the log turned into predictions and a run card, and
those submitted to a running site, which gives the same figure."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

pytest.importorskip("inspect_ai")
from inspect_ai.log import list_eval_logs, read_eval_log  # noqa: E402

from accounts.services import api_token_create  # noqa: E402
from benchmark_core.cli import main as core_main  # noqa: E402
from benchmark_core.generate import card_path  # noqa: E402
from benchmark_core.problemset import load_problemset  # noqa: E402
from submissions import jobs  # noqa: E402
from submissions.models import PredictionSubmission  # noqa: E402

from submissions_support import DEMO, ROOT, demo_release_create, in_process_scoring  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine.chat_server import ChatServer, reference_answers  # noqa: E402

INSPECT = Path(sys.executable).with_name("inspect")


def inspect_eval(*args: str, base_url: str, log_dir: Path) -> subprocess.CompletedProcess:
    """The README's lines, run from the repository root: its export, then its first `inspect eval` with
    our --model (the test server's, which answers any model name)."""
    env = {**os.environ, "LOCAL_BASE_URL": base_url, "LOCAL_API_KEY": "none", "INSPECT_LOG_DIR": str(log_dir)}
    return subprocess.run([str(INSPECT), "eval", "benchmark_core/inspect_task.py", "--model", "openai-api/local/reference",
                           "--display", "none", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory) -> Path:
    server = ChatServer(answers=reference_answers(load_problemset(DEMO))).start()
    log_dir = tmp_path_factory.mktemp("inspect-logs")
    try:
        done = inspect_eval(base_url=server.base_url, log_dir=log_dir)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(server.given) == 50  # every prompt was one `tasks` writes (the server knows only those)
    [info] = list_eval_logs(str(log_dir))
    return Path(info.name.removeprefix("file://"))


def test_inspect_eval_of_the_demo_with_the_reference_scores_100_in_its_log(demo_log):
    log = read_eval_log(str(demo_log))
    assert log.status == "success" and len(log.samples) == 50
    metrics = {name: m.value for score in log.results.scores for name, m in score.metrics.items()}
    assert metrics == {"scaled_pass_rate": 100.0, "pass_rate": 100.0}
    sample = log.samples[0]
    tasks = {(t["paper"], t["file"], t["snippet"]): t["prompt"] for t in map(json.loads, _tasks_lines())}
    meta = sample.metadata
    assert sample.input == tasks[(meta["paper"], meta["file"], meta["snippet"])]
    score = sample.scores["sandbox_test"]
    assert score.value == 1.0 and score.metadata["passed"] is True and score.metadata["category"] is None
    assert score.metadata["weight"] == meta["weight"] > 0


def _tasks_lines() -> list[str]:
    out = io.StringIO()
    assert core_main(["tasks", str(DEMO)], out, io.StringIO()) == 0
    return out.getvalue().splitlines()


@pytest.mark.django_db(transaction=True)  # the live server reads the token from its own connection
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_converted_log_submitted_to_a_running_site_gives_the_same_figure(demo_log, tmp_path, live_server,
                                                                              settings):
    in_process_scoring(settings)
    release = demo_release_create()
    user = User.objects.create_user("inspector", "i@example.org", "pw-inspector-123!")
    token = api_token_create(user=user, name="t")[1]
    predictions = tmp_path / "inspect.jsonl"
    out, err = io.StringIO(), io.StringIO()
    assert core_main(["inspect-log", str(demo_log), "-o", str(predictions)], out, err) == 0, err.getvalue()
    assert "scaled_pass_rate 100.00" in out.getvalue()
    card = json.loads(card_path(predictions).read_text())
    log = read_eval_log(str(demo_log))
    usage = log.stats.model_usage["openai-api/local/reference"]
    assert card["model"] == "openai-api/local/reference" and card["samples"] == 1
    assert card["tokens"] == {"input": usage.input_tokens, "output": usage.output_tokens}
    assert card["counts"]["answers"] == 50 and card["complete"] is True
    assert card["source"]["hash"] == log.eval.metadata["source"]["hash"]

    err = io.StringIO()
    assert core_main(["submit", "--url", live_server.url, "--token", token, "--model-name", "Inspect reference",
                      str(predictions)], io.StringIO(), err) == 0, err.getvalue()
    sub = PredictionSubmission.objects.get()
    assert sub.predictions_count == 50 and sub.evaluation.run_card["tokens"] == card["tokens"]
    assert {jobs.score_paper(job.pk, job.rq_job_id) for job in sub.jobs.all()} == {"done"}
    sub.evaluation.refresh_from_db()
    assert sub.evaluation.scaled_pass_rate == 100.0


def test_a_log_of_another_task_is_refused(tmp_path):
    err = io.StringIO()
    (tmp_path / "x.json").write_text("{}")
    assert core_main(["inspect-log", str(tmp_path / "x.json"), "-o", str(tmp_path / "p.jsonl")], io.StringIO(), err) == 1
    assert err.getvalue().startswith("error: ")


@pytest.mark.django_db(transaction=True)  # the live server's thread must see the release
def test_a_site_releases_tasks_make_the_samples_and_are_left_to_the_site_to_score(live_server):
    from benchmark_core.inspect_task import research_code_bench, sample_id

    release = demo_release_create(papers=["rope"])
    built = research_code_bench(url=live_server.url, release=release.slug, without_paper=True)
    out = io.StringIO()
    assert core_main(["tasks", str(DEMO), "--papers", "rope", "--without-paper"], out, io.StringIO()) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [s.id for s in built.dataset] == [sample_id(r["paper"], r["file"], r["snippet"]) for r in rows]
    assert [s.input for s in built.dataset] == [r["prompt"] for r in rows]
    assert built.scorer in (None, []) and built.metadata["source"]["release"] == release.slug


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_failing_answers_get_the_verdicts_and_categories_score_gives(tmp_path):
    """The imperfect demo model's answers on one paper: Inspect's scores are `score`'s, snippet by snippet."""
    from benchmark_core.masking import build_prompt

    pset = load_problemset(DEMO, papers=["rope"])
    lines = [json.loads(line) for line in (DEMO / "predictions" / "demo-imperfect.jsonl").read_text().splitlines()]
    answers = {(r["paper"], r["snippet"]): r["completion"] for r in lines if r["paper"] == "rope"}
    server = ChatServer(answers={build_prompt(p, s): answers[(p.id, s.name)] for p, s in pset.snippets}).start()
    try:
        # bwrap here, while `score` below takes the default backend (docker where an engine answers)
        done = inspect_eval("-T", "papers=rope", "-T", "backend=bwrap", base_url=server.base_url,
                            log_dir=tmp_path / "logs")
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    [info] = list_eval_logs(str(tmp_path / "logs"))
    log = read_eval_log(info.name)
    inspect_verdicts = {s.metadata["snippet"]: (s.scores["sandbox_test"].metadata["passed"],
                                                s.scores["sandbox_test"].metadata["category"]) for s in log.samples}
    results, rope = tmp_path / "r.json", tmp_path / "rope.jsonl"
    rope.write_text("".join(json.dumps(r) + "\n" for r in lines if r["paper"] == "rope"))
    done = subprocess.run([sys.executable, "-m", "benchmark_core", "score", "demo", str(rope), "--papers", "rope",
                           "--quiet", "-o", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    summary = json.loads(results.read_text())
    assert inspect_verdicts == {s["snippet"]: (s["passed"], s["category"]) for s in summary["snippets"]}
    assert {c for _, c in inspect_verdicts.values()} - {None}  # some answers failed, with their category
    metrics = {name: m.value for score in log.results.scores for name, m in score.metrics.items()}
    assert metrics["scaled_pass_rate"] == pytest.approx(summary["summary"]["scaled_pass_rate"])
