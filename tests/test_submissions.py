"""Submissions without worker processes: upload paths, validation, tokens, quotas, lifecycle, flags.

Jobs run in this process by calling the job entry point with the ids RQ would pass; the sandbox is
bwrap (the local backend is refused for submissions, which one test shows).
"""
from __future__ import annotations

import io
import json
import shutil

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail
from django.core.management import call_command
from django.urls import reverse

from accounts.models import APIToken
from accounts.services import api_token_create, api_token_revoke
from benchmark_core.cli import main as core_main
from catalog.models import Evaluation, LLMModel, SnippetResult
from submissions import jobs, lifecycle, upload
from scoring.jobs import jobs_watchdog
from scoring.models import Job
from submissions.models import PredictionSubmission, Status, SubmissionPrediction
from submissions.selectors import submission_progress

from submissions_support import DEMO, demo_release_create, predictions_bytes

pytestmark = pytest.mark.django_db

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    # a queue nobody listens to: these tests run jobs themselves; pushes that fail are logged, not raised
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    # the heartbeat thread has a connection of its own, which cannot see this test's open
    # transaction; the drills (tests/test_reliability_drills.py) exercise it with committed rows
    settings.RCB_HEARTBEAT_SECONDS = 3600


@pytest.fixture
def release():
    return demo_release_create(papers=["rope", "focal-loss"])


@pytest.fixture
def user():
    return User.objects.create_user("alice", "alice@example.org", "pw-alice-123!")


@pytest.fixture
def token(user):
    return api_token_create(user=user, name="test")[1]


def _api_post(client, token, data: bytes, **params):
    # most tests send one paper of two: a partial file, confirmed (test_partial_coverage.py covers refusal)
    query = "&".join(f"{k}={v}" for k, v in {"model_name": "Model-A", "allow_partial": "1", **params}.items())
    return client.post(
        f"/api/v1/submissions?{query}", data=data, content_type="application/x-ndjson",
        HTTP_AUTHORIZATION=f"Token {token}",
    )


def _stored_counts() -> tuple[int, ...]:
    return (
        PredictionSubmission.objects.count(), SubmissionPrediction.objects.count(), Job.objects.count(),
        Evaluation.objects.count(), LLMModel.objects.count(),
    )


def _run_all_jobs(submission) -> list[str]:
    return [jobs.score_paper(job.pk, job.rq_job_id) for job in submission.jobs.all()]


# -- upload ------------------------------------------------------------------------------------


def test_api_upload_json_lines_creates_one_job_per_paper_and_dedupes(client, release, token):
    data = predictions_bytes(papers=["rope", "focal-loss"])
    resp = _api_post(client, token, data, organisation="Acme", knowledge_cutoff="2024-06", open_weights="1")
    assert resp.status_code == 201, resp.content
    body = resp.json()
    sub = PredictionSubmission.objects.get(pk=body["id"])
    assert body["status"] == "queued" and body["status_url"].endswith(f"/api/v1/submissions/{sub.pk}")
    assert sub.jobs.count() == 2 and sub.predictions_count == len(data.splitlines())
    assert sub.model.knowledge_cutoff_date.isoformat() == "2024-06-30" and sub.model.open_weights
    assert sub.evaluation.is_public is False
    assert body["progress"]["total"] == sum(j.tasks_total for j in sub.jobs.all()) > 0
    again = _api_post(client, token, data)
    assert again.status_code == 200 and again.json()["id"] == sub.pk and again.json()["duplicate"] is True
    assert again.json()["duplicate_renamed"] is False
    assert again.json()["duplicate_note"].startswith(f"This file is identical to your submission #{sub.pk} (Model-A,")
    assert PredictionSubmission.objects.count() == 1
    # under another model name: said, not silently the old one under its old name
    renamed = _api_post(client, token, data, model_name="Model-B").json()
    assert renamed["id"] == sub.pk and renamed["model_name"] == "Model-A" and renamed["duplicate_renamed"] is True
    assert "it stays under the model name 'Model-A', not 'Model-B'" in renamed["duplicate_note"]
    assert PredictionSubmission.objects.count() == 1


