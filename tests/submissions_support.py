"""Helpers of the submission tests: the demo problem set as a published release, uploads, workers."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from benchmark_core.problemset import load_problemset
from benchmark_core.runner import reference_code
from catalog.models import Paper, Release, ReleasePaper, Snippet

# the processes of a site in small (Redis, PostgreSQL, the bucket, worker hosts): one place, bench/site_drill.py
from bench.site_drill import (  # noqa: F401  (re-exported to the tests)
    RedisServer, free_port, process_group_kill, session_kill, wait_for,
)

ROOT = Path(__file__).resolve().parent.parent

#: the marks of a drill with real worker processes: its own Redis server, bwrap sandboxes, the
#: database shared with the workers (so not inside the test's transaction)
WORKER_DRILL_MARKS = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]
DEMO = ROOT / "demo"
PREDICTIONS = DEMO / "predictions"


def demo_release_create(*, slug: str = "demo-test", papers: list[str] | None = None, root: Path = DEMO) -> Release:
    """Import the demo problem set (or some of its papers) as a published, default release."""
    pset = load_problemset(root, papers=papers)
    release = Release.objects.create(
        name=f"Demo {slug}", slug=slug, status=Release.PUBLISHED, published_at=timezone.now(), is_default=True
    )
    for core in pset.papers:
        paper, _ = Paper.objects.get_or_create(paper_id=core.id, defaults={"title": core.title})
        ReleasePaper.objects.create(
            release=release, paper=paper, folder=str(core.folder), snippet_count=len(core.snippets),
            total_weight=core.total_weight,
        )
        rows: dict[tuple[str, str], Snippet] = {}
        for position, snip in enumerate(core.snippets):
            parent = rows.get((snip.file, snip.parent)) if snip.parent else None
            rows[(snip.file, snip.name)] = Snippet.objects.create(
                release=release, paper=paper, file=snip.file, name=snip.name, parent=parent, depth=snip.depth,
                position=position, start_line=snip.start_line, end_line=snip.end_line, weight=snip.weight,
                code="\n".join(reference_code(core, snip)),
            )
    return release


def in_process_scoring(settings) -> None:
    """Settings for tests that run scoring jobs themselves: bwrap, a queue nobody listens to, no heartbeat."""
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600


def predictions_bytes(name: str = "demo-imperfect", papers: list[str] | None = None) -> bytes:
    lines = (PREDICTIONS / f"{name}.jsonl").read_bytes().splitlines(keepends=True)
    if papers:
        import json

        lines = [ln for ln in lines if ln.strip() and json.loads(ln)["paper"] in papers]
    return b"".join(lines)


def bwrap_jobs_settings(settings) -> None:
    """Settings of a test that runs scoring jobs in its own process in bwrap (no Redis to push to)."""
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600


def database_url() -> str:
    """The URL of the test database as this process sees it, for worker subprocesses."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        name = str(s["NAME"])
        assert not name.startswith(":memory:") and "mode=memory" not in name, "workers need a file database"
        return f"sqlite:///{name}"
    auth = s["USER"] or ""
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_DEBUG="1",
        DATABASE_URL=database_url(),
        REDIS_URL=redis_url,
        RCB_HEARTBEAT_SECONDS="0.5",
        RCB_HEARTBEAT_STALE_SECONDS="3",
        DATABASE_CONN_MAX_AGE="0",
    )
    env.update(extra)
    return env


def worker_start(env: dict[str, str], *, name: str, log_dir: Path) -> subprocess.Popen:
    """A real RQ worker process (forks a work horse per job), in its own process group."""
    log = open(log_dir / f"{name}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "scoring", "--name", f"{name}-{os.getpid()}-{time.time_ns()}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
