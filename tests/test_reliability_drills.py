"""Reliability drills: real RQ worker processes, a real Redis, the sandbox, a shared database.

Each test runs its own redis-server (no persistence) on a free port, so it can lose Redis data
without touching anybody else's; workers are `manage.py rqworker scoring` subprocesses (a forking
worker: a work horse per job) sharing the test database (a file for SQLite, the test database on
PostgreSQL when DATABASE_URL is set). Expected figures are those of demo/predictions/README.md.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from catalog.models import ReleasePaper, SnippetResult
from submissions import lifecycle, upload
from scoring.jobs import jobs_reconcile
from scoring.models import Job
from submissions.models import PredictionSubmission, Status
from scoring.queue import queue_get as scoring_queue

from submissions_support import (
    WORKER_DRILL_MARKS,
    ROOT,
    RedisServer,
    demo_release_create,
    predictions_bytes,
    process_group_kill,
    wait_for,
    worker_env,
    worker_start,
)

pytestmark = WORKER_DRILL_MARKS

TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)
# the demo's one endless loop (lion/linear warmup) must time out quickly here
RUN_TIMEOUT = "5"


@pytest.fixture
def redis_server(settings):
    server = RedisServer()
    server.start()
    settings.RQ_QUEUES = {name: {"URL": server.url, "DEFAULT_TIMEOUT": 900} for name in ("default", "scoring", "contributions")}
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    yield server
    server.stop()


class Workers:
    def __init__(self, redis: RedisServer, log_dir: Path):
        self.redis, self.log_dir = redis, log_dir
        self.procs: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        return worker_env(self.redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT=RUN_TIMEOUT)

    def start(self, name: str) -> subprocess.Popen:
        proc = worker_start(self.env(), name=name, log_dir=self.log_dir)
        self.procs.append(proc)
        return proc

    def start_reconcile_loop(self) -> subprocess.Popen:
        log = open(self.log_dir / "reconcile.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "reconcile", "--every", "1", "--stale-after", "3"],
            cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.log_dir.glob("*.log")))

    def stop_all(self) -> None:
        for proc in self.procs:
            process_group_kill(proc, signal.SIGKILL)


@pytest.fixture
def workers(redis_server, tmp_path):
    pool = Workers(redis_server, tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def user():
    return User.objects.create_user("drill", "drill@example.org", "pw-drill-123!")


def _submit(user, release, name: str = "demo-imperfect", model: str = "Drill model", papers=None) -> PredictionSubmission:
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes(name, papers=papers), model_name=model, file_name=f"{name}.jsonl",
        allow_partial=True,
    )
    assert created
    return submission


def _wait_end(submission: PredictionSubmission, workers: Workers, timeout: float = 300) -> PredictionSubmission:
    def ended() -> bool:
        submission.refresh_from_db()
        return submission.status in TERMINAL

    try:
        wait_for(ended, timeout=timeout, what=f"submission {submission.pk} to end", interval=0.5)
    except AssertionError:
        jobs = list(submission.jobs.values("paper__paper_id", "status", "attempt", "error", "history"))
        raise AssertionError(f"submission {submission.pk} stuck in {submission.status}; jobs {jobs}\n{workers.logs()}")
    return submission


def _assert_exact_imperfect(submission: PredictionSubmission) -> None:
    """Every snippet once, with the verdicts the demo README documents (36 of 50, 83.72 % scaled)."""
    results = SnippetResult.objects.filter(evaluation=submission.evaluation)
    assert results.count() == 50
    assert results.values("snippet", "sample").distinct().count() == 50
    assert results.filter(passed=True).count() == 36
    ev = submission.evaluation
    ev.refresh_from_db()
    assert ev.pass_rate == pytest.approx(72.0) and ev.scaled_pass_rate == pytest.approx(83.72, abs=0.01)
    assert ev.snippets_covered == ev.snippets_total == 50
    assert results.get(snippet__name="linear warmup").category == "timeout"


def test_two_workers_share_one_submission_complete_and_exact(user, workers):
    release = demo_release_create()
    submission = _submit(user, release)
    workers.start("w1")
    workers.start("w2")
    _wait_end(submission, workers)
    assert submission.status == Status.FINISHED, submission.failure_reason
    _assert_exact_imperfect(submission)
    jobs = list(submission.jobs.all())
    assert len(jobs) == 4 and all(j.status == Status.FINISHED and j.attempt == 1 for j in jobs)
    # both worker processes took jobs (their work horses have different pids)
    assert len({j.worker for j in jobs}) >= 2, [j.worker for j in jobs]


def test_worker_killed_mid_job_the_submission_still_finishes_exactly_once(user, workers):
    release = demo_release_create()
    submission = _submit(user, release)
    victim = workers.start("victim")

    seen: list[tuple[Job, int]] = []

    def mid_job() -> bool:
        for job in submission.jobs.filter(status=Status.RUNNING):
            done = SnippetResult.objects.filter(evaluation=submission.evaluation, snippet__paper=job.paper_id).count()
            # a few snippets left: the job cannot end in the moment between this look and the kill
            if 2 <= done <= job.tasks_total - 3:
                seen.append((job, done))
                return True
        return False

    wait_for(mid_job, timeout=120, what="a job half done", interval=0.05)
    killed, done_before = seen[-1]
    # the worker and its work horse (RQ puts the horse in a process group of its own; the sandbox
    # dies with it): no goodbye, as when the kernel's OOM killer or a power cut strikes
    horse = int(killed.worker.rsplit(":", 1)[1])
    os.killpg(horse, signal.SIGKILL)
    process_group_kill(victim, signal.SIGKILL)
    killed.refresh_from_db()
    assert killed.status == Status.RUNNING  # nobody could say otherwise: only the heartbeat stops
    workers.start("rescuer")
    workers.start_reconcile_loop()  # the watchdog, as production runs it
    _wait_end(submission, workers)
    assert submission.status == Status.FINISHED, submission.failure_reason
    _assert_exact_imperfect(submission)
    killed.refresh_from_db()
    assert killed.attempt == 2 and any("stopped answering" in h["event"] for h in killed.history)
    assert killed.tasks_total > done_before  # the second attempt had work left, and did only that


def test_redis_data_lost_with_submissions_queued_reconcile_brings_them_home(user, workers, redis_server):
    release = demo_release_create()
    first = _submit(user, release, "demo-imperfect", "Model one")
    second = _submit(user, release, "demo-perfect", "Model two")
    assert scoring_queue().count == 8
    redis_server.restart()  # no persistence: every job pointer is gone
    assert scoring_queue().count == 0
    time.sleep(1.2)  # reconcile leaves alone a job committed under a second ago (its push may be on its way)
    out = subprocess.run(
        [sys.executable, "manage.py", "reconcile"], cwd=ROOT, env=workers.env(), capture_output=True, text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "re-enqueued (lost by Redis): 8" in out.stdout
    assert scoring_queue().count == 8
    workers.start("w1")
    workers.start("w2")
    for submission in (first, second):
        _wait_end(submission, workers)
        assert submission.status == Status.FINISHED, submission.failure_reason
    _assert_exact_imperfect(first)
    perfect = SnippetResult.objects.filter(evaluation=second.evaluation)
    assert perfect.count() == 50 and perfect.filter(passed=True).count() == 50


def test_a_job_that_raises_fails_the_submission_with_its_reason(user, workers, client):
    release = demo_release_create(papers=["rope", "minp-sampling"])
    # the worker cannot find the paper's files: the job raises
    ReleasePaper.objects.filter(release=release, paper__paper_id="minp-sampling").update(folder="/nonexistent/minp-sampling")
    submission = _submit(user, release, papers=["rope", "minp-sampling"])
    workers.start("w1")
    _wait_end(submission, workers)
    assert submission.status == Status.FAILED
    assert "minp-sampling: PaperFilesMissing: the files of paper minp-sampling are not on this worker" in submission.failure_reason
    assert not submission.jobs.filter(status__in=[Status.QUEUED, Status.RUNNING]).exists()
    assert submission.jobs.get(paper__paper_id="rope").status == Status.FINISHED
    client.force_login(user)
    api = client.get(f"/api/v1/submissions/{submission.pk}").json()
    assert api["status"] == "failed" and "not on this worker" in api["failure_reason"]
    page = client.get(f"/submissions/{submission.pk}/").content.decode()
    assert "not on this worker" in page and 'id="rerun"' in page


def test_a_job_in_rqs_failed_registry_is_enqueued_again_by_reconcile(user, redis_server):
    """RQ gave up on an attempt (abandoned or failed outside our code): the database still says queued."""
    from rq.job import Job, JobStatus
    from rq.registry import FailedJobRegistry

    release = demo_release_create(papers=["rope", "lion"])
    submission = _submit(user, release, papers=["rope", "lion"])
    rope, lion = submission.jobs.get(paper__paper_id="rope"), submission.jobs.get(paper__paper_id="lion")
    q = scoring_queue()
    rq_job = Job.fetch(rope.rq_job_id, connection=q.connection)
    q.remove(rq_job)
    rq_job.set_status(JobStatus.FAILED)
    FailedJobRegistry(queue=q).add(rq_job, exc_string="horse died")
    report = jobs_reconcile(stale_after=60)
    assert report["reenqueued"] == [rope.pk]
    rope.refresh_from_db()
    lion_before = lion.rq_job_id
    lion.refresh_from_db()
    assert rope.attempt == 2 and rope.rq_job_id in q.get_job_ids() and lion.rq_job_id == lion_before
    assert jobs_reconcile(stale_after=60)["reenqueued"] == []  # nothing left to repair


def test_cancel_mid_run_stops_the_worker_within_a_heartbeat(user, workers):
    release = demo_release_create()
    submission = _submit(user, release)
    workers.start("w1")

    def scoring() -> bool:
        return SnippetResult.objects.filter(evaluation=submission.evaluation).count() >= 2

    wait_for(scoring, timeout=120, what="scoring to start", interval=0.05)
    assert lifecycle.submission_cancel(submission=submission, user=user)
    submission.refresh_from_db()
    assert submission.status == Status.CANCELLED
    assert set(submission.jobs.values_list("status", flat=True)) == {Status.CANCELLED}
    # the running job notices at its next heartbeat (0.5 s here) and stops after the snippet it runs
    time.sleep(3)
    settled = SnippetResult.objects.filter(evaluation=submission.evaluation).count()
    time.sleep(3)
    assert SnippetResult.objects.filter(evaluation=submission.evaluation).count() == settled < 50
    submission.refresh_from_db()
    assert submission.status == Status.CANCELLED and not submission.jobs.exclude(status=Status.CANCELLED).exists()
    # the same worker is free again: a new submission is scored to the end
    second = _submit(user, release, "demo-perfect", "After the cancel")
    _wait_end(second, workers)
    assert second.status == Status.FINISHED