def test_api_upload_multipart(client, release, token):
    upload = io.BytesIO(predictions_bytes(papers=["rope"]))
    upload.name = "preds.jsonl"
    resp = client.post(
        "/api/v1/submissions", {"file": upload, "model_name": "Multi", "without_paper": "1", "temperature": "0.2",
                                "allow_partial": "1"},
        HTTP_AUTHORIZATION=f"Token {token}",
    )
    assert resp.status_code == 201, resp.content
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    assert sub.file_name == "preds.jsonl" and sub.with_paper is False and sub.decoding == {"temperature": 0.2}


def test_api_upload_refuses_a_field_it_does_not_take_and_stores_nothing(client, release, token):
    """A misspelled ``without_paper`` would rank a run without the paper among those with it: a name
    the upload does not take is a 400 naming it (body and multipart uploads alike), nothing stored."""
    from submissions.api import UPLOAD_FIELDS

    from leaderboard.openapi import PATHS

    documented = {p["name"] for p in PATHS["/submissions"]["post"]["parameters"]}
    assert documented == set(UPLOAD_FIELDS)  # the document lists exactly what is taken
    data = predictions_bytes(papers=["rope"])
    before = _stored_counts()
    resp = _api_post(client, token, data, withoutpaper="1", organisaton="Acme")
    assert resp.status_code == 400, resp.content
    body = resp.json()
    assert set(body["fields"]) == {"withoutpaper", "organisaton"} and "without_paper" in body["fields"]["withoutpaper"][0]
    assert "nothing was stored" in body["error"] and _stored_counts() == before
    # every problem in one answer: an unknown name beside a bad value
    both = _api_post(client, token, data, colour="red", temperature="hot").json()
    assert {"colour", "temperature"} <= set(both["fields"])
    upload = io.BytesIO(data)
    upload.name = "preds.jsonl"
    multi = client.post("/api/v1/submissions?release=" + release.slug,
                        {"file": upload, "model_name": "Multi", "without-paper": "1", "release": release.slug,
                         "allow_partial": "1"}, HTTP_AUTHORIZATION=f"Token {token}")
    assert multi.status_code == 400 and set(multi.json()["fields"]) == {"without-paper", "release"}
    assert _stored_counts() == before
    # a multipart upload may carry its fields in the query too, once each
    upload.seek(0)
    ok = client.post("/api/v1/submissions?without_paper=1&allow_partial=1", {"file": upload, "model_name": "Multi"},
                     HTTP_AUTHORIZATION=f"Token {token}")
    assert ok.status_code == 201, ok.content
    assert PredictionSubmission.objects.get(pk=ok.json()["id"]).with_paper is False
    listed = client.get("/api/v1/submissions?pgae=2", HTTP_AUTHORIZATION=f"Token {token}")
    assert listed.status_code == 400 and "'pgae'" in listed.json()["error"]


def test_api_needs_a_valid_token(client, release, user, token):
    data = predictions_bytes(papers=["rope"])
    assert _api_post(client, "nope", data).status_code == 401
    assert client.post("/api/v1/submissions", data=data, content_type="application/x-ndjson").status_code == 401
    stored = APIToken.objects.get(user=user)
    assert token not in (stored.key_hash, stored.prefix) and len(stored.key_hash) == 64
    assert api_token_revoke(user=user, token_id=stored.pk)
    assert _api_post(client, token, data).status_code == 401
    assert PredictionSubmission.objects.count() == 0


def test_invalid_file_lists_every_bad_line_and_stores_nothing(client, release, token):
    good = predictions_bytes(papers=["rope"]).splitlines()
    lines = [
        good[0],
        b"{not json",
        json.dumps({"paper": "nope", "snippet": "x", "completion": "pass"}).encode(),
        json.dumps({"paper": "rope", "snippet": "no such snippet", "completion": "pass"}).encode(),
        b'{"paper": "rope", "snippet": "\xff\xfe", "completion": "x"}',
        json.dumps({"paper": "rope", "completion": "pass"}).encode(),
        good[0],  # duplicate of line 1
    ]
    before = _stored_counts()
    resp = _api_post(client, token, b"\n".join(lines))
    assert resp.status_code == 400
    body = resp.json()
    assert [p["line"] for p in body["problems"]] == [2, 3, 4, 5, 6, 7]
    messages = " | ".join(p["message"] for p in body["problems"])
    for expected in ("malformed JSON", "unknown paper 'nope'", "no snippet 'no such snippet'", "not UTF-8",
                     "missing field(s): snippet", "duplicate prediction"):
        assert expected in messages
    assert "nothing was stored" in body["error"]
    assert _stored_counts() == before


