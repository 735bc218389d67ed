"""Faults are transient: cancel through the token API, nothing written after a cancel, a dropped DB connection retried."""
from __future__ import annotations

import os

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError

from accounts.services import api_token_create
from catalog.models import SnippetResult
from scoring import evaluate
from submissions import jobs, upload
from scoring.jobs import job_retry_after_db_loss, jobs_watchdog
from scoring.models import Job
from submissions.models import PredictionSubmission, Status

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
    real = evaluate.run_tasks  # the one call of the engine (scoring.evaluate.tasks_run)

    def cancelled_meanwhile(tasks, *, progress, **kwargs):
        def cancel_then_report(run):  # the first test has run; the cancel lands before its verdict is written
            Job.objects.filter(pk=job.pk).update(status=Status.CANCELLED)  # what submission_cancel does
            progress(run)

        return real(tasks, progress=cancel_then_report, **kwargs)

    monkeypatch.setattr(evaluate, "run_tasks", cancelled_meanwhile)
    assert jobs.score_paper(job.pk, job.rq_job_id) == "lost"
    assert not SnippetResult.objects.filter(evaluation_id=sub.evaluation_id, snippet__paper_id=job.paper_id).exists()


def test_a_dropped_database_connection_queues_the_job_again(client, release, token, monkeypatch):
    """A connection lost mid-scoring is not the submission's fault: a new attempt, never 'failed'."""
    sub = _submit(client, token)
    job = sub.jobs.get(paper__paper_id="rope")
    calls = {"n": 0}
    real = evaluate.run_tasks  # the one call of the engine (scoring.evaluate.tasks_run)

    def connection_drops_once(tasks, *, progress, **kwargs):
        def write(run):  # the second verdict's write meets a dropped connection
            calls["n"] += 1
            if calls["n"] == 2:
                raise OperationalError("terminating connection due to administrator command")
            progress(run)

        return real(tasks, progress=write, **kwargs)

    monkeypatch.setattr(evaluate, "run_tasks", connection_drops_once)
    assert jobs.score_paper(job.pk, job.rq_job_id) == "retry"
    job.refresh_from_db()
    assert job.status == Status.QUEUED and job.attempt == 2 and "database connection was lost" in job.history[-1]["event"]
    assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    sub.refresh_from_db()
    assert sub.status != Status.FAILED
    # each result stored once: the second attempt continued where the first stopped
    rows = SnippetResult.objects.filter(evaluation_id=sub.evaluation_id, snippet__paper_id=job.paper_id)
    assert rows.count() == len(set(rows.values_list("snippet_id", "sample")))


def test_a_dropped_connection_while_settling_the_job_queues_it_again(client, release, token, monkeypatch):
    """Lost around the scoring (claim, the submission's refresh), not in it: the same remedy, never RQ's failure."""
    sub = _submit(client, token)
    job = sub.jobs.get(paper__paper_id="rope")
    real = jobs.submission_status_refresh  # what the kind's settle calls around each attempt
    calls = {"n": 0}

    def refresh_drops_once(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:  # the refresh right after the claim
            raise OperationalError("server closed the connection unexpectedly")
        return real(**kwargs)

    monkeypatch.setattr(jobs, "submission_status_refresh", refresh_drops_once)
    assert jobs.score_paper(job.pk, job.rq_job_id) == "retry"
    job.refresh_from_db()
    assert job.status == Status.QUEUED and job.attempt == 2
    assert "database connection was lost" in job.history[-1]["event"]
    assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    assert Job.objects.get(pk=job.pk).status == Status.FINISHED


def test_new_attempts_after_dropped_connections_do_not_count_as_dead_workers(client, release, token, settings):
    """RCB_JOB_MAX_ATTEMPTS is about workers that die on a job: two database losses leave a dead worker one more try."""
    import datetime as dt

    from django.utils import timezone

    settings.RCB_JOB_MAX_ATTEMPTS = 2
    sub = _submit(client, token)
    job = sub.jobs.get(paper__paper_id="rope")
    for _ in range(2):  # what _job_retry_after_db_loss leaves: a new attempt with the reason
        Job.objects.filter(pk=job.pk).update(status=Status.RUNNING)
        job_retry_after_db_loss(job_id=job.pk, rq_job_id=Job.objects.get(pk=job.pk).rq_job_id,
                                          reason="OperationalError: terminating connection")
    assert Job.objects.get(pk=job.pk).attempt == 3
    long_ago = timezone.now() - dt.timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, heartbeat_at=long_ago, worker="dead:1")
    assert jobs_watchdog(stale_after=60) == {"requeued": [job.pk], "failed": []}
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, heartbeat_at=long_ago, worker="dead:2")
    assert jobs_watchdog(stale_after=60) == {"requeued": [], "failed": [job.pk]}
    failed = Job.objects.get(pk=job.pk)
    assert failed.status == Status.FAILED and "stopped answering 2 times" in failed.error


def test_the_figures_of_a_failed_submission_are_marked_partial(client, settings):
    """A paper whose files are gone fails its job: the API and the page say the figures rest on part of the verdicts."""
    from catalog.models import ReleasePaper, Snippet

    release = demo_release_create(slug="partial", papers=["rope", "minp-sampling"])
    ReleasePaper.objects.filter(release=release, paper__paper_id="minp-sampling").update(
        folder="/nonexistent/minp-sampling", archive="")
    user = User.objects.create_user("carol", "carol@example.org", "pw-carol-123!")
    sub, _ = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes(papers=["rope", "minp-sampling"]), model_name="Model-P",
    )
    outcomes = {j.paper.paper_id: jobs.score_paper(j.pk, j.rq_job_id) for j in sub.jobs.select_related("paper")}
    assert outcomes == {"rope": "done", "minp-sampling": "failed"}
    sub.refresh_from_db()
    assert sub.status == Status.FAILED
    rope = Snippet.objects.filter(release=release, paper__paper_id="rope").count()
    expected = Snippet.objects.filter(release=release).count()
    client.force_login(user)
    result = client.get(f"/api/v1/submissions/{sub.pk}").json()["result"]
    assert result["partial"] is True and result["ranked"] is False
    assert (result["verdicts_stored"], result["verdicts_expected"]) == (rope, expected)
    assert result["partial_note"].startswith(f"partial: {rope} of {expected} verdicts are stored (scoring did not finish)")
    page = client.get(f"/submissions/{sub.pk}/").content.decode()
    assert "Partial result" in page and 'id="result-partial"' in page and f"{rope} of {expected} verdicts" in page


def test_the_figures_of_a_finished_submission_are_not_partial(client, release, token):
    sub = _submit(client, token)
    # the file predicts rope only: focal-loss's snippets get 'missing' verdicts (the file's gap, not scoring's)
    assert {jobs.score_paper(j.pk, j.rq_job_id) for j in sub.jobs.all()} == {"done"}
    result = client.get(f"/api/v1/submissions/{sub.pk}", HTTP_AUTHORIZATION=f"Token {token}").json()["result"]
    assert result["partial"] is False and result["partial_note"] == ""
    assert result["verdicts_stored"] == result["verdicts_expected"] == result["snippets_total"]
    client.force_login(sub.user)
    page = client.get(f"/submissions/{sub.pk}/").content.decode()
    assert 'id="result"' in page and "Partial result" not in page
