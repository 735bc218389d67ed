"""A paper's files that cannot be had *now* (the bucket away, the cache disk full) make its job wait, never fail.

Real parts: moto's S3 server behind a front that refuses connections (bench/site_drill.py), a
tmpfs filled to 100 % as the paper cache, a redis-server of the test's own for the watchdog's push.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis as redis_client
from django.contrib.auth.models import User

from bench.site_drill import Forwarder, RedisServer, S3Server
from scoring.jobs import jobs_lost_requeue, worker_losses
from scoring.models import Job, JobStatus
from scoring.paper_store import PaperFilesMissing, PaperStorageUnavailable, paper_archive_fetch, paper_archive_put
from submissions import jobs
from submissions.models import Status

from submissions_support import demo_release_create, in_process_scoring, predictions_bytes

DEMO = Path(__file__).resolve().parent.parent / "demo"
BUCKET = "rcb-outage-papers"

pytest.importorskip("moto", reason="needs moto[server] (requirements-dev.txt)")


@pytest.fixture
def bucket(settings, tmp_path):
    forwarder = Forwarder()
    s3 = S3Server(tmp_path / "moto.log", forwarder)
    try:
        s3.start()
        s3.bucket_create(BUCKET)
        settings.STORAGES = {**settings.STORAGES, "papers": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": BUCKET, "endpoint_url": s3.endpoint, "region_name": S3Server.REGION, "location": "papers",
            "access_key": S3Server.KEY, "secret_key": S3Server.SECRET, "file_overwrite": False,
            "default_acl": None, "querystring_auth": False}}}
        settings.RCB_PAPER_CACHE = tmp_path / "cache"
        yield s3
    finally:
        s3.stop()
        forwarder.close()


def test_a_bucket_that_refuses_is_unavailable_and_a_missing_key_is_missing(bucket):
    digest = paper_archive_put(folder=DEMO / "rope")
    bucket.refuse()
    with pytest.raises(PaperStorageUnavailable, match="cannot be reached"):
        paper_archive_fetch(digest=digest)
    bucket.accept()
    assert (paper_archive_fetch(digest=digest) / "rope").is_dir()
    with pytest.raises(PaperFilesMissing, match="not in the papers storage"):
        paper_archive_fetch(digest="0" * 64)


def test_a_full_paper_cache_is_unavailable_and_leaves_nothing_half_made(bucket, settings, tmp_path):
    import os

    if os.geteuid() != 0:
        pytest.skip("mounts a small tmpfs as the paper cache: needs root")
    digest = paper_archive_put(folder=DEMO / "focal-loss")
    cache = tmp_path / "small"
    cache.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rcb-test-cache", str(cache)], check=True)
    try:
        settings.RCB_PAPER_CACHE = cache
        with open(cache / "filler", "wb") as out:
            with pytest.raises(OSError):
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
        with pytest.raises(PaperStorageUnavailable, match="paper cache is full"):
            paper_archive_fetch(digest=digest)
        assert sorted(p.name for p in cache.iterdir()) == ["filler"]  # no half-made folder or zip left
        (cache / "filler").unlink()
        assert (paper_archive_fetch(digest=digest) / "focal-loss").is_dir()
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_files_cannot_be_had_waits_saying_why_and_the_watchdog_resumes_it(bucket, settings, tmp_path):
    in_process_scoring(settings)
    redis = RedisServer()
    redis.start()
    try:
        settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
        release = demo_release_create(slug="outage", papers=["rope"])
        user = User.objects.create_user("olga", "olga@example.org", "pw-olga-123!")
        from submissions import upload

        sub, _ = upload.prediction_submission_create(
            user=user, release=release, data=predictions_bytes("demo-imperfect", papers=["rope"]), model_name="Outage")
        job = sub.jobs.get()
        bucket.refuse()
        assert jobs.score_paper(job.pk, job.rq_job_id) == "wait"
        job.refresh_from_db()
        # queued again, with the reason a user understands, not pushed to Redis (the watchdog does it)
        assert job.status == JobStatus.QUEUED and job.attempt == 2
        assert job.error.startswith("waiting: the paper's files cannot be fetched right now (the papers storage")
        assert "resumes by itself" in job.error
        assert job.rq_job_id.encode() not in redis_client.Redis.from_url(redis.url).lrange("rq:queue:scoring", 0, -1)
        sub.refresh_from_db()
        assert sub.status in (Status.QUEUED, Status.RUNNING) and sub.failure_reason == ""
        assert worker_losses(job) == 0
        # the watchdog's round pushes it; it meets the bucket away again and waits again, never failed
        time.sleep(1.1)  # (a row queued less than a second ago is left to its own push)
        assert jobs_lost_requeue(stale_after=3) == [job.pk]
        job.refresh_from_db()
        assert jobs.score_paper(job.pk, job.rq_job_id) == "wait"
        bucket.accept()
        time.sleep(1.1)
        assert jobs_lost_requeue(stale_after=3) == [job.pk]
        job.refresh_from_db()
        assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
        job.refresh_from_db()
        sub.refresh_from_db()
        assert job.status == JobStatus.FINISHED and job.error == "" and sub.status == Status.FINISHED
        assert sum(" waits: " in h["event"] for h in job.history) == 2
    finally:
        redis.stop()


def test_job_wait_leaves_a_row_that_is_no_longer_ours_alone(db):
    from scoring.jobs import job_wait

    assert job_wait(job_id=10**9, rq_job_id="rcb-nothing", reason="x") is False
    assert not Job.objects.exists()