def test_web_form_upload_errors_and_success(client, release, user):
    client.force_login(user)
    bad = io.BytesIO(b'{"paper": "rope", "snippet": "nope", "completion": ""}\n\xff\n')
    bad.name = "bad.jsonl"
    resp = client.post(reverse("submissions:submission_create"), {"release": release.pk, "model_name": "W", "file": bad})
    assert resp.status_code == 400
    text = resp.content.decode()
    assert "line 1: unknown snippet" in text and "line 2: not UTF-8" in text
    assert PredictionSubmission.objects.count() == 0
    good = io.BytesIO(predictions_bytes(papers=["rope"]))
    good.name = "good.jsonl"
    resp = client.post(reverse("submissions:submission_create"), {"release": release.pk, "model_name": "W", "file": good,
                                                                 "allow_partial": "1"})
    sub = PredictionSubmission.objects.get()
    assert resp.status_code == 302 and resp["Location"] == reverse("submissions:submission_detail", args=[sub.pk])
    page = client.get(resp["Location"])
    assert page.status_code == 200 and b"data-progress-url" in page.content and b"progress.js" in page.content
    # the same file again: under the same name, its page with a note; under another, the form says
    # the name was not taken and offers the earlier submission
    def again(name: str):
        upload = io.BytesIO(predictions_bytes(papers=["rope"]))
        upload.name = "good.jsonl"
        return client.post(reverse("submissions:submission_create"),
                           {"release": release.pk, "model_name": name, "file": upload, "allow_partial": "1"})

    same = again("W")
    assert same.status_code == 302 and same["Location"] == reverse("submissions:submission_detail", args=[sub.pk])
    assert f"identical to your submission #{sub.pk}" in client.get(same["Location"]).content.decode()
    other = again("<b>Other</b>")
    text = other.content.decode()
    assert other.status_code == 200 and 'id="duplicate-notice"' in text and PredictionSubmission.objects.count() == 1
    assert "it stays under the model name &#x27;W&#x27;, not &#x27;&lt;b&gt;Other&lt;/b&gt;&#x27;" in text
    assert f'id="open-duplicate" href="{reverse("submissions:submission_detail", args=[sub.pk])}"' in text


@pytest.mark.django_db(transaction=True)  # the live server reads the token from its own connection
def test_oversize_upload_is_refused_with_a_message_everywhere(client, release, user, token, settings, tmp_path, live_server):
    """A 50 MB predictions file: 413 with the limit named, on the API, the form and the CLI."""
    line = json.dumps({"paper": "rope", "snippet": "inverse frequencies", "completion": "x" * (1 << 20)}) + "\n"
    data = (line * 50).encode()
    assert len(data) >= 50 * 1024 * 1024
    resp = _api_post(client, token, data)
    assert resp.status_code == 413 and "limit of 20 MB" in resp.json()["error"]
    client.force_login(user)
    upload = io.BytesIO(data)
    upload.name = "big.jsonl"
    page = client.post(reverse("submissions:submission_create"), {"release": release.pk, "model_name": "B", "file": upload,
                                                                   "allow_partial": "1"})
    assert page.status_code == 413 and "the limit is 20 MB" in page.content.decode()
    path = tmp_path / "big.jsonl"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    code = core_main(["submit", "--url", live_server.url, "--token", token, "--model-name", "B", str(path)], out, err)
    assert code == 1 and "20 MB" in err.getvalue()
    assert PredictionSubmission.objects.count() == 0


