"""Two worker hosts that share nothing but PostgreSQL, Redis and an S3 bucket score submissions.

Each "host" is a network namespace of this test's own making (``ip netns add``, a veth pair with a
/30 of 10.0.0.0/8 on it, nothing else; bench/site_drill.py ``Hosts``): its worker reaches
PostgreSQL, Redis and the bucket only through TCP forwarders on the host side of its veth. Each
worker runs in a mount namespace of its own with an empty var folder, its own paper cache (a
tmpfs), its own host name, and the release folders, the demo and this test's var folder hidden
under empty tmpfs mounts: no folder is shared. The papers storage is django-storages' S3 backend
against moto's S3 server (bench/site_drill.py ``S3Server``), exactly as production points it at a
bucket (docs/deploy.md); a worker gets a paper's files by the content hash its job names
(scoring.paper_store). Runs as root with ``ip netns`` and a PostgreSQL database (a SQLite file
would be a shared path); skips with the reason otherwise.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import redis as redis_client
from django.contrib.auth.models import User
from django.db import connection
from rq import Worker

from bench.site_drill import Forwarder, Hosts, S3Server, netns_problem, session_kill
from leaderboard.importers.pset import pset_import
from catalog.models import Release, SnippetResult
from scoring.jobs import jobs_reconcile
from submissions import upload
from submissions.models import Status

from submissions_support import DEMO, RedisServer, predictions_bytes, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)
BUCKET = "rcb-drill-papers"


class Drill:
    """The services and hosts of one drill."""

    def __init__(self, hosts: Hosts, s3: S3Server, redis: RedisServer):
        self.hosts, self.s3, self.redis = hosts, s3, redis

    def worker_start(self, i: int):
        s = connection.settings_dict
        outer = self.hosts.outer(i)
        env = worker_env(
            f"redis://{outer}:{self.redis.port}/0",
            DATABASE_URL=f"postgres://{s['USER'] or 'postgres'}@{outer}:{s['PORT'] or 5432}/{s['NAME']}",
            RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5",
            **self.s3.env(BUCKET, endpoint=f"http://{outer}:{self.s3.front}"),
        )
        worker = [sys.executable, "manage.py", "rqworker", "scoring", "--name", f"{self.hosts.names[i]}-worker"]
        return self.hosts.start(i, env, worker)

    def cached(self, i: int) -> set[str]:
        return {p.name for p in (self.hosts.vars[i] / "paper-cache").iterdir() if not p.name.startswith(".")}

    def workers(self) -> int:
        return len(Worker.all(connection=redis_client.Redis.from_url(self.redis.url)))


@pytest.fixture
def drill(settings, tmp_path):
    reason = netns_problem()
    if reason:
        pytest.skip(reason)
    if connection.vendor != "postgresql":
        pytest.skip("the two-host drill needs a networked database: run it with DATABASE_URL=postgres://...")
    redis = RedisServer()
    redis.start()
    forwarder = Forwarder()
    s3 = S3Server(tmp_path / "moto.log", forwarder)
    hosts = None
    try:
        s3.start()
        s3.bucket_create(BUCKET)
        settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
        settings.RCB_SANDBOX_BACKEND = "bwrap"
        main = tmp_path / "main"
        settings.RCB_PSET_ROOT = main / "psets"
        settings.RCB_PAPER_CACHE = main / "paper-cache"
        settings.RCB_PSET_ROOT.mkdir(parents=True)
        # this process (the web host) stores the paper versions in the bucket, as the site does
        settings.STORAGES = {**settings.STORAGES, "papers": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": BUCKET, "endpoint_url": s3.endpoint, "region_name": S3Server.REGION, "location": "papers",
            "access_key": S3Server.KEY, "secret_key": S3Server.SECRET,
            "file_overwrite": False, "default_acl": None, "querystring_auth": False}}}
        port = int(connection.settings_dict["PORT"] or 5432)
        hosts = Hosts(tmp=tmp_path, count=2, cache_mb=16,
                      services={port: ("127.0.0.1", port), redis.port: ("127.0.0.1", redis.port),
                                s3.front: ("127.0.0.1", s3.front)},
                      hidden=[settings.RCB_PSET_ROOT, DEMO, main, Path(settings.BASE_DIR) / "var"])
        hosts.open()
        yield Drill(hosts, s3, redis)
    finally:
        if hosts is not None:
            hosts.close()
        s3.stop()
        forwarder.close()
        redis.stop()
    if hosts is not None:
        import subprocess

        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(name in left for name in hosts.names), left


def _release() -> Release:
    release = pset_import(path=DEMO, release_name="Two hosts drill", status=Release.PUBLISHED).release
    assert release.release_papers.count() == 4
    return release


def _submit(user, release, name: str, model: str):
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes(name), model_name=model, file_name=f"{name}.jsonl")
    assert created
    return submission


def _wait_end(submission, drill: Drill, *, timeout: float = 600, reconcile: bool = False) -> None:
    def ended() -> bool:
        if reconcile:
            jobs_reconcile(stale_after=3)
        submission.refresh_from_db()
        return submission.status in TERMINAL

    try:
        wait_for(ended, timeout=timeout, what="the submission to end", interval=0.5 if not reconcile else 1.5)
    except AssertionError:
        jobs = list(submission.jobs.values("paper__paper_id", "status", "worker", "error", "history"))
        raise AssertionError(f"submission stuck in {submission.status}; jobs {jobs}\n{drill.hosts.logs()}") from None


def test_two_hosts_with_only_the_database_redis_and_the_bucket_finish_one_submission_exactly(drill):
    release = _release()
    for i in range(2):
        drill.worker_start(i)
    # both hosts wait on the queue before the jobs come: each takes its share
    wait_for(lambda: drill.workers() == 2, timeout=120, what=lambda: f"both workers to register over their veths\n{drill.hosts.logs()}")
    user = User.objects.create_user("drill2", "drill2@example.org", "pw-drill-123!")
    submission = _submit(user, release, "demo-imperfect", "Two hosts")
    _wait_end(submission, drill)
    assert submission.status == Status.FINISHED, f"{submission.failure_reason}\n{drill.hosts.logs()}"

    # exact: every snippet once, the verdicts the demo README documents (36 of 50, 83.72 % scaled)
    results = SnippetResult.objects.filter(evaluation=submission.evaluation)
    assert results.count() == 50
    assert results.values("snippet", "sample").distinct().count() == 50
    assert results.filter(passed=True).count() == 36
    evaluation = submission.evaluation
    evaluation.refresh_from_db()
    assert evaluation.scaled_pass_rate == pytest.approx(83.72, abs=0.01)
    jobs = list(submission.jobs.select_related("release_paper", "paper"))
    assert len(jobs) == 4 and all(j.status == Status.FINISHED and j.attempt == 1 for j in jobs)
    # both hosts did work (the job records its worker as hostname:pid; each namespace has its name)
    assert {j.worker.rsplit(":", 1)[0] for j in jobs} == set(drill.hosts.names), [j.worker for j in jobs]
    # and each got the files of its jobs by content hash from the bucket into its own cache
    stored = set(drill.s3.keys(BUCKET))
    for i, name in enumerate(drill.hosts.names):
        mine = {j.release_paper.archive for j in jobs if j.worker.startswith(f"{name}:")}
        assert mine and mine <= drill.cached(i), (name, mine, drill.cached(i))
    assert {f"papers/{j.release_paper.archive[:2]}/{j.release_paper.archive}.zip" for j in jobs} <= stored, stored


def test_a_paper_cached_on_the_first_host_is_scored_on_the_second_from_the_bucket_and_waits_while_it_is_away(drill):
    """The second host has never seen the papers the first host's cache holds: it fetches them by hash.

    Its first try meets the bucket refusing every connection: the jobs wait, saying why in words a
    user understands, never failed; once the bucket answers, the watchdog's next round runs them.
    """
    release = _release()
    user = User.objects.create_user("drill3", "drill3@example.org", "pw-drill-123!")
    first = drill.worker_start(0)
    wait_for(lambda: drill.workers() == 1, timeout=120, what=lambda: f"the first worker\n{drill.hosts.logs()}")
    a = _submit(user, release, "demo-perfect", "First host")
    _wait_end(a, drill)
    assert a.status == Status.FINISHED and {j.worker.rsplit(":", 1)[0] for j in a.jobs.all()} == {drill.hosts.names[0]}
    hashes = set(release.release_papers.values_list("archive", flat=True))
    assert len(hashes) == 4 and hashes <= drill.cached(0)
    session_kill(first)  # the first host goes away; its cache (its own tmpfs) still holds every paper

    drill.s3.refuse()  # the bucket is away when the second host first needs it
    drill.worker_start(1)
    b = _submit(user, release, "demo-imperfect", "Second host")
    assert not drill.cached(1)

    wait_for(lambda: any(j.error.startswith("waiting:") for j in b.jobs.all()), timeout=180,
             what=lambda: f"a job to find the bucket away\n{drill.hosts.logs()}")
    b.refresh_from_db()
    assert b.status in (Status.QUEUED, Status.RUNNING), (b.status, b.failure_reason)
    waiting = [j for j in b.jobs.all() if j.error]
    assert all("cannot be fetched right now" in j.error and "resumes by itself" in j.error for j in waiting), \
        [j.error for j in waiting]
    assert not b.jobs.filter(status=Status.FAILED).exists()
    time.sleep(3)  # a few more tries meet the bucket away: still waiting, never failed
    assert not b.jobs.filter(status=Status.FAILED).exists()

    drill.s3.accept()
    _wait_end(b, drill, reconcile=True)
    assert b.status == Status.FINISHED, (b.failure_reason, drill.hosts.logs())
    assert SnippetResult.objects.filter(evaluation=b.evaluation, passed=True).count() == 36
    jobs = list(b.jobs.all())
    assert {j.worker.rsplit(":", 1)[0] for j in jobs} == {drill.hosts.names[1]}
    # fetched by content hash into the second host's own cache; the first host's cache is untouched
    assert hashes <= drill.cached(1) and hashes <= drill.cached(0)
    # the waits were not charged as dead workers, and the submission carries no failure
    assert all("stopped answering" not in h["event"] for j in jobs for h in j.history)
    assert b.failure_reason == ""
