"""Whole-file and diff answers through the site: the API and the upload form, scored in bwrap."""
from __future__ import annotations

import io
import json
import shutil

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from accounts.services import api_token_create
from benchmark_core.problemset import load_problemset
from submissions import jobs
from submissions.models import PredictionSubmission, Status, SubmissionPrediction
from tests.agent_answers import agent_lines, outside_edit

from submissions_support import DEMO, demo_release_create, in_process_scoring

pytestmark = [pytest.mark.django_db, pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")]
PAPERS = ["rope", "focal-loss"]


@pytest.fixture(autouse=True)
def release(settings):
    in_process_scoring(settings)
    return demo_release_create(papers=PAPERS)


@pytest.fixture
def user():
    return User.objects.create_user("agent", "agent@example.org", "pw-agent-123!")


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _api_post(client, token: str, data: bytes):
    return client.post("/api/v1/submissions?model_name=Agent", data=data, content_type="application/x-ndjson",
                       HTTP_AUTHORIZATION=f"Token {token}")


@pytest.mark.parametrize("kind", ["file_content", "patch"])
def test_api_upload_of_whole_files_or_diffs_scores_100(client, release, user, kind):
    token = api_token_create(user=user, name="t")[1]
    resp = _api_post(client, token, _jsonl(agent_lines(load_problemset(DEMO, papers=PAPERS), kind)))
    assert resp.status_code == 201, resp.content
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    assert {jobs.score_paper(job.pk, job.rq_job_id) for job in sub.jobs.all()} == {"done"}
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED
    assert sub.evaluation.scaled_pass_rate == 100.0
    # what is stored and shown is the snippet's code, not the whole file
    stored = SubmissionPrediction.objects.filter(submission=sub).first()
    assert "# TODO" not in stored.completion and stored.completion.strip() == stored.snippet.code.strip()


def test_a_file_edited_outside_its_snippet_is_refused_by_the_api_and_the_form(client, release, user):
    token = api_token_create(user=user, name="t")[1]
    rows, line, text = outside_edit(load_problemset(DEMO, papers=PAPERS))
    resp = _api_post(client, token, _jsonl(rows))
    assert resp.status_code == 400
    problems = resp.json()["problems"]
    assert [p["line"] for p in problems] == [8]
    assert f"outside the snippet: line {line} is {text!r}" in problems[0]["message"]
    client.force_login(user)
    upload = io.BytesIO(_jsonl(rows))
    upload.name = "agent.jsonl"
    page = client.post(reverse("submissions:submission_create"), {"release": release.pk, "model_name": "W", "file": upload})
    assert page.status_code == 400
    assert f"line 8: file_content: the file differs from the masked file outside the snippet: line {line}" in page.content.decode()
    assert PredictionSubmission.objects.count() == 0 and SubmissionPrediction.objects.count() == 0
