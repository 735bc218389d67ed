"""The run card travels with a submission: generate from a site's release, submit, score, show it."""
from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from accounts.services import api_token_create
from benchmark_core.cli import main as core_main
from benchmark_core.generate import card_path
from catalog.models import Evaluation
from submissions import jobs, lifecycle
from submissions.models import PredictionSubmission

from submissions_support import DEMO, bwrap_jobs_settings, demo_release_create

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine.chat_server import ChatServer, reference_answers  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)  # the live server's thread must see the rows
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
PAPERS = ["rope", "focal-loss"]


@pytest.fixture(autouse=True)
def _settings(settings):
    bwrap_jobs_settings(settings)


@pytest.fixture
def release():
    release = demo_release_create(papers=PAPERS)
    release.content_hash = "c0ffee" * 10 + "beef"
    release.save()
    return release


@pytest.fixture
def token():
    user = User.objects.create_user("carol", "carol@example.org", "pw-carol-123!")
    return api_token_create(user=user, name="t")[1]


@pytest.fixture
def chat():
    from benchmark_core.problemset import load_problemset

    server = ChatServer(answers=reference_answers(load_problemset(DEMO, papers=PAPERS))).start()
    yield server
    server.stop()


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = core_main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@needs_bwrap
def test_generate_from_the_site_release_submit_score_and_show_the_card(release, token, chat, live_server, tmp_path,
                                                                       client):
    out = tmp_path / "oracle.jsonl"
    code, stdout, stderr = run("generate", "--url", live_server.url, "--release", release.slug,
                               "--base-url", chat.base_url, "--model", "oracle", "--temperature", "0.2",
                               "--seed", "7", "--price-in", "3", "--price-out", "15", "-o", str(out))
    assert code == 0, stderr
    snippets = release.snippets.count()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == snippets == len(chat.given)  # every prompt was the site's and known to the server
    card = json.loads(card_path(out).read_text())
    assert card["source"] == {"kind": "release", "site": live_server.url, "release": release.slug,
                              "hash": release.content_hash}
    tin = sum(g["usage"]["prompt_tokens"] for g in chat.given)
    tout = sum(g["usage"]["completion_tokens"] for g in chat.given)
    assert card["tokens"] == {"input": tin, "output": tout}

    code, stdout, stderr = run("submit", "--url", live_server.url, "--token", token, "--model-name", "Oracle",
                               str(out))
    assert code == 0, stderr
    sub = PredictionSubmission.objects.get()
    ev = sub.evaluation
    assert ev.run_card["tokens"] == {"input": tin, "output": tout}
    assert ev.run_card["decoding"] == {"temperature": 0.2, "seed": 7}
    assert ev.run_card["counts"]["answers"] == snippets
    assert ev.decoding == {"temperature": 0.2}  # taken from the card: the command line said nothing
    expected_cost = tin * 3 / 1e6 + tout * 15 / 1e6
    assert ev.cost_per_snippet == pytest.approx(expected_cost / snippets)
    assert "site" not in ev.run_card["source"] and ev.run_card["runs"] == 1  # no URL or path kept, runs counted

    own = client.get(f"/submissions/{sub.pk}/")  # the owner sees the card before anything is public
    assert own.status_code == 302  # (signed out: to the login page)
    client.force_login(sub.user)
    detail = client.get(f"/submissions/{sub.pk}/").content.decode()
    assert f"{snippets} answers · {tin} tokens in / {tout} out · ${expected_cost:.4f}" in detail
    client.logout()

    for job in sub.jobs.all():
        jobs.score_paper(job.pk, job.rq_job_id)
    sub.refresh_from_db()
    assert sub.status == "finished"
    lifecycle.submission_publish(submission=sub, user=sub.user)
    ev.refresh_from_db()
    assert ev.is_public and ev.scaled_pass_rate == 100.0

    page = client.get(f"/models/{ev.model.key}/?release={release.slug}").content.decode()
    assert f"{tin} in / {tout} out" in page
    # (PostgreSQL's jsonb orders keys its own way)
    assert "<code>temperature=0.2</code>" in page and "<code>seed=7</code>" in page
    assert f"{snippets} of {snippets} in {snippets} requests" in page
    assert f"${expected_cost:,.2f}" in page or f"${expected_cost:.3g}" in page
    board = client.get(f"/leaderboard/?release={release.slug}").content.decode()
    assert f"${expected_cost / snippets:.3g} / snippet" in board
    api = client.get(f"/api/v1/models/{ev.model.key}?release={release.slug}").json()
    assert api["evaluations"][0]["run_card"]["tokens"]["input"] == tin
    rows = client.get(f"/api/v1/leaderboard?release={release.slug}").json()
    row = next(r for r in rows["rows"] if r["name"] == "Oracle")
    assert row["cost_per_snippet"] == pytest.approx(expected_cost / snippets)
    csv_text = client.get(f"/api/v1/leaderboard?release={release.slug}&format=csv").content.decode()
    header, *lines = csv_text.splitlines()
    oracle = dict(zip(header.split(","), next(line for line in lines if ",Oracle," in line).split(",")))
    assert float(oracle["cost_per_snippet"]) == pytest.approx(expected_cost / snippets)


