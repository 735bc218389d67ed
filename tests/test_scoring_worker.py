"""The scoring worker keeps warm sandboxes between jobs and shares reference outcomes (issue 13).

Real RQ workers (`manage.py rqworker scoring`: the site's ScoringWorker runs scoring jobs in its own
process), a redis-server of the test's own, the sandbox (bwrap) and the test database. What a job
found ready is in its history: "sandbox: warm, kept from an earlier job" or "opened", "reference
outcome: known, not run again" or "run". The pool's bounds (idle expiry, memory cap) are the
worker's settings (RCB_SANDBOX_POOL_*), so each case starts its worker with its own.
"""
from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from catalog.models import SnippetResult
from submissions import upload
from scoring.models import Job
from submissions.models import PredictionSubmission, Status

from submissions_support import (
    WORKER_DRILL_MARKS,
    RedisServer,
    demo_release_create,
    predictions_bytes,
    process_group_kill,
    wait_for,
    worker_env,
    worker_start,
)

pytestmark = WORKER_DRILL_MARKS

PAPERS = ["focal-loss"]  # one quick NumPy paper: 13 snippets, no timeout among them
WARM = "sandbox: warm, kept from an earlier job"
OPENED = "sandbox: opened"
KNOWN = "reference outcome: known, not run again"
RUN = "reference outcome: run"


@pytest.fixture
def redis_server(settings):
    server = RedisServer()
    server.start()
    settings.RQ_QUEUES = {name: {"URL": server.url, "DEFAULT_TIMEOUT": 900} for name in ("default", "scoring", "contributions")}
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    yield server
    server.stop()


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        process_group_kill(proc, signal.SIGKILL)


@pytest.fixture
def user():
    return User.objects.create_user("pooled", "pooled@example.org", "pw-pooled-123!")


def _worker(procs, redis_server, tmp_path, name: str, **pool: str):
    env = worker_env(redis_server.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="20",
                     RCB_REFERENCE_CACHE=str(tmp_path / "references.sqlite3"), **pool)
    proc = worker_start(env, name=name, log_dir=tmp_path)
    procs.append(proc)
    return proc


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(tmp_path.glob("*.log")))


def _scored(user, release, tmp_path, name: str, model: str) -> PredictionSubmission:
    # (the same bytes twice would be the same submission: a blank line sets each apart)
    data = predictions_bytes(name, papers=PAPERS) + b"\n" * PredictionSubmission.objects.count()
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=data, model_name=model,
        file_name=f"{name}.jsonl", allow_partial=True,
    )
    assert created

    def ended() -> bool:
        submission.refresh_from_db()
        return submission.status in (Status.FINISHED, Status.FAILED, Status.CANCELLED)

    try:
        wait_for(ended, timeout=240, what=f"submission {submission.pk} to end", interval=0.3)
    except AssertionError:
        raise AssertionError(f"{list(submission.jobs.values('status', 'error', 'history'))}\n{_logs(tmp_path)}")
    assert submission.status == Status.FINISHED, submission.failure_reason
    return submission


def _notes(submission: PredictionSubmission) -> tuple[Job, list[str]]:
    job = submission.jobs.get()
    return job, [h["event"] for h in job.history]


def _verdicts(submission: PredictionSubmission) -> dict[str, bool]:
    return dict(SnippetResult.objects.filter(evaluation=submission.evaluation).values_list("snippet__name", "passed"))


def test_the_next_submission_finds_the_worker_warm_and_the_reference_known(user, redis_server, procs, tmp_path):
    release = demo_release_create(papers=PAPERS)
    _worker(procs, redis_server, tmp_path, "warm")
    first = _scored(user, release, tmp_path, "demo-imperfect", "Pooled A")
    second = _scored(user, release, tmp_path, "demo-imperfect", "Pooled B")
    third = _scored(user, release, tmp_path, "demo-perfect", "Pooled C")
    job1, notes1 = _notes(first)
    job2, notes2 = _notes(second)
    job3, notes3 = _notes(third)
    assert any(OPENED in n and RUN in n for n in notes1), notes1
    for notes in (notes2, notes3):
        assert any(WARM in n and KNOWN in n for n in notes), notes
    # one worker process ran all three (no work horse per job)
    assert job1.worker == job2.worker == job3.worker
    # the same verdicts from the warm sandbox as from the fresh one; the perfect answers all pass
    assert _verdicts(first) == _verdicts(second) and len(_verdicts(first)) == 13
    assert not all(_verdicts(first).values()) and all(_verdicts(third).values())
    # the passing reference outcome is on disk for this host's other workers
    with sqlite3.connect(tmp_path / "references.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM reference WHERE passed = 1").fetchone()[0] == 1

    # a new worker process (the first one killed): its pool is empty, the reference outcome is not
    process_group_kill(procs[0], signal.SIGKILL)
    _worker(procs, redis_server, tmp_path, "fresh")
    fourth = _scored(user, release, tmp_path, "demo-imperfect", "Pooled D")
    job4, notes4 = _notes(fourth)
    assert job4.worker != job1.worker
    assert any(OPENED in n and KNOWN in n for n in notes4), notes4
    assert _verdicts(fourth) == _verdicts(first)


@pytest.mark.parametrize("bound", [
    {"RCB_SANDBOX_POOL_IDLE_SECONDS": "1"},  # expired after a second idle (the reaper looks every second)
    {"RCB_SANDBOX_POOL_MEMORY_MB": "1"},  # a warm interpreter holds more than 1 MB: closed when given back
], ids=["idle-expiry", "memory-cap"])
def test_the_pool_bounds_close_the_warm_sandbox_between_jobs(user, redis_server, procs, tmp_path, bound):
    release = demo_release_create(papers=PAPERS)
    _worker(procs, redis_server, tmp_path, "bounded", **bound)
    first = _scored(user, release, tmp_path, "demo-perfect", "Bounded A")
    time.sleep(4)  # longer than the idle expiry and its reaper's round (not a timing assertion)
    second = _scored(user, release, tmp_path, "demo-perfect", "Bounded B")
    assert any(OPENED in n for n in _notes(first)[1])
    notes = _notes(second)[1]
    assert any(OPENED in n and KNOWN in n for n in notes), notes
    assert all(_verdicts(second).values()) and len(_verdicts(second)) == 13


@pytest.mark.parametrize("queues, warmed", [(["scoring", "default"], True), (["default"], False)])
def test_a_scoring_worker_makes_its_pool_when_it_starts_not_in_its_first_job(redis_server, settings, queues, warmed):
    from redis import Redis
    from rq import Queue

    from scoring import sandbox as scoring_sandbox
    from scoring.queue import ScoringWorker

    settings.RCB_SANDBOX_POOL = True
    connection = Redis.from_url(redis_server.url)
    scoring_sandbox._pool_close()
    try:
        ScoringWorker([Queue(name, connection=connection) for name in queues], connection=connection)
        pool = scoring_sandbox._POOL.get("pool")
        if warmed:
            # the backend is checked and its pool ready; the first job takes it as it is
            assert pool is not None and pool.name == "bwrap" and len(pool) == 0
            with scoring_sandbox.job_sandbox() as sandbox:
                assert sandbox is pool
        else:
            assert pool is None  # a worker of other queues has no sandbox to keep
    finally:
        scoring_sandbox._pool_close()
        scoring_sandbox._KEEP.clear()
        connection.close()