def test_quota_counts_neither_failed_nor_cancelled(client, release, token, user, settings):
    settings.RCB_SUBMISSIONS_PER_DAY = 1
    lines = predictions_bytes(papers=["rope"]).splitlines(keepends=True)
    first = _api_post(client, token, b"".join(lines[:3]))
    assert first.status_code == 201
    second = _api_post(client, token, b"".join(lines[:4]))
    assert second.status_code == 429 and "quota" in second.json()["error"]
    sub = PredictionSubmission.objects.get(pk=first.json()["id"])
    lifecycle.submission_cancel(submission=sub, user=user)
    assert _api_post(client, token, b"".join(lines[:4])).status_code == 201


def test_create_token_command_refuses_unknown_users_unless_asked_to_create_one(client, release):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="no user 'robot'.*--create"):
        call_command("create_token", "robot", stdout=io.StringIO(), stderr=io.StringIO())
    assert not User.objects.filter(username="robot").exists()
    out, err = io.StringIO(), io.StringIO()
    call_command("create_token", "robot", "--create", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    robot = User.objects.get(username="robot")
    assert not robot.has_usable_password() and "created user robot" in err.getvalue()
    assert _api_post(client, raw, predictions_bytes(papers=["rope"])).status_code == 201
    # an existing user needs no flag; a second token is a new one
    out = io.StringIO()
    call_command("create_token", "robot", stdout=out, stderr=io.StringIO())
    assert out.getvalue().strip() != raw and robot.api_tokens.count() == 2


# -- scoring in process -----------------------------------------------------------------------


@needs_bwrap
def test_scoring_matches_the_engine_cli_and_a_rerun_never_double_counts(client, release, user, token, tmp_path):
    data = predictions_bytes("demo-imperfect", papers=["rope"])
    resp = _api_post(client, token, data)
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    assert set(_run_all_jobs(sub)) == {"done"}
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED and sub.finished_at is not None
    results = SnippetResult.objects.filter(evaluation=sub.evaluation, snippet__paper__paper_id="rope")
    rows = {(r.snippet.paper.paper_id, r.snippet.name, r.sample): r.passed for r in results}
    # the release's other paper has no prediction: every snippet of it is stored as missing
    missing = SnippetResult.objects.filter(evaluation=sub.evaluation, snippet__paper__paper_id="focal-loss")
    assert missing.exists() and set(missing.values_list("category", flat=True)) == {"missing"}
    # the engine's own CLI on the same file must give the same verdicts, snippet by snippet
    preds = tmp_path / "p.jsonl"
    preds.write_bytes(data)
    out_json = tmp_path / "r.json"
    assert core_main(["score", str(DEMO), str(preds), "--papers", "rope", "--backend", "bwrap", "-o", str(out_json),
                      "--quiet"], io.StringIO(), io.StringIO()) == 0
    cli = {(s["paper"], s["snippet"], s["sample"]): s["passed"] for s in json.loads(out_json.read_text())["snippets"]}
    assert rows == cli and 0 < sum(rows.values()) < len(rows)
    summary = json.loads(out_json.read_text())["summary"]
    assert sub.evaluation.per_paper["rope"]["scaled_pass_rate"] == pytest.approx(summary["scaled_pass_rate"])
    progress = submission_progress(submission=sub)
    assert progress["done"] == progress["total"] == len(rows) + missing.count() and progress["percent"] == 100.0
    # the owner is told, once
    assert len(mail.outbox) == 1 and "finished" in mail.outbox[0].subject
    # a second attempt of a finished job does nothing; an attempt after a crash scores what is
    # missing and never adds a row twice
    job = sub.jobs.get(paper__paper_id="rope")
    assert jobs.score_paper(job.pk, job.rq_job_id) == "skipped"
    Job.objects.filter(pk=job.pk).update(status=Status.QUEUED)
    SnippetResult.objects.filter(evaluation=sub.evaluation, snippet__name="inverse frequencies").delete()
    assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    assert results.count() == len(rows) and results.filter(passed=True).count() == sum(rows.values())


@needs_bwrap
def test_owner_sees_outputs_others_do_not_and_publish_puts_the_model_on_the_leaderboard(client, release, user, token):
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope", "focal-loss"]),
                                                        model_name="Published-Model").json()["id"])
    _run_all_jobs(sub)
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED
    client.force_login(user)
    page = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert "Test output" in page and 'id="publish"' in page
    api = client.get(f"/api/v1/submissions/{sub.pk}?results=1").json()
    assert len(api["results"]) == api["progress"]["total"] and {"passed", "category", "output_tail"} <= set(api["results"][0])
    other = User.objects.create_user("bob", "bob@example.org", "pw-bob-123!")
    client.force_login(other)
    assert client.get(reverse("submissions:submission_detail", args=[sub.pk])).status_code == 404
    assert client.get(f"/api/v1/submissions/{sub.pk}").status_code == 404
    board = client.get(f"/leaderboard/?release={release.slug}").content.decode()
    assert "Published-Model" not in board
    client.force_login(user)
    resp = client.post(reverse("submissions:submission_action", args=[sub.pk, "publish"]))
    assert resp.status_code == 302
    sub.refresh_from_db()
    assert sub.evaluation.is_public and sub.published_at
    assert "Published-Model" in client.get(f"/leaderboard/?release={release.slug}").content.decode()
    # an admin hides it: gone from the leaderboard
    lifecycle.evaluation_moderate(evaluation=sub.evaluation, hidden=True)
    assert "Published-Model" not in client.get(f"/leaderboard/?release={release.slug}").content.decode()