def test_a_bad_run_card_is_refused_and_nothing_is_stored(release, token, client):
    data = b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x"}\n'
    for card, why in (("[1, 2]", "must be a JSON object"), ('{"tokens": {"input": [1]}}', "tokens.input"),
                      ("{not json", "not a run card"), ('{"samples": "three"}', "'samples' must be int")):
        response = client.post(f"/api/v1/submissions?model_name=M&allow_partial=1&run_card={card}", data=data,
                               content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
        assert response.status_code == 400, card
        assert why in response.json()["fields"]["run_card"][0]
    assert not PredictionSubmission.objects.exists() and not Evaluation.objects.exists()


def test_submit_refuses_settings_that_contradict_the_card_before_sending(tmp_path):
    out = tmp_path / "p.jsonl"
    out.write_text('{"paper": "rope", "snippet": "inverse frequencies", "completion": "x"}\n')
    card_path(out).write_text(json.dumps({"model": "m", "decoding": {"temperature": 0.2}, "with_paper": True}))
    # nothing listens there: the command must stop before any connection
    code, _, stderr = run("submit", "--url", "http://127.0.0.1:9", "--token", "t", "--model-name", "M",
                          "--temperature", "0.7", str(out))
    assert code == 2 and "--temperature 0.7 but the run card records 0.2" in stderr
    code, _, stderr = run("submit", "--url", "http://127.0.0.1:9", "--token", "t", "--model-name", "M",
                          "--without-paper", str(out))
    assert code == 2 and "--without-paper but the run card records prompts with the paper" in stderr


def test_run_command_generates_scores_reports_and_submits(release, token, chat, live_server, tmp_path):
    out = tmp_path / "p.jsonl"
    code, stdout, stderr = run("run", str(DEMO), "--papers", ",".join(PAPERS), "--base-url", chat.base_url,
                               "--model", "oracle", "--backend", "local", "-o", str(out),
                               "--submit-to", live_server.url, "--token", token, "--release", release.slug)
    assert code == 0, stderr
    results = json.loads((tmp_path / "p.results.json").read_text())
    assert results["summary"]["scaled_pass_rate"] == 100.0
    assert "Scaled pass rate 100.00 %" in stdout  # the report
    sub = PredictionSubmission.objects.get()
    assert sub.model_name == "oracle" and sub.evaluation.run_card["model"] == "oracle"
    assert sub.predictions_count == release.snippets.count()


def test_the_web_form_takes_a_run_card_file(release, client):
    user = User.objects.create_user("dave", "dave@example.org", "pw-dave-123!")
    client.force_login(user)
    card = {"model": "m", "endpoint_host": "127.0.0.1:8001", "decoding": {"temperature": 0.3, "seed": 1},
            "tokens": {"input": 1234, "output": 56}, "cost_usd": 0.5, "cost_per_snippet_usd": 0.01,
            "counts": {"answers": 1, "expected": 1}, "samples": 1, "with_paper": True}

    def post(card_bytes: bytes):
        data = io.BytesIO(b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x"}\n')
        data.name = "p.jsonl"
        upload = io.BytesIO(card_bytes)
        upload.name = "p.card.json"
        return client.post("/submit/", {"release": release.pk, "model_name": "Form model", "file": data,
                                        "run_card": upload, "allow_partial": "1"})

    bad = post(b'{"tokens": "many"}')
    assert bad.status_code == 400 and "run card: &#x27;tokens&#x27; must be an object" in bad.content.decode()
    assert not PredictionSubmission.objects.exists()
    assert post(json.dumps(card).encode()).status_code == 302
    ev = PredictionSubmission.objects.get().evaluation
    assert ev.run_card["tokens"] == {"input": 1234, "output": 56} and ev.cost_per_snippet == 0.01
    assert ev.decoding == {"temperature": 0.3}  # the form left it empty: the card's
