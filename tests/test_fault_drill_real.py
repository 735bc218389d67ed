"""The fault drill for real: a running site's workers lose every database connection twice and Redis for 5 s.

A site in small: this test's PostgreSQL database, a redis-server of its own (an append-only file,
as production keeps one, so a stop keeps the queue), two RQ workers under ``manage.py workers``
(the supervisor scripts/run.sh runs) and the ``reconcile`` watchdog, all subprocesses. Three
submissions of the demo (bwrap sandbox) are scored while the test
- terminates every database connection but its own (``pg_terminate_backend``: the workers' work
  horses, their heartbeats, the watchdog), twice, some results apart;
- stops Redis, waits 5 s and starts it again on the same port.
Every submission must end finished (none failed, nothing re-run by hand), each (evaluation,
snippet, sample) stored once, with the verdicts of an undisturbed run (demo/predictions/README.md),
and two workers must be alive again afterwards. PostgreSQL only: SQLite has no connections to end.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_client
from django.contrib.auth.models import User
from django.db import connection
from rq import Worker

from catalog.models import SnippetResult
from submissions import upload
from submissions.models import PredictionSubmission, Status

from submissions_support import (
    WORKER_DRILL_MARKS,
    ROOT,
    RedisServer,
    demo_release_create,
    predictions_bytes,
    session_kill,
    wait_for,
    worker_env,
)

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))

pytestmark = [
    *WORKER_DRILL_MARKS,
    pytest.mark.skipif(not ON_POSTGRES, reason="terminates PostgreSQL backends (pg_terminate_backend): set DATABASE_URL "
                                                "to a PostgreSQL server; SQLite has no connections to end"),
]

TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)

# what an undisturbed run gives (demo/predictions/README.md): passed of 50, pass rate, scaled pass rate
EXPECTED = {
    "demo-imperfect": (36, 72.0, 83.72),
    "demo-perfect": (50, 100.0, 100.0),
    "demo-imperfect.without-paper": (31, 62.0, 79.65),
}
# demo-imperfect's failing snippets and their categories (the README's table)
IMPERFECT_FAILURES = {
    ("focal-loss", "p_t"): "syntax",
    ("rope", "attention scores"): "name",
    ("rope", "interleave angles"): "type",
    ("focal-loss", "stable sigmoid"): "attribute",
    ("lion", "init state"): "index",
    ("focal-loss", "log p_t gather"): "index",
    ("minp-sampling", "tempered softmax"): "import",
    ("lion", "momentum update"): "logic",
    ("minp-sampling", "scaled threshold"): "logic",
    ("focal-loss", "normalise by positives"): "logic",
    ("rope", "causal masking"): "logic",
    ("lion", "linear warmup"): "timeout",
    ("focal-loss", "prior initialisation"): "crash",
    ("lion", "cosine decay"): "other",
}

TERMINATE = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
OTHERS = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"


class Site:
    """The background processes of a site, as scripts/run.sh starts them (gunicorn aside)."""

    def __init__(self, redis: RedisServer, log_dir: Path):
        self.redis, self.log_dir = redis, log_dir
        # the demo's one endless loop (lion/linear warmup) must time out quickly here
        self.env = worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5")
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")
        proc = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.supervisor = self._start("workers", "workers", "--count", "2", "--max-backoff", "2", "scoring")
        self.watchdog = self._start("reconcile", "reconcile", "--every", "1", "--stale-after", "3")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(self.log_dir.glob("*.log")))

    def live_workers(self) -> list[Worker]:
        """The RQ workers registered in Redis whose process is alive."""
        live = []
        for worker in Worker.all(connection=redis_client.Redis.from_url(self.redis.url)):
            try:
                os.kill(worker.pid, 0)
            except (ProcessLookupError, TypeError):
                continue
            live.append(worker)
        return live

    def stop(self) -> None:
        for proc in self.procs:
            session_kill(proc)


@pytest.fixture
def site(settings, tmp_path):
    redis = RedisServer(data_dir=tmp_path / "redis")
    redis.start()
    settings.RQ_QUEUES = {name: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for name in ("default", "scoring", "contributions")}
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    logs = tmp_path / "logs"
    logs.mkdir()
    running = Site(redis, logs)
    yield running
    running.stop()
    redis.stop()


def _submit(user, release, name: str, model: str) -> PredictionSubmission:
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes(name), model_name=model, file_name=f"{name}.jsonl",
        with_paper="without-paper" not in name,
    )
    assert created
    return submission


def _stored(submissions: list[PredictionSubmission]) -> int:
    return SnippetResult.objects.filter(evaluation_id__in=[s.evaluation_id for s in submissions]).count()


def _terminate_the_others() -> int:
    """End every connection to this database but this test's own; how many there were."""
    with connection.cursor() as cur:
        def others() -> bool:
            cur.execute(OTHERS)
            return cur.fetchone()[0] > 0

        # wait for some (the workers hold theirs while a job runs): a drill that hits nothing proves nothing
        wait_for(others, timeout=60, what="the workers' database connections", interval=0.05)
        cur.execute(TERMINATE)
        return cur.fetchone()[0]