def test_publish_refused_before_finished(client, release, user, token):
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope"])).json()["id"])
    client.force_login(user)
    client.post(reverse("submissions:submission_action", args=[sub.pk, "publish"]))
    sub.refresh_from_db()
    assert not sub.evaluation.is_public and sub.published_at is None


def test_local_sandbox_is_refused_for_submissions(client, release, token, settings):
    settings.RCB_SANDBOX_BACKEND = "local"
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope"])).json()["id"])
    _run_all_jobs(sub)
    # rope has predictions and needs the sandbox; focal-loss has none (all missing) and needs none
    assert sub.jobs.get(paper__paper_id="rope").status == Status.FAILED
    sub.refresh_from_db()
    assert sub.status == Status.FAILED and "refused for submissions" in sub.failure_reason
    assert sub.jobs.filter(status=Status.RUNNING).count() == 0


def test_cancel_then_rerun(client, release, user, token, settings):
    settings.RCB_SANDBOX_BACKEND = "local"
    settings.RCB_ALLOW_LOCAL_SANDBOX = True  # the demo papers are our own, trusted code
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope"])).json()["id"])
    old = {j.pk: j.rq_job_id for j in sub.jobs.all()}
    client.force_login(user)
    client.post(reverse("submissions:submission_action", args=[sub.pk, "cancel"]))
    sub.refresh_from_db()
    assert sub.status == Status.CANCELLED and set(sub.jobs.values_list("status", flat=True)) == {Status.CANCELLED}
    assert [jobs.score_paper(pk, rq) for pk, rq in old.items()] == ["skipped", "skipped"]
    client.post(reverse("submissions:submission_action", args=[sub.pk, "rerun"]))
    sub.refresh_from_db()
    assert sub.status == Status.QUEUED and all(j.attempt == 2 for j in sub.jobs.all())
    assert set(_run_all_jobs(sub)) == {"done"}
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED


def test_watchdog_requeues_a_silent_job_and_gives_up_after_max_attempts(client, release, token, settings):
    settings.RCB_JOB_MAX_ATTEMPTS = 2
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope"])).json()["id"])
    job = sub.jobs.get(paper__paper_id="rope")
    from django.utils import timezone
    import datetime as dt

    long_ago = timezone.now() - dt.timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, heartbeat_at=long_ago, worker="dead:1")
    report = jobs_watchdog(stale_after=60)
    assert report["requeued"] == [job.pk]
    fresh = Job.objects.get(pk=job.pk)
    assert fresh.status == Status.QUEUED and fresh.attempt == 2 and fresh.rq_job_id != job.rq_job_id
    assert jobs.score_paper(job.pk, job.rq_job_id) == "skipped"  # the dead attempt's RQ job is void
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, heartbeat_at=long_ago)
    assert jobs_watchdog(stale_after=60)["failed"] == [job.pk]
    fresh.refresh_from_db()
    assert fresh.status == Status.FAILED and "stopped answering 2 times" in fresh.error


