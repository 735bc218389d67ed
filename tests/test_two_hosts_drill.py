"""Two worker hosts that have nothing but the database, Redis and the paper storage share one submission.

Each "host" is a network namespace of this test's own making (``ip netns add``, a veth pair with a
/30 of 10.0.0.0/8 on it, nothing else): its worker reaches PostgreSQL and Redis only through a TCP
forwarder that this test runs on the host side of its veth (both listen on 127.0.0.1 only; nothing
is routed or forwarded between the namespaces). Each worker runs in a mount namespace of its own
with an empty var folder, its own host name, the release folders and the demo hidden under empty
tmpfs mounts, and the papers storage (a FileSystemStorage folder) bind-mounted read-only: the one
path the hosts share, standing in for the S3-compatible bucket production uses
(docs/deploy.md). The worker gets the paper files by the content hash its job names
(scoring.paper_store). Runs as root with ``ip netns`` and a PostgreSQL database (a SQLite file
would be a shared path); skips with the reason otherwise.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis as redis_client
from django.contrib.auth.models import User
from django.db import connection
from rq import Worker

from catalog.models import Release, SnippetResult
from leaderboard.importers.pset import pset_import
from submissions import upload
from submissions.models import Status

from submissions_support import (
    DEMO,
    ROOT,
    RedisServer,
    predictions_bytes,
    process_group_kill,
    wait_for,
    worker_env,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)
HOSTS = 2


def _why_not() -> str:
    if os.geteuid() != 0:
        return "the two-host drill makes network namespaces: it needs root"
    for tool in ("ip", "unshare", "bwrap", "redis-server"):
        if shutil.which(tool) is None:
            return f"the two-host drill needs {tool!r}"
    probe = f"rcb-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' does not work here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


class Forwarder:
    """TCP forwarders on the host side of the veths (asyncio in a thread of this test)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="drill-forwarder", daemon=True)
        self.thread.start()
        self.servers: list[asyncio.AbstractServer] = []

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def listen(self, *, host: str, port: int, target: tuple[str, int]) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

        async def start() -> asyncio.AbstractServer:
            return await asyncio.start_server(handle, host, port)

        self.servers.append(asyncio.run_coroutine_threadsafe(start(), self.loop).result(10))

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Hosts:
    """The namespaces, veths, forwarders and worker processes of the drill; close() removes them all."""

    def __init__(self, *, tmp: Path, redis_port: int, store: Path, hidden: list[Path]):
        self.tmp, self.redis_port, self.store, self.hidden = tmp, redis_port, store, hidden
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        tag = os.getpid() % 100000
        self.names = [f"rcb-drill{i}-{tag}" for i in range(HOSTS)]
        self.veths = [f"rcbv{i}h{tag}" for i in range(HOSTS)]
        net = 16 + tag % 200  # a /24 of 10.0.0.0/8 per run; a /30 per host
        self.addrs = [(f"10.{net}.77.{4 * i + 1}", f"10.{net}.77.{4 * i + 2}") for i in range(HOSTS)]
        self.forwarder: Forwarder | None = None
        self.procs: list[subprocess.Popen] = []
        self.vars: list[Path] = []

    def open(self) -> None:
        self.forwarder = Forwarder()
        for i, (ns, veth, (outer, inner)) in enumerate(zip(self.names, self.veths, self.addrs)):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # a leftover of a killed run
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}n")
            _ip("link", "set", f"{veth}n", "netns", ns)
            _ip("addr", "add", f"{outer}/30", "dev", veth)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{inner}/30", "dev", f"{veth}n")
            _ip("-n", ns, "link", "set", f"{veth}n", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # the host side forwards only these two ports of its veth address to the local services
            self.forwarder.listen(host=outer, port=5432, target=("127.0.0.1", int(connection.settings_dict["PORT"] or 5432)))
            self.forwarder.listen(host=outer, port=self.redis_port, target=("127.0.0.1", self.redis_port))
            var = self.tmp / f"host{i}" / "var"
            var.mkdir(parents=True)
            self.vars.append(var)

    def worker_start(self, i: int) -> subprocess.Popen:
        outer = self.addrs[i][0]
        var = self.vars[i]
        s = connection.settings_dict
        env = worker_env(
            f"redis://{outer}:{self.redis_port}/0",
            DATABASE_URL=f"postgres://{s['USER'] or 'postgres'}@{outer}:5432/{s['NAME']}",
            RCB_VAR_DIR=str(var), RCB_PAPER_CACHE=str(var / "paper-cache"), RCB_PSET_ROOT=str(var / "psets"),
            RCB_REFERENCE_CACHE=str(var / "cache" / "references.sqlite3"),
            RCB_MEDIA_ROOT=str(var / "media"), RCB_PAPER_STORAGE_ROOT=str(self.store),
            HOME=str(var / "home"), XDG_CACHE_HOME=str(var / "cache"), TMPDIR=str(var / "tmp"),
            RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5",
        )
        for sub in ("home", "cache", "tmp"):
            (var / sub).mkdir(exist_ok=True)
        hide = " && ".join(f"mount -t tmpfs -o size=1m,mode=0700 rcb-hidden {shlex.quote(str(p))}" for p in self.hidden)
        worker = shlex.join([sys.executable, "manage.py", "rqworker", "scoring", "--name", f"{self.names[i]}-worker"])
        script = (
            f"set -e; hostname {self.names[i]}; {hide}; "
            f"mount --bind {shlex.quote(str(self.store))} {shlex.quote(str(self.store))}; "
            f"mount -o remount,bind,ro {shlex.quote(str(self.store))}; exec {worker}"
        )
        log = open(self.tmp / f"host{i}.log", "wb")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.names[i], "unshare", "--mount", "--propagation", "private", "--uts",
             "sh", "-c", script],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.tmp.glob("host*.log")))

    def close(self) -> None:
        for proc in self.procs:
            process_group_kill(proc, signal.SIGKILL)
        if self.forwarder is not None:
            self.forwarder.close()
        for ns, veth in zip(self.names, self.veths):
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def hosts(settings, tmp_path):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    if connection.vendor != "postgresql":
        pytest.skip("the two-host drill needs a networked database: run it with DATABASE_URL=postgres://...")
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_PSET_ROOT = tmp_path / "main" / "psets"
    store = tmp_path / "main" / "paper-store"
    settings.STORAGES = {**settings.STORAGES, "papers": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(store)}}}
    settings.RCB_PAPER_CACHE = tmp_path / "main" / "paper-cache"
    store.mkdir(parents=True)
    settings.RCB_PSET_ROOT.mkdir(parents=True)
    pool = Hosts(tmp=tmp_path, redis_port=redis.port, store=store,
                 hidden=[settings.RCB_PSET_ROOT, DEMO, Path(os.environ["RCB_PAPER_STORAGE_ROOT"]).parent])
    try:
        pool.open()
        yield pool
    finally:
        pool.close()
        redis.stop()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(name in left for name in pool.names), left


