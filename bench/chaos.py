#!/usr/bin/env python3
"""A seeded chaos soak: demo submissions through the API while faults of every kind hit the site.

    python bench/chaos.py --minutes 10 --seed 7 [--submissions 60] [--backend bwrap|docker] [--report out.json]

It builds a site in small from nothing shared with this machine's services (bench/site_drill.py):
a PostgreSQL cluster of its own (``initdb``, ``pg_ctl``), a redis-server of its own (no
persistence: a restart loses every key), moto's S3 server as the papers bucket (behind a front
that can refuse connections), gunicorn serving the API, the ``reconcile`` watchdog, and worker
hosts in network namespaces (``manage.py workers --count 1`` each, its own var folder and a small
tmpfs as paper cache, nothing but TCP to the database, Redis and the bucket).

Then, for ``--minutes``, a submitter posts ``--submissions`` uploads of the demo predictions
(each different: every snippet's answer drawn from the perfect or the imperfect file; some with
two samples, some partial, some cancelled on purpose a few seconds after their upload) while the
chaos loop, every 5-20 s, does one of (a seeded draw, each kind once per round):

  sigkill    SIGKILL a host's RQ worker (its supervisor starts it again)
  sigstop    SIGSTOP a whole host for 60 s (a hung host), then SIGCONT
  pg-restart restart PostgreSQL (pg_ctl stop -m fast, 1-4 s down, start)
  redis-restart  restart Redis empty
  pg-terminate   terminate every database connection (pg_terminate_backend)
  bucket-away    the bucket refuses every connection for 20 s
  disk-full      fill a host's paper-cache disk to 100 % for 20 s
  docker-stop    (only with --backend docker) stop the Docker engine for 20 s

The seed and every fault are printed as they happen (``--faults`` replays a given list of kinds).
Once the time is up it waits for every submission to end, scores the two demo files with the CLI
(``python -m benchmark_core score``) and checks, printing each check and the worst recovery time
per fault kind:

1. every submission ended ``finished``, or ``cancelled`` where it was cancelled on purpose;
2. every verdict stored once, and equal to the CLI's verdict for the same completion;
3. no job waited longer than the heartbeat limit + the watchdog period (+ 2 s of clock rounding,
   + any database outage meanwhile, when the watchdog cannot act) after its worker died or hung;
4. nothing charged to a quota for a fault: one submission per upload however often a POST was
   retried, and each user's quota use equals their finished submissions.

Exit status 0 when every check holds. Needs root (network namespaces, tmpfs), bubblewrap (or
Docker), redis-server, initdb/pg_ctl and ``moto[server]`` (requirements-dev.txt).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.site_drill import (  # noqa: E402
    Forwarder, Hosts, PgCluster, RedisServer, S3Server, children, free_port, netns_problem, session_kill,
    session_pids, wait_for,
)

DEMO = ROOT / "demo"
PREDICTIONS = DEMO / "predictions"
BUCKET = "rcb-chaos-papers"
DB = "rcb_chaos"
KINDS = ["sigkill", "sigstop", "pg-restart", "redis-restart", "pg-terminate", "bucket-away", "disk-full"]
#: the site's timing, scaled down from production's (5 s heartbeat, 60 s stale, watchdog every 30 s)
HEARTBEAT, STALE, WATCHDOG_EVERY = 0.5, 4.0, 1.0
HANG_SECONDS, AWAY_SECONDS = 60.0, 20.0
USERS = 4


def say(line: str) -> None:
    print(line, flush=True)


@dataclass
class Fault:
    kind: str
    at: float  # seconds since the soak started
    target: str = ""
    end: float | None = None
    note: str = ""
    wall_start: float = 0.0
    wall_end: float = 0.0


@dataclass
class Upload:
    n: int
    user: int
    kind: str  # full, samples, partial, cancel
    lines: list[dict]
    papers: list[str]
    id: int | None = None
    posts: int = 0
    cancel_answer: int | None = None
    errors: list[str] = field(default_factory=list)


def _lines(name: str) -> list[dict]:
    return [json.loads(ln) for ln in (PREDICTIONS / f"{name}.jsonl").read_text().splitlines() if ln.strip()]


def uploads_plan(rng: random.Random, count: int) -> list[Upload]:
    """``count`` different uploads: each snippet's answer drawn from the perfect or the imperfect file."""
    perfect, imperfect = _lines("demo-perfect"), _lines("demo-imperfect")
    papers = sorted({ln["paper"] for ln in perfect})
    plan: list[Upload] = []
    seen: set[str] = set()
    kinds = ["full", "full", "samples", "partial", "cancel"]
    for n in range(count):
        kind = kinds[n % len(kinds)] if n < len(kinds) else rng.choice(kinds)
        while True:
            chosen = papers if kind != "partial" else sorted(rng.sample(papers, rng.randint(1, len(papers) - 1)))
            lines: list[dict] = []
            for sample in ([0, 1] if kind == "samples" else [0]):
                for good, bad in zip(perfect, imperfect):
                    if good["paper"] not in chosen:
                        continue
                    line = dict(rng.choice((good, bad)))
                    if kind == "samples":
                        line["sample"] = sample
                    lines.append(line)
            key = json.dumps(lines, sort_keys=True)
            if key not in seen:
                seen.add(key)
                break
        plan.append(Upload(n=n, user=n % USERS, kind=kind, lines=lines, papers=chosen))
    return plan


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.tmp = Path(args.work_dir or tempfile.mkdtemp(prefix="rcb-chaos-"))
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self.faults: list[Fault] = []
        self.samples: list[tuple[float, int]] = []  # (wall time, verdicts stored)
        self.stop = threading.Event()
        self.t0 = 0.0
        self.lock = threading.Lock()
        self.busy: set[str] = set()  # background faults running (by kind)
        self.db_down: list[tuple[float, float]] = []  # wall times the database was down

    # ---------------------------------------------------------------- the site in small
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_DEBUG="1", DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or "chaos-soak-secret",
            DJANGO_SECURE_COOKIES="0", DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
            DATABASE_URL=self.pg.url(DB), DATABASE_CONN_MAX_AGE="0", REDIS_URL=self.redis.url,
            RCB_SANDBOX_BACKEND=self.args.backend, RCB_RUN_TIMEOUT="5",
            RCB_HEARTBEAT_SECONDS=str(HEARTBEAT), RCB_HEARTBEAT_STALE_SECONDS=str(STALE),
            RCB_SUBMISSIONS_PER_DAY="1000", RCB_VAR_DIR=str(self.tmp / "web"),
            RCB_PSET_ROOT=str(self.tmp / "web" / "psets"), RCB_PAPER_CACHE=str(self.tmp / "web" / "paper-cache"),
            RCB_REFERENCE_CACHE=str(self.tmp / "web" / "references.sqlite3"),
            RCB_MEDIA_ROOT=str(self.tmp / "web" / "media"), PYTHONUNBUFFERED="1",
            **self.s3.env(BUCKET),
        )
        env.pop("RCB_PAPER_STORAGE_ROOT", None)
        env.update(extra)
        return env

    def manage(self, *args: str, log: str, wait: bool = False) -> subprocess.Popen:
        out = open(self.tmp / f"{log}.log", "ab")
        proc = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            if proc.wait() != 0:
                raise RuntimeError(f"manage.py {' '.join(args)} failed: {(self.tmp / f'{log}.log').read_text()[-2000:]}")
        else:
            self.procs.append(proc)
        return proc

    def start_services(self) -> None:
        say(f"[chaos] work folder {self.tmp}")
        self.pg = PgCluster()
        self.pg.init()
        self.pg.start()
        self.pg.createdb(DB)
        self.redis = RedisServer()
        self.redis.start()
        self.forwarder = Forwarder()
        self.s3 = S3Server(self.tmp / "moto.log", self.forwarder)
        self.s3.start()
        self.s3.bucket_create(BUCKET)
        (self.tmp / "web").mkdir(exist_ok=True)
        say(f"[chaos] PostgreSQL :{self.pg.port}, Redis :{self.redis.port}, S3 (moto) :{self.s3.port} "
            f"behind :{self.s3.front}")
        self.manage("migrate", "--noinput", log="migrate", wait=True)
        os.environ.update(self.env())
        import django

        django.setup()

    def start_site(self) -> None:
        self.web_port = free_port()
        out = open(self.tmp / "web.log", "ab")
        self.web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "rcbsite.wsgi:application", "--bind", f"127.0.0.1:{self.web_port}",
             "--workers", "1", "--threads", "4", "--timeout", "120"],
            cwd=ROOT, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(self.web)
        self.manage("reconcile", "--every", str(WATCHDOG_EVERY), "--stale-after", str(STALE), log="watchdog")
        services = {self.pg.port: ("127.0.0.1", self.pg.port), self.redis.port: ("127.0.0.1", self.redis.port),
                    self.s3.front: ("127.0.0.1", self.s3.front)}
        self.hosts = Hosts(tmp=self.tmp, count=self.args.hosts, services=services, cache_mb=8, tag="chaos",
                           hidden=[DEMO, self.tmp / "web", self.pg.folder])
        self.hosts.open()
        for i in range(self.args.hosts):
            outer = self.hosts.outer(i)
            env = self.env(DATABASE_URL=f"postgres://postgres@{outer}:{self.pg.port}/{DB}",
                           REDIS_URL=f"redis://{outer}:{self.redis.port}/0",
                           **self.s3.env(BUCKET, endpoint=f"http://{outer}:{self.s3.front}"))
            self.hosts.start(i, env, [sys.executable, "manage.py", "workers", "--count", "1", "--max-backoff", "2",
                                      "scoring"])
        wait_for(self._web_up, timeout=120, what=lambda: f"gunicorn\n{(self.tmp / 'web.log').read_text()[-2000:]}")

    def _web_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/api/v1/ping", timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def prepare(self) -> None:
        """The demo as the published default release (its papers stored in the bucket) and the users."""
        from accounts.services import api_token_create
        from django.contrib.auth.models import User
        from leaderboard.importers.pset import pset_import
        from catalog.models import Release
        from scoring.paper_store import release_paper_archive_ensure

        release = pset_import(path=DEMO, release_name="Chaos soak", status=Release.PUBLISHED).release
        Release.objects.filter(pk=release.pk).update(is_default=True)
        for rp in release.release_papers.select_related("paper"):
            release_paper_archive_ensure(release_paper=rp)
        self.release_slug = release.slug
        self.tokens = []
        for u in range(USERS):
            user = User.objects.create_user(f"chaos{u}", f"chaos{u}@example.org", f"pw-chaos-{u}-123!")
            self.tokens.append(api_token_create(user=user, name="chaos")[1])

    # ---------------------------------------------------------------- the API client
    def _post(self, path: str, token: str, body: bytes = b"", *, tries: int = 120) -> tuple[int, dict]:
        """POST with retries while the site is disturbed (a retried upload is recognised as a duplicate)."""
        last = ""
        for _ in range(tries):
            req = urllib.request.Request(f"http://127.0.0.1:{self.web_port}{path}", data=body, method="POST",
                                         headers={"Authorization": f"Token {token}",
                                                  "Content-Type": "application/x-ndjson"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return r.status, json.loads(r.read() or b"{}")
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return exc.code, json.loads(exc.read() or b"{}")
                last = f"HTTP {exc.code}"
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(1)
        raise RuntimeError(f"POST {path} kept failing: {last}")

    def submitter(self, plan: list[Upload]) -> None:
        span = max(self.args.minutes * 60 * 0.7, 1.0)
        for up in plan:
            due = self.t0 + span * up.n / max(len(plan), 1)
            while time.time() < due and not self.stop.is_set():
                time.sleep(0.2)
            body = "".join(json.dumps(ln) + "\n" for ln in up.lines).encode()
            query = f"?model_name=Chaos-{up.n}&release={self.release_slug}&file_name=chaos-{up.n}.jsonl"
            if up.kind == "partial":
                query += "&allow_partial=1"
            status, payload = self._post(f"/api/v1/submissions{query}", self.tokens[up.user], body)
            up.posts += 1
            if status not in (200, 201):
                up.errors.append(f"upload answered {status}: {payload}")
                say(f"[chaos] upload {up.n} refused: {status} {payload}")
                continue
            up.id = payload["id"]
            if up.kind == "cancel":
                threading.Thread(target=self._cancel_later, args=(up,), daemon=True).start()

    def _cancel_later(self, up: Upload) -> None:
        time.sleep(self.rng_cancel.uniform(0.5, 8.0))
        status, payload = self._post(f"/api/v1/submissions/{up.id}/cancel", self.tokens[up.user])
        up.cancel_answer = status
        say(f"[chaos] +{time.time() - self.t0:6.1f}s cancel of upload {up.n} (#{up.id}): {status}")

    # ---------------------------------------------------------------- faults
    def _worker_pid(self, i: int) -> int | None:
        supervisor = self.hosts.procs[i].pid
        kids = children(supervisor)
        return kids[0] if kids else None

    def _busy_hosts(self) -> list[int]:
        """The hosts whose worker runs a job now (a fault aimed at one of them hits a job)."""
        from django.db import DatabaseError, connection

        from scoring.models import Job, JobStatus

        try:
            workers = list(Job.objects.filter(status=JobStatus.RUNNING).values_list("worker", flat=True))
        except DatabaseError:
            connection.close()
            return []
        return [i for i, name in enumerate(self.hosts.names) if any(w.startswith(f"{name}:") for w in workers)]

    def fault(self, kind: str, t: float) -> Fault:
        f = Fault(kind=kind, at=round(t, 1), wall_start=time.time())
        host = self.rng.randrange(self.args.hosts)
        if kind in ("sigkill", "sigstop"):
            busy = self._busy_hosts()
            if busy and host not in busy:  # (the seeded draw stands when it names a busy host)
                host = self.rng.choice(busy)
        if kind == "sigkill":
            pid = self._worker_pid(host)
            f.target = f"{self.hosts.names[host]} worker {pid}"
            if pid:
                os.kill(pid, signal.SIGKILL)
            f.end = f.at
        elif kind == "sigstop":
            pids = session_pids(self.hosts.procs[host].pid)
            f.target = f"{self.hosts.names[host]} ({len(pids)} processes)"
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            self._later(kind, HANG_SECONDS, f, lambda: [self._cont(pid) for pid in pids])
        elif kind == "pg-restart":
            down = self.rng.uniform(1, 4)
            f.target = f"down {down:.1f} s"
            start = time.time()
            self.pg.restart(down=down)
            self.db_down.append((start, time.time()))
            f.end = round(time.time() - self.t0, 1)
        elif kind == "redis-restart":
            self.redis.restart()
            f.end = round(time.time() - self.t0, 1)
        elif kind == "pg-terminate":
            f.note = f"{self.pg.terminate_connections(DB)} connections ended"
            f.end = f.at
        elif kind == "bucket-away":
            self.s3.refuse()
            self._later(kind, AWAY_SECONDS, f, self.s3.accept)
        elif kind == "disk-full":
            cache = self.hosts.vars[host] / "paper-cache"
            f.target = f"{self.hosts.names[host]} {cache}"
            filler = cache / ".chaos-fill"
            try:
                with open(filler, "wb") as out:
                    while True:
                        out.write(b"\0" * (1 << 20))
                        out.flush()
            except OSError as exc:
                f.note = f"filled ({exc.strerror})"
            self._later(kind, AWAY_SECONDS, f, lambda: filler.unlink(missing_ok=True))
        elif kind == "docker-stop":
            manager = ["systemctl"] if shutil.which("systemctl") else ["service"]
            stopped = subprocess.run([*manager, "stop", "docker"] if manager == ["systemctl"] else
                                     ["service", "docker", "stop"], capture_output=True, text=True)
            f.note = "stopped" if stopped.returncode == 0 else f"could not stop it: {stopped.stderr.strip()[:100]}"

            def start_engine() -> None:
                subprocess.run([*manager, "start", "docker"] if manager == ["systemctl"] else
                               ["service", "docker", "start"], capture_output=True)

            self._later(kind, AWAY_SECONDS, f, start_engine)
        say(f"[chaos] +{f.at:6.1f}s {kind} {f.target} {f.note}".rstrip())
        return f

    @staticmethod
    def _cont(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def _later(self, kind: str, seconds: float, f: Fault, undo) -> None:
        with self.lock:
            self.busy.add(kind)

        def run() -> None:
            self.stop.wait(seconds) if kind != "sigstop" else time.sleep(seconds)
            undo()
            f.end = round(time.time() - self.t0, 1)
            f.wall_end = time.time()
            say(f"[chaos] +{f.end:6.1f}s {kind} over")
            with self.lock:
                self.busy.discard(kind)

        threading.Thread(target=run, daemon=True, name=f"undo-{kind}").start()

    def chaos(self, kinds: list[str]) -> None:
        deck: list[str] = []
        replay = list(self.args.faults.split(",")) if self.args.faults else None
        end = self.t0 + self.args.minutes * 60
        while not self.stop.is_set():
            if self.stop.wait(self.rng.uniform(5, 20)) or time.time() >= end:
                return
            if replay is not None:
                if not replay:
                    continue
                kind = replay.pop(0)
            else:
                if not deck:
                    deck = list(kinds)
                    self.rng.shuffle(deck)
                with self.lock:
                    free = [k for k in deck if k not in self.busy]
                if not free:
                    continue
                kind = free[0]
                deck.remove(kind)
            try:
                f = self.fault(kind, time.time() - self.t0)
            except Exception as exc:  # a fault that cannot be made is reported, the soak goes on
                f = Fault(kind=kind, at=round(time.time() - self.t0, 1), note=f"not made: {exc}")
                say(f"[chaos] {kind} not made: {exc}")
            if f.end is not None and not f.wall_end:
                f.wall_end = self.t0 + f.end
            self.faults.append(f)

    def monitor(self) -> None:
        from django.db import DatabaseError, connection

        from catalog.models import SnippetResult

        while not self.stop.is_set():
            try:
                n = SnippetResult.objects.filter(evaluation__submission__isnull=False).count()
                self.samples.append((time.time(), n))
            except DatabaseError:
                connection.close()
            self.stop.wait(0.5)
        connection.close()

    # ---------------------------------------------------------------- the run
    def run(self) -> dict:
        kinds = list(KINDS) + (["docker-stop"] if self.args.backend == "docker" else [])
        say(f"[chaos] seed {self.args.seed}; {self.args.minutes} min; {self.args.submissions} submissions; "
            f"backend {self.args.backend}; fault kinds {', '.join(kinds)}")
        self.rng_cancel = random.Random(self.args.seed + 1)
        plan = uploads_plan(random.Random(self.args.seed), self.args.submissions)
        try:
            self.start_services()
            self.prepare()
            self.start_site()
            self.t0 = time.time()
            threads = [threading.Thread(target=self.submitter, args=(plan,), daemon=True),
                       threading.Thread(target=self.chaos, args=(kinds,), daemon=True),
                       threading.Thread(target=self.monitor, daemon=True)]
            for th in threads:
                th.start()
            threads[1].join()  # the chaos loop ends when the time is up
            threads[0].join()
            while True:  # background faults end (a hung host resumes, the bucket answers again)
                with self.lock:
                    if not self.busy:
                        break
                time.sleep(0.5)
            say(f"[chaos] +{time.time() - self.t0:6.1f}s faults over; waiting for every submission to end")
            ended = self._drain(plan)
            self.stop.set()
            threads[2].join(5)
            cli = self.cli_verdicts()
            report = self.check(plan, cli, drained=ended)
        finally:
            self.stop.set()
            self.close()
        return report

    def _drain(self, plan: list[Upload]) -> bool:
        from django.db import DatabaseError, connection

        from submissions.models import PredictionSubmission, Status

        ids = [u.id for u in plan if u.id]
        deadline = time.time() + self.args.drain_minutes * 60
        while time.time() < deadline:
            try:
                left = PredictionSubmission.objects.filter(pk__in=ids).exclude(
                    status__in=[Status.FINISHED, Status.CANCELLED, Status.FAILED]).count()
            except DatabaseError:
                connection.close()
                left = -1
            if left == 0:
                return True
            time.sleep(1)
        return False

    def cli_verdicts(self) -> dict[tuple, tuple[bool, str]]:
        """The CLI's verdict of every completion the uploads drew from: (paper, file, snippet, completion) -> (passed, category)."""
        verdicts: dict[tuple, tuple[bool, str]] = {}
        for name in ("demo-perfect", "demo-imperfect"):
            out = self.tmp / f"cli-{name}.json"
            done = subprocess.run(
                [sys.executable, "-m", "benchmark_core", "score", str(DEMO), str(PREDICTIONS / f"{name}.jsonl"),
                 "--backend", self.args.backend, "--timeout", "5", "--quiet", "-o", str(out)],
                cwd=ROOT, env={**os.environ, "TMPDIR": str(self.tmp)}, capture_output=True, text=True)
            if not out.exists():
                raise RuntimeError(f"the CLI did not score {name}: {done.stderr[-2000:]}")
            runs = json.loads(out.read_text())["snippets"]
            answers = {(ln["paper"], ln["file"], ln["snippet"]): ln["completion"] for ln in _lines(name)}
            for r in runs:
                key = (r["paper"], r["file"], r["snippet"])
                verdicts[(*key, answers[key])] = (bool(r["passed"]), r["category"] or "")
        return verdicts

    # ---------------------------------------------------------------- the checks
    def check(self, plan: list[Upload], cli: dict, *, drained: bool) -> dict:
        from django.contrib.auth.models import User

        from catalog.models import Snippet, SnippetResult
        from scoring.models import Job
        from submissions import upload
        from submissions.models import PredictionSubmission, Status

        checks: dict[str, list[str]] = {"ended": [], "verdicts": [], "waits": [], "quota": []}
        subs = {s.pk: s for s in PredictionSubmission.objects.filter(pk__in=[u.id for u in plan if u.id])}
        # 1. every submission ended as intended
        for up in plan:
            if up.id is None:
                checks["ended"].append(f"upload {up.n} ({up.kind}) was never stored: {up.errors}")
                continue
            s = subs[up.id]
            if up.kind == "cancel" and up.cancel_answer == 200:
                want = {Status.CANCELLED}
            elif up.kind == "cancel":  # the cancel came after the end (409): finished is right
                want = {Status.FINISHED}
            else:
                want = {Status.FINISHED}
            if s.status not in want:
                checks["ended"].append(f"upload {up.n} (#{s.pk}, {up.kind}) ended {s.status}: {s.failure_reason}")
        # 2. every verdict once, and the CLI's
        snippets = {sn.pk: sn for sn in Snippet.objects.filter(release__slug=self.release_slug).select_related("paper")}
        compared = 0
        for up in plan:
            if up.id is None:
                continue
            s = subs[up.id]
            rows = list(SnippetResult.objects.filter(evaluation_id=s.evaluation_id).values(
                "snippet_id", "sample", "passed", "category"))
            keys = [(r["snippet_id"], r["sample"]) for r in rows]
            if len(keys) != len(set(keys)):
                checks["verdicts"].append(f"#{s.pk}: {len(keys) - len(set(keys))} verdicts stored twice")
            samples = sorted({ln.get("sample", 0) for ln in up.lines})
            if s.status == Status.FINISHED and len(set(keys)) != len(snippets) * len(samples):
                checks["verdicts"].append(f"#{s.pk}: {len(set(keys))} verdicts, {len(snippets) * len(samples)} expected")
            answers = {(ln["paper"], ln["file"], ln["snippet"], ln.get("sample", 0)): ln["completion"] for ln in up.lines}
            for r in rows:
                sn = snippets[r["snippet_id"]]
                answer = answers.get((sn.paper.paper_id, sn.file, sn.name, r["sample"]))
                if answer is None:
                    if r["passed"] or r["category"] != "missing":
                        checks["verdicts"].append(f"#{s.pk} {sn.paper.paper_id}/{sn.name}: no answer, stored "
                                                  f"{r['passed']}/{r['category']}")
                    continue
                want = cli.get((sn.paper.paper_id, sn.file, sn.name, answer))
                got = (r["passed"], r["category"] or "")
                compared += 1
                if want != got:
                    checks["verdicts"].append(f"#{s.pk} {sn.paper.paper_id}/{sn.name} sample {r['sample']}: "
                                              f"stored {got}, the CLI says {want}")
        # 3. dead or hung workers: how long their jobs waited for the watchdog. A requeue for a dead
        # worker is set against the last fault before it that could end or freeze that host's
        # worker: a SIGKILL or SIGSTOP of the host, or a Redis restart (a worker running a job quits
        # when Redis goes). After a database fault it is a slow worker taken for dead (its heartbeat
        # could not be written): not a wait. Requeues more than a hang's length after any such fault
        # are counted apart (``unattributed``).
        bound = STALE + WATCHDOG_EVERY + 2.0
        waits: list[float] = []
        unattributed = 0
        causes = [f for f in self.faults if f.kind in ("sigkill", "sigstop", "redis-restart", "pg-restart",
                                                        "pg-terminate") and not f.note.startswith("not made")]
        jobs = Job.objects.filter(submission_id__in=list(subs)).only("pk", "history")
        for job in jobs:
            for entry in job.history or []:
                event = str(entry.get("event", ""))
                if "stopped answering" not in event or not event.startswith("attempt "):
                    continue
                at = dt.datetime.fromisoformat(entry["at"]).timestamp()
                host = event.split("the worker ", 1)[1].split(":", 1)[0]
                before = [f for f in causes if f.wall_start <= at + 1.0
                          and (f.kind in ("redis-restart", "pg-restart", "pg-terminate") or f.target.startswith(host))]
                if not before or at - before[-1].wall_start > HANG_SECONDS + bound:
                    unattributed += 1
                    continue
                f = before[-1]
                if f.kind.startswith("pg-"):
                    continue
                waited = at - f.wall_start
                outage = sum(max(0.0, min(e, at) - max(s, f.wall_start)) for s, e in self.db_down)
                waits.append(waited)
                if waited > bound + outage:
                    checks["waits"].append(f"job {job.pk}: requeued {waited:.1f} s after {f.kind} of {f.target or 'all'} "
                                           f"(bound {bound:.1f} s + {outage:.1f} s of database outage)")
        # 4. quota: one submission per upload, and only finished ones counted
        for u in range(USERS):
            user = User.objects.get(username=f"chaos{u}")
            mine = [up for up in plan if up.user == u and up.id]
            stored = PredictionSubmission.objects.filter(user=user).count()
            if stored != len(mine):
                checks["quota"].append(f"chaos{u}: {stored} submissions stored for {len(mine)} uploads")
            finished = PredictionSubmission.objects.filter(user=user, status=Status.FINISHED).count()
            used = upload.quota_used(user)
            if used != finished:
                checks["quota"].append(f"chaos{u}: quota use {used}, finished submissions {finished}")
        if not drained:
            checks["ended"].insert(0, f"not every submission ended within {self.args.drain_minutes} min of the chaos")
        # the worst recovery per fault kind: from a fault's end to the next verdict stored
        recovery: dict[str, float | None] = {}
        for f in self.faults:
            end = f.wall_end or f.wall_start
            before = [n for t, n in self.samples if t <= end]
            base = before[-1] if before else 0
            after = [t for t, n in self.samples if t > end and n > base]
            took = round(after[0] - end, 1) if after else None
            if took is not None:
                recovery[f.kind] = max(recovery.get(f.kind) or 0.0, took)
            else:
                recovery.setdefault(f.kind, None)
        waiting_words: dict[str, int] = {}  # what waiting jobs said (attempt numbers aside), how often
        for j in jobs:
            for h in j.history or []:
                event = str(h.get("event", ""))
                if " waits: " in event:
                    words = event.split(" waits: ", 1)[1].split("; the watchdog queues it")[0]
                    waiting_words[words] = waiting_words.get(words, 0) + 1
        report = {
            "seed": self.args.seed, "minutes": self.args.minutes, "backend": self.args.backend,
            "submissions": len(plan), "kinds": {k: sum(1 for u in plan if u.kind == k) for k in sorted({u.kind for u in plan})},
            "statuses": {st: sum(1 for s in subs.values() if s.status == st) for st in sorted({s.status for s in subs.values()})},
            "cancelled_on_purpose": sum(1 for u in plan if u.kind == "cancel" and u.cancel_answer == 200),
            "posts": sum(u.posts for u in plan), "verdicts_compared": compared,
            "faults": [asdict(f) for f in self.faults],
            "worst_recovery_seconds": recovery, "worker_death_waits": sorted(round(w, 1) for w in waits),
            "wait_bound_seconds": bound, "unattributed_requeues": unattributed, "waiting_messages": waiting_words,
            "checks": checks, "ok": not any(checks.values()),
        }
        return report

    def close(self) -> None:
        hosts = getattr(self, "hosts", None)
        if hosts is not None:
            hosts.close()
        for proc in self.procs:
            session_kill(proc)
        for name in ("s3", "redis"):
            part = getattr(self, name, None)
            if part is not None:
                part.stop()
        if getattr(self, "forwarder", None) is not None:
            self.forwarder.close()
        if getattr(self, "pg", None) is not None:
            from django.db import connections

            connections.close_all()
            if self.args.keep:
                self.pg.stop(mode="immediate")
                say(f"[chaos] the PostgreSQL cluster is kept in {self.pg.folder}")
            else:
                self.pg.remove()
        if not self.args.keep and not self.args.work_dir:
            shutil.rmtree(self.tmp, ignore_errors=True)


def print_report(report: dict) -> None:
    say("")
    say(f"seed {report['seed']}, {report['minutes']} min, backend {report['backend']}: "
        f"{report['submissions']} submissions {report['kinds']}, {report['posts']} POSTs")
    say("faults: " + ", ".join(f"+{f['at']}s {f['kind']}" for f in report["faults"]))
    say(f"statuses: {report['statuses']} (cancelled on purpose: {report['cancelled_on_purpose']})")
    say(f"verdicts compared with the CLI's: {report['verdicts_compared']}")
    say(f"jobs requeued after a dead or hung worker, waits (s): {report['worker_death_waits']} "
        f"(bound {report['wait_bound_seconds']} s; {report['unattributed_requeues']} requeues long after any fault)")
    say("worst recovery per fault kind (fault end -> next verdict stored): " + ", ".join(
        f"{k} {v if v is not None else 'n/a'}{' s' if v is not None else ''}"
        for k, v in sorted(report["worst_recovery_seconds"].items())))
    for words, times in sorted(report["waiting_messages"].items()):
        say(f"what a waiting job said ({times} times): {words}")
    names = {"ended": "every submission ended as intended", "verdicts": "every verdict once and the CLI's",
             "waits": "no job waited past heartbeat limit + watchdog period", "quota": "nothing charged for a fault"}
    for key, problems in report["checks"].items():
        say(f"{'PASS' if not problems else 'FAIL'}  {names[key]}")
        for p in problems[:20]:
            say(f"      {p}")
    say("OK" if report["ok"] else "FAILED")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the chaos lasts (default 10)")
    parser.add_argument("--seed", type=int, default=None, help="the seed (default: a random one, printed)")
    parser.add_argument("--submissions", type=int, default=60, help="uploads of the demo (default 60)")
    parser.add_argument("--backend", choices=["bwrap", "docker"], default="bwrap")
    parser.add_argument("--hosts", type=int, default=2, help="worker hosts (default 2)")
    parser.add_argument("--faults", default="", help="replay these fault kinds in this order (comma-separated)")
    parser.add_argument("--drain-minutes", type=float, default=20.0,
                        help="how long to wait, after the chaos, for every submission to end (default 20)")
    parser.add_argument("--report", help="write the report as JSON here")
    parser.add_argument("--work-dir", help="keep every log and data folder here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder and the PostgreSQL cluster (its folder is printed)")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**6)
    unknown = [k for k in args.faults.split(",") if k and k not in KINDS + ["docker-stop"]]
    if unknown or (args.backend != "docker" and "docker-stop" in args.faults):
        parser.error(f"unknown fault kinds (or docker-stop without --backend docker): {unknown or ['docker-stop']}")
    problem = netns_problem() or ("" if shutil.which("initdb") and shutil.which("pg_ctl") else "needs initdb and pg_ctl")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcbsite.settings")
    os.chdir(ROOT)
    report = Soak(args).run()
    print_report(report)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