def test_flags_for_reviewers(client, release, token, user):
    rows = [json.loads(ln) for ln in predictions_bytes("demo-perfect", papers=["rope"]).splitlines()]
    rows[0]["completion"] = "import os\nos._exit(0)"
    rows[1]["completion"] = "import signal\nsignal.alarm(0)"
    rows[2]["completion"] = "import builtins\nbuiltins.print = lambda *a: None"
    data = "\n".join(json.dumps(r) for r in rows).encode()
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, data).json()["id"])
    flags = sub.flags
    assert [f["snippet"] for f in flags["exits"]] == [rows[0]["snippet"]]
    assert [f["snippet"] for f in flags["signals"]] == [rows[1]["snippet"]]
    assert [f["snippet"] for f in flags["monkeypatch"]] == [rows[2]["snippet"]]
    assert flags["checked"] == len(rows) and 0 < flags["identical_to_reference"] <= len(rows) - 3
    reviewer = User.objects.create_user("rev", "rev@example.org", "pw-rev-123!")
    reviewer.groups.add(Group.objects.get(name="reviewers"))
    client.force_login(reviewer)
    page = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert "Automatic flags" in page and "Test output" not in page
    client.force_login(user)
    assert "Automatic flags" not in client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()


def test_a_release_without_code_takes_no_submission(client, release, user, token):
    from django.utils import timezone

    from catalog.models import Paper, Release, ReleasePaper

    figures_only = Release.objects.create(name="Published figures", slug="figures", status=Release.PUBLISHED,
                                          published_at=timezone.now())
    ReleasePaper.objects.create(release=figures_only, paper=Paper.objects.get(paper_id="rope"), folder="")
    resp = _api_post(client, token, predictions_bytes(papers=["rope"]), release="figures")
    error = resp.json()["error"]
    assert resp.status_code == 400 and resp.json()["release"] == "figures"
    assert "release Published figures takes no submissions on this site until the code of its papers is attached" in error
    assert "python manage.py import_pset FOLDER" in error and f"open for submissions here: {release.slug}" in error
    # an unknown slug, and a draft (staff-only), are no such release
    Release.objects.create(name="Secret draft", slug="secret", status=Release.DRAFT)
    for slug in ("nope", "secret"):
        error = _api_post(client, token, predictions_bytes(papers=["rope"]), release=slug).json()["error"]
        assert error.startswith(f"no such release '{slug}'") and "Secret" not in error
    # without a slug: the default release, not another one silently
    Release.objects.filter(pk=release.pk).update(is_default=False)
    Release.objects.filter(pk=figures_only.pk).update(is_default=True)
    resp = _api_post(client, token, predictions_bytes(papers=["rope"]))
    assert resp.status_code == 400 and "Published figures takes no submissions" in resp.json()["error"]
    # the submit page (the nav's Submit link on that release) and the release page say it too
    client.force_login(user)
    page = client.get(reverse("submissions:submission_create") + "?release=figures").content.decode()
    assert 'id="release-closed"' in page and "takes no submissions on this site until the code" in page
    assert "import_pset FOLDER" in page and f"This form offers the releases that take submissions on this site:" in page
    assert client.get(reverse("submissions:submission_create") + f"?release={release.slug}").content.decode().count(
        'id="release-closed"') == 0
    detail = client.get(reverse("leaderboard:release_detail", args=["figures"])).content.decode()
    assert 'id="submissions-closed"' in detail and "takes no submissions on this site" in detail
    with pytest.raises(upload.SubmissionError, match="no paper.s code is attached here"):
        upload.prediction_submission_create(user=user, release=figures_only, data=predictions_bytes(papers=["rope"]), allow_partial=True,
                                              model_name="X")
    assert PredictionSubmission.objects.count() == 0


