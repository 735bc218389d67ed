"""Faults are transient: cancel through the token API, nothing written after a cancel, a dropped DB connection retried."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError

from accounts.services import api_token_create
from leaderboard.models import SnippetResult
from submissions import jobs, services
from submissions.models import PredictionSubmission, ScoringJob, Status

from submissions_support import demo_release_create, predictions_bytes

pytestmark = pytest.mark.django_db

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.RCB_SANDBOX_BACKEND = "local"
    settings.RCB_ALLOW_LOCAL_SANDBOX = True  # the demo papers are our own, trusted code
    # a queue nobody listens to: these tests run jobs themselves; pushes that fail are logged, not raised
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600


@pytest.fixture
def release():
    return demo_release_create(papers=["rope", "focal-loss"])


@pytest.fixture
def token():
    user = User.objects.create_user("alice", "alice@example.org", "pw-alice-123!")
    return api_token_create(user=user, name="test")[1]


def _submit(client, token) -> PredictionSubmission:
    resp = client.post("/api/v1/submissions?model_name=Model-A&allow_partial=1", data=predictions_bytes(papers=["rope"]),
                       content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code in (200, 201, 202), resp.content
    return PredictionSubmission.objects.get(pk=resp.json()["id"])


def test_cancel_through_the_token_api(client, release, token):
    sub = _submit(client, token)
    old = {j.pk: j.rq_job_id for j in sub.jobs.all()}
    # a cookie is not enough for a write, a token is
    assert client.post(f"/api/v1/submissions/{sub.pk}/cancel").status_code == 401
    resp = client.post(f"/api/v1/submissions/{sub.pk}/cancel", HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 200 and resp.json()["outcome"] == "cancelled" and resp.json()["status"] == "cancelled"
    # the workers' attempts find nothing to do, and nothing is written
    assert [jobs.score_paper(pk, rq) for pk, rq in old.items()] == ["skipped", "skipped"]
    assert not SnippetResult.objects.filter(evaluation_id=sub.evaluation_id).exists()
    again = client.post(f"/api/v1/submissions/{sub.pk}/cancel", HTTP_AUTHORIZATION=f"Token {token}")
    assert again.status_code == 409 and "cancelled" in again.json()["error"]
    other = User.objects.create_user("bob", "bob@example.org", "pw-bob-123!")
    bob = api_token_create(user=other, name="b")[1]
    assert client.post(f"/api/v1/submissions/{sub.pk}/cancel", HTTP_AUTHORIZATION=f"Token {bob}").status_code in (403, 404)


def test_nothing_is_written_after_a_cancel(client, release, token, monkeypatch):
    """A cancel that lands while a test runs: its verdict is dropped, the job ends 'lost'."""
    sub = _submit(client, token)
    job = sub.jobs.get(paper__paper_id="rope")
    real = services.run_task

    def cancelled_meanwhile(*args, **kwargs):
        run = real(*args, **kwargs)
        ScoringJob.objects.filter(pk=job.pk).update(status=Status.CANCELLED)  # what submission_cancel does
        return run

    monkeypatch.setattr(services, "run_task", cancelled_meanwhile)
    assert jobs.score_paper(job.pk, job.rq_job_id) == "lost"
    assert not SnippetResult.objects.filter(evaluation_id=sub.evaluation_id, snippet__paper_id=job.paper_id).exists()


def test_a_dropped_database_connection_queues_the_job_again(client, release, token, monkeypatch):
    """A connection lost mid-scoring is not the submission's fault: a new attempt, never 'failed'."""
    sub = _submit(client, token)
    job = sub.jobs.get(paper__paper_id="rope")
    calls = {"n": 0}
    real = services.run_task

    def connection_drops_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OperationalError("terminating connection due to administrator command")
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "run_task", connection_drops_once)
    assert jobs.score_paper(job.pk, job.rq_job_id) == "retry"
    job.refresh_from_db()
    assert job.status == Status.QUEUED and job.attempt == 2 and "database connection was lost" in job.history[-1]["event"]
    assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    sub.refresh_from_db()
    assert sub.status != Status.FAILED
    # each result stored once: the second attempt continued where the first stopped
    rows = SnippetResult.objects.filter(evaluation_id=sub.evaluation_id, snippet__paper_id=job.paper_id)
    assert rows.count() == len(set(rows.values_list("snippet_id", "sample")))