def test_connections_terminated_twice_and_redis_stopped_every_submission_finishes_once(site):
    user = User.objects.create_user("drill", "drill@example.org", "pw-drill-123!")
    release = demo_release_create()
    submissions = [_submit(user, release, name, f"Drill {n}") for n, name in enumerate(EXPECTED)]
    total = 50 * len(submissions)
    site.start()

    def stored_at_least(n: int) -> None:
        wait_for(lambda: _stored(submissions) >= n, timeout=300, what=f"{n} results stored", interval=0.1)

    hits = []
    stored_at_least(10)
    hits.append(_terminate_the_others())
    time.sleep(1)  # the pause between the two
    stored_at_least(_stored(submissions) + 10)
    hits.append(_terminate_the_others())
    stored_at_least(_stored(submissions) + 10)
    assert _stored(submissions) < total - 20, "the disturbances came too late to matter; give the drill more work"
    site.redis.outage(5)
    assert all(hits), f"the terminations found no connection to end: {hits}"

    def ended() -> bool:
        return all(s.status in TERMINAL for s in PredictionSubmission.objects.filter(pk__in=[s.pk for s in submissions]))

    try:
        wait_for(ended, timeout=600, what="every submission to end", interval=0.5)
    except AssertionError:
        jobs = [(j.submission_id, j.paper.paper_id, j.status, j.attempt, j.history[-3:])
                for s in submissions for j in s.jobs.select_related("paper")]
        raise AssertionError(f"stuck: {jobs}\n{site.logs()}")

    for submission, (name, (passed, rate, scaled)) in zip(submissions, EXPECTED.items()):
        submission.refresh_from_db()
        jobs = list(submission.jobs.all())
        assert submission.status == Status.FINISHED, (name, submission.failure_reason, site.logs())
        assert submission.failure_reason == ""
        # nothing re-run by hand: every new attempt came from the workers or the watchdog
        assert not [h for j in jobs for h in j.history if "re-run by" in h["event"]]
        results = SnippetResult.objects.filter(evaluation_id=submission.evaluation_id)
        assert results.count() == 50, name
        assert results.values("snippet_id", "sample").distinct().count() == 50, f"{name}: a result stored twice"
        assert results.filter(passed=True).count() == passed, name
        ev = submission.evaluation
        ev.refresh_from_db()
        assert ev.pass_rate == pytest.approx(rate, abs=0.01) and ev.scaled_pass_rate == pytest.approx(scaled, abs=0.01)
        assert ev.snippets_covered == ev.snippets_total == 50
    imperfect = SnippetResult.objects.filter(evaluation_id=submissions[0].evaluation_id, passed=False)
    assert {(r.snippet.paper.paper_id, r.snippet.name): r.category
            for r in imperfect.select_related("snippet__paper")} == IMPERFECT_FAILURES

    # the terminations were felt mid-job, and taken as the database's fault, not the submission's
    histories = [h["event"] for s in submissions for j in s.jobs.all() for h in j.history]
    assert any("database connection was lost" in e for e in histories), histories
    # and the site has its two workers again (the supervisor restarted any that Redis's stop ended)
    wait_for(lambda: len(site.live_workers()) == 2, timeout=60, what="two live workers after the outage")
    assert site.supervisor.poll() is None and site.watchdog.poll() is None, site.logs()