@pytest.mark.django_db(transaction=True)  # the live server reads the token from its own connection
def test_cli_lists_every_bad_line_and_reports_connection_problems(release, token, tmp_path, live_server):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"paper": "rope", "snippet": "nope", "completion": ""}\n{broken\n')
    out, err = io.StringIO(), io.StringIO()
    code = core_main(["submit", "--url", live_server.url, "--token", token, "--model-name", "M", str(bad)], out, err)
    assert code == 1
    assert f"{bad}:1: unknown snippet" in err.getvalue() and f"{bad}:2: malformed JSON" in err.getvalue()
    assert PredictionSubmission.objects.count() == 0
    code = core_main(["submit", "--url", "http://127.0.0.1:9", "--token", token, "--model-name", "M", str(bad)],
                     io.StringIO(), err := io.StringIO())
    assert code == 2 and "cannot reach" in err.getvalue()
    good = tmp_path / "good.jsonl"
    good.write_bytes(predictions_bytes(papers=["rope"]))
    out = io.StringIO()
    assert core_main(["submit", "--url", live_server.url, "--token", token, "--model-name", "M", str(good)], out,
                     io.StringIO()) == 0
    sub = PredictionSubmission.objects.get()
    assert out.getvalue().splitlines() == [
        f"submission {sub.pk} queued",
        f"status: {live_server.url}/api/v1/submissions/{sub.pk}",
        f"page: {live_server.url}/submissions/{sub.pk}/",
    ]


def test_admin_actions_hide_and_verify(client, release, token):
    sub = PredictionSubmission.objects.get(pk=_api_post(client, token, predictions_bytes(papers=["rope"])).json()["id"])
    admin = User.objects.create_superuser("root", "root@example.org", "pw-root-123!x")
    client.force_login(admin)
    url = reverse("admin:submissions_predictionsubmission_changelist")
    for action in ("hide", "mark_verified"):
        resp = client.post(url, {"action": action, "_selected_action": [sub.pk]})
        assert resp.status_code == 302
    sub.evaluation.refresh_from_db()
    assert sub.evaluation.hidden and sub.evaluation.verified
    assert client.get(reverse("admin:submissions_predictionsubmission_change", args=[sub.pk])).status_code == 200
    assert client.get(reverse("admin:scoring_job_changelist")).status_code == 200
    client.force_login(sub.user)
    page = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert "badge-verified" in page and "hidden by an admin" in page


def test_api_lists_ones_own_submissions_a_page_at_a_time(client, release, user, token, settings):
    settings.RCB_TABLE_ROWS = 2
    lines = predictions_bytes(papers=["rope"]).splitlines(keepends=True)
    mine = [_api_post(client, token, b"".join(lines[i:]), model_name=f"M{i}").json()["id"] for i in range(3)]
    other = User.objects.create_user("zed", "zed@example.org", "pw-zed-123456!")
    _api_post(client, api_token_create(user=other)[1], predictions_bytes(papers=["rope"]), model_name="Theirs")
    assert client.get("/api/v1/submissions").status_code == 401
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    first = client.get("/api/v1/submissions", **auth).json()
    assert first["count"] == 3 and first["pages"] == 2 and first["page"] == 1 and first["page_size"] == 2
    assert [r["id"] for r in first["results"]] == mine[::-1][:2]  # newest first
    assert first["previous"] is None and first["next"].endswith("/api/v1/submissions?page=2")
    row = first["results"][0]
    assert row["model_name"] == "M2" and row["release"] == release.slug and row["status"] == "queued"
    assert row["status_url"].endswith(f"/api/v1/submissions/{mine[2]}") and row["scaled_pass_rate"] is None
    second = client.get(first["next"], **auth).json()
    assert [r["id"] for r in second["results"]] == [mine[0]] and second["next"] is None
    assert "Theirs" not in str(first) + str(second)
    missing = client.get("/api/v1/submissions?page=3", **auth)
    assert missing.status_code == 404 and "page=1 to page=2" in missing.json()["error"]
    # the owner's session works for reading too
    client.force_login(user)
    assert client.get("/api/v1/submissions").json()["count"] == 3
