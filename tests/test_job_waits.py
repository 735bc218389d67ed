"""A job waits, never fails, when no sandbox can be opened on its host *now* (a stopped Docker engine),
and fails with its reason when the configuration refuses every sandbox (that will not fix itself).

Real parts: the docker backend against an engine address nobody answers (what a stopped ``dockerd``
leaves), and the site's own refusal of the ``local`` backend for untrusted code.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from scoring.jobs import worker_losses
from scoring.models import JobStatus
from submissions import jobs, upload
from submissions.models import Status

from submissions_support import demo_release_create, in_process_scoring, predictions_bytes

pytestmark = pytest.mark.django_db(transaction=True)


def _job(slug: str):
    release = demo_release_create(slug=slug, papers=["rope"])
    user = User.objects.create_user(f"u-{slug}", f"{slug}@example.org", "pw-waits-123!")
    sub, _ = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes("demo-imperfect", papers=["rope"]), model_name=slug)
    return sub, sub.jobs.get()


def test_a_job_whose_sandbox_engine_is_away_waits_saying_why(settings, monkeypatch, tmp_path):
    in_process_scoring(settings)
    settings.RCB_SANDBOX_BACKEND = "docker"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/stopped-dockerd.sock")  # nobody listens there
    sub, job = _job("engine-away")
    assert jobs.score_paper(job.pk, job.rq_job_id) == "wait"
    job.refresh_from_db()
    sub.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.attempt == 2, (job.status, job.error)
    assert job.error.startswith("waiting: no sandbox can be opened on this host right now"), job.error
    assert "nothing is lost or charged" in job.error
    assert worker_losses(job) == 0
    assert sub.status in (Status.QUEUED, Status.RUNNING) and sub.failure_reason == ""
    assert not sub.evaluation.results.exists()


def test_a_job_whose_sandbox_the_configuration_refuses_fails_with_the_reason(settings):
    in_process_scoring(settings)
    settings.RCB_SANDBOX_BACKEND = "local"  # isolates nothing: refused for submissions
    sub, job = _job("refused")
    assert jobs.score_paper(job.pk, job.rq_job_id) == "failed"
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "isolates nothing" in job.error, job.error
