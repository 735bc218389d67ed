"""Helpers of the submission tests: the demo problem set as a published release, uploads, workers."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from django.db import connection
from django.utils import timezone

from benchmark_core.problemset import load_problemset
from benchmark_core.runner import reference_code
from catalog.models import Paper, Release, ReleasePaper, Snippet

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of our own so a test may lose its data without touching others'.

    No persistence by default; with ``data_dir`` an append-only file there (fsync'd at every write,
    as a production Redis with ``--appendonly yes`` keeps its data over a stop), so ``outage`` can
    stop it and start it again on the same port with what it held.
    """

    def __init__(self, data_dir: Path | None = None) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        keep = ["--appendonly", "no"]
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            keep = ["--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *keep],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), timeout=10, what="redis-server to start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again: every key is gone, as after a crash of an unpersisted Redis."""
        self.stop()
        self.start()

    def outage(self, seconds: float) -> None:
        """Stop, stay away ``seconds``, start again on the same port (with its data if it keeps any)."""
        self.stop()
        time.sleep(seconds)
        self.start()


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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


def session_kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a process started with ``start_new_session`` and everything of its session (process
    groups of its own included: RQ's work horses, a supervisor's workers)."""
    victims = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == proc.pid:  # the session id (fields after the command name: state, ppid, pgrp, session)
            victims.append(int(stat.parent.name))
    for pid in victims:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    _reap(proc)


def process_group_kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a worker with everything it started (its work horse and the test runs)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    _reap(proc)


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
