"""The public queue page from the page cache as a live page: one query for a hit, a job changing
state shows on the next request, a proxy keeps it no longer than the page's refresh period."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from submissions import lifecycle, upload
from scoring.models import Job
from submissions.models import Status
from submissions.views import QUEUE_PAGE_SECONDS
from submissions_support import demo_release_create, predictions_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_page_cache")]

QUEUE = reverse("leaderboard:queue")


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    # no Redis for RQ: the jobs stay queued in the database, as when every worker is busy
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}


@pytest.fixture
def submission():
    release = demo_release_create(papers=["rope", "focal-loss"])
    bob = User.objects.create_user("bob", "bob@example.org", "pw-bob-123456!")
    sub, _ = upload.prediction_submission_create(user=bob, release=release, data=predictions_bytes(papers=["rope", "focal-loss"]),
                                                   model_name="Secret model", allow_partial=True)
    return sub


def _summary(client) -> str:
    response = client.get(QUEUE)
    assert response.status_code == 200
    return " ".join(re.search(r'id="queue-summary">(.*?)</p>', response.content.decode(), re.S).group(1).split())


def test_a_hit_is_one_query_and_every_change_of_a_job_shows_on_the_next_request(client, submission):
    jobs = list(submission.jobs.order_by("id"))
    assert len(jobs) == 2
    assert _summary(client).startswith("0 job(s) running, 2 waiting")
    with CaptureQueriesContext(connection) as ctx:
        assert _summary(client).startswith("0 job(s) running, 2 waiting")
    assert len(ctx.captured_queries) == 1  # the queue's stamp; the page itself from the cache
    # a worker claims a job (the same update as scoring.jobs.job_claim)
    now = timezone.now()
    Job.objects.filter(pk=jobs[0].pk).update(status=Status.RUNNING, started_at=now, heartbeat_at=now)
    assert _summary(client).startswith("1 job(s) running, 1 waiting")
    # it finishes: not "running" one request longer, the estimate uses its time
    Job.objects.filter(pk=jobs[0].pk).update(status=Status.FINISHED, finished_at=timezone.now())
    summary = _summary(client)
    assert summary.startswith("0 job(s) running, 1 waiting") and "on average over the last 1" in summary
    # the job re-queued after a lost worker (same status, one more attempt) and then cancelled
    Job.objects.filter(pk=jobs[1].pk).update(attempt=jobs[1].attempt + 1)
    before = client.get(QUEUE).content
    Job.objects.filter(pk=jobs[1].pk).update(status=Status.RUNNING)
    assert client.get(QUEUE).content != before
    lifecycle.submission_cancel(submission=submission, user=submission.user)
    assert "Nothing is waiting" in client.get(QUEUE).content.decode()


def test_the_queue_page_may_be_kept_no_longer_than_its_refresh_period(client, submission):
    response = client.get(QUEUE)
    cache_control = dict(part.strip().partition("=")[::2] for part in response["Cache-Control"].split(","))
    assert "public" in cache_control
    assert int(cache_control["s-maxage"]) <= QUEUE_PAGE_SECONDS and int(cache_control["max-age"]) <= QUEUE_PAGE_SECONDS
    assert response.has_header("ETag")
    assert client.get(QUEUE, HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304


def test_a_submitter_still_sees_their_own_rows(client, submission):
    client.get(QUEUE)  # the anonymous rendering is cached
    client.force_login(submission.user)
    page = client.get(QUEUE)
    assert f"#{submission.pk} Secret model".encode() in page.content
    assert page["Cache-Control"] == "private, no-cache"
    client.logout()
    assert b"Secret model" not in client.get(QUEUE).content