def test_two_hosts_with_only_the_database_redis_and_the_paper_store_finish_one_submission_exactly(hosts):
    result = pset_import(path=DEMO, release_name="Two hosts drill", status=Release.PUBLISHED)
    release = result.release
    assert release.release_papers.count() == 4
    for i in range(HOSTS):
        hosts.worker_start(i)
    rq_redis = redis_client.Redis.from_url(hosts.redis_url)
    # both hosts wait on the queue before the jobs come: each takes its share
    wait_for(lambda: len(Worker.all(connection=rq_redis)) == HOSTS, timeout=120,
             what=f"both workers to register over their veths\n{hosts.logs()}")
    user = User.objects.create_user("drill2", "drill2@example.org", "pw-drill-123!")
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes("demo-imperfect"), model_name="Two hosts",
        file_name="demo-imperfect.jsonl",
    )
    assert created

    def ended() -> bool:
        submission.refresh_from_db()
        return submission.status in TERMINAL

    try:
        wait_for(ended, timeout=600, what="the submission to end", interval=0.5)
    except AssertionError:
        jobs = list(submission.jobs.values("paper__paper_id", "status", "worker", "error"))
        raise AssertionError(f"submission stuck in {submission.status}; jobs {jobs}\n{hosts.logs()}") from None
    assert submission.status == Status.FINISHED, f"{submission.failure_reason}\n{hosts.logs()}"

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
    assert {j.worker.rsplit(":", 1)[0] for j in jobs} == set(hosts.names), [j.worker for j in jobs]
    # and each got the files of its jobs by content hash into its own cache, not from a release folder
    for i, name in enumerate(hosts.names):
        fetched = {p.name for p in (hosts.vars[i] / "paper-cache").iterdir() if not p.name.startswith(".")}
        mine = {j.release_paper.archive for j in jobs if j.worker.startswith(f"{name}:")}
        assert mine and mine <= fetched, (name, mine, fetched)
    assert all(len(j.release_paper.archive) == 64 for j in jobs)
