"""Evaluations run here (issue 23): the endpoint rule, the key, the caps, and the drill with real parts.

The drill: a real OpenAI-compatible server on 127.0.0.1 (tests/engine/chat_server.py) answers every
demo prompt with the reference code and fails some requests (429, 500); a real RQ worker on the
``generation`` and ``scoring`` queues (bwrap sandboxes) and the ``reconcile`` watchdog run as
subprocesses. An evaluation started through the API with a key is killed mid-generation (its worker
SIGKILLed), finishes at 100 % with the run-here badge, asks for no answer already stored, and its key
is nowhere afterwards: database dump, Redis, the processes' logs, pages, API answers, run card, results.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.test import Client

from accounts.services import api_token_create
from benchmark_core.masking import build_prompt
from benchmark_core.problemset import load_problemset
from catalog.models import Evaluation
from scoring.models import Job, JobKind
from submissions.models import EvaluationRun, PredictionSubmission, RunStatus
from submissions.upload import QuotaExceeded
from submissions.runs import RunRefused, endpoint_check, evaluation_run_create

from engine.chat_server import ChatServer, reference_answers
from submissions_support import (
    DEMO,
    ROOT,
    WORKER_DRILL_MARKS,
    RedisServer,
    demo_release_create,
    predictions_bytes,
    process_group_kill,
    session_kill,
    wait_for,
    worker_env,
)

SECRET = Fernet.generate_key().decode()
KEY = "sk-test-RUNHERE-0123456789abcdefXYZ"


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("runner", email="runner@example.org", password="pw-runner-1")


def _token(user) -> str:
    return api_token_create(user=user, name="runs")[1]


# --------------------------------------------------------------------------- the endpoint rule


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/v1", "http://localhost/v1", "http://10.1.2.3/v1", "http://192.168.0.1/v1",
    "http://169.254.169.254/latest", "http://[::1]:8000/v1", "http://[fd00:ec2::254]/", "http://100.64.0.1/",
])
def test_own_network_refused(settings, url):
    settings.RCB_GENERATION_ALLOWED_HOSTS = []
    with pytest.raises(RunRefused, match="does not call its own network"):
        endpoint_check(url)


@pytest.mark.parametrize("url,why", [
    ("ftp://example.org/v1", "http:// or https://"), ("file:///etc/passwd", "http:// or https://"),
    ("http://user:pw@8.8.8.8/v1", "must not hold credentials"), ("http:///v1", "no host"),
    ("http://8.8.8.8:99999/v1", "invalid port"),
])
def test_bad_urls_refused(url, why):
    with pytest.raises(RunRefused, match=why):
        endpoint_check(url)


def test_operator_allows_a_host(settings):
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    endpoint_check("http://127.0.0.1:8000/v1")
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["10.0.0.0/8"]
    endpoint_check("http://10.1.2.3/v1")
    with pytest.raises(RunRefused):
        endpoint_check("http://127.0.0.1:8000/v1")
    endpoint_check("http://8.8.8.8/v1")  # a global address needs no allowance (nothing is sent here)


@pytest.mark.django_db
def test_api_refuses_loopback_and_says_why(settings, user):
    settings.RCB_GENERATION_ALLOWED_HOSTS = []
    settings.RCB_GENERATION_SECRET = SECRET
    demo_release_create(slug="demo-runs")
    client = Client(HTTP_AUTHORIZATION=f"Token {_token(user)}")
    body = {"release": "demo-runs", "model_name": "Local", "base_url": "http://127.0.0.1:9/v1", "model": "m",
            "api_key": KEY}
    answer = client.post("/api/v1/runs", json.dumps(body), content_type="application/json")
    assert answer.status_code == 400
    assert "127.0.0.1" in answer.json()["error"] and "RCB_GENERATION_ALLOWED_HOSTS" in answer.json()["error"]
    assert KEY not in answer.content.decode()
    assert not EvaluationRun.objects.exists() and not Job.objects.exists()


# --------------------------------------------------------------------------- the key, the caps, the quota


@pytest.mark.django_db
def test_key_encrypted_at_rest_and_refused_without_a_secret(settings, user):
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    release = demo_release_create(slug="demo-keys")
    settings.RCB_GENERATION_SECRET = ""
    with pytest.raises(RunRefused, match="RCB_GENERATION_SECRET"):
        evaluation_run_create(user=user, release=release, model_name="M", base_url="http://127.0.0.1:9/v1",
                              model="m", api_key=KEY)
    run = evaluation_run_create(user=user, release=release, model_name="M", base_url="http://127.0.0.1:9/v1",
                                model="m")  # no key: no secret needed
    assert not run.has_key
    settings.RCB_GENERATION_SECRET = SECRET
    run = evaluation_run_create(user=user, release=release, model_name="M2", base_url="http://127.0.0.1:9/v1",
                                model="m", api_key=KEY)
    stored = bytes(EvaluationRun.objects.get(pk=run.pk).api_key_encrypted)
    assert stored and KEY.encode() not in stored
    assert Fernet(SECRET.encode()).decrypt(stored).decode() == KEY
    # the job carries ids only; the API answer says nothing of the key
    job = Job.objects.get(run=run, kind=JobKind.GENERATION)
    assert job.queue == "generation"
    client = Client(HTTP_AUTHORIZATION=f"Token {_token(user)}")
    assert KEY not in client.get(f"/api/v1/runs/{run.pk}").content.decode()
    # cancelled: the key is gone, and the run is not charged to the quota
    client.post(f"/api/v1/runs/{run.pk}/cancel")
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and not run.has_key
    job.refresh_from_db()
    assert job.status == "cancelled"


@pytest.mark.django_db
def test_caps_concurrency_and_quota(settings, user):
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.RCB_GENERATION_SECRET = SECRET
    release = demo_release_create(slug="demo-caps")
    args = dict(user=user, release=release, model_name="M", base_url="http://127.0.0.1:9/v1", model="m")
    settings.RCB_RUN_MAX_REQUESTS = 60
    with pytest.raises(RunRefused, match=r"x 2 samples = \d+ requests, more than this site's cap of 60"):
        evaluation_run_create(**args, samples=2)
    with pytest.raises(RunRefused, match="may cost up to"):
        evaluation_run_create(**args, max_tokens=1000, price_out=100.0, max_cost_usd=1.0)
    settings.RCB_RUN_MAX_TOKENS = 1000
    with pytest.raises(RunRefused, match="output tokens at most"):
        evaluation_run_create(**args, max_tokens=100)
    settings.RCB_RUN_MAX_TOKENS = 10**9
    settings.RCB_RUNS_ACTIVE_PER_USER = 1
    evaluation_run_create(**args)
    with pytest.raises(RunRefused, match="at most 1 at a time") as refused:
        evaluation_run_create(**args)
    assert refused.value.http_status == 429
    settings.RCB_RUNS_ACTIVE_PER_USER = 5
    settings.RCB_SUBMISSIONS_PER_DAY = 2
    evaluation_run_create(**args)  # two runs: the day's quota
    with pytest.raises(QuotaExceeded, match="daily quota"):
        evaluation_run_create(**args)


# --------------------------------------------------------------------------- held-out releases


@pytest.mark.django_db
def test_upload_to_held_out_release_refused(user):
    release = demo_release_create(slug="demo-held")
    call_command("release_visibility", "demo-held", "--held-out", "--force", stdout=io.StringIO())
    release.refresh_from_db()
    assert release.held_out
    client = Client(HTTP_AUTHORIZATION=f"Token {_token(user)}")
    answer = client.post("/api/v1/submissions?release=demo-held&model_name=X", predictions_bytes("demo-perfect"),
                         content_type="application/x-ndjson")
    assert answer.status_code == 403, answer.content
    assert "held out" in answer.json()["error"] and "run here" in answer.json()["error"]
    assert not PredictionSubmission.objects.exists()


# --------------------------------------------------------------------------- the drill


def _database_dump() -> str:
    """Every row of every table, as text (bytes as they are stored)."""
    from django.db import connection

    out = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            rows = cursor.fetchall()
            out.extend(repr(row) for row in rows)
            out.extend(bytes(v).decode("latin-1") for row in rows for v in row if isinstance(v, (bytes, memoryview)))
    return "\n".join(out)


def django_user_model_create_admin():
    from django.contrib.auth.models import User

    return User.objects.create_superuser("root", "root@example.org", "pw-root-1")


def _held_out_served_to_staff_only(release, owner_view: Client, evaluation_id: int) -> None:
    """Tasks, a snippet's reference and masked file, the paper's code: 404 (absent) to all but staff;
    the owner of an evaluation sees its completions and test output on the snippet's page, without them."""
    from django.contrib.auth.models import User

    from catalog.models import Snippet

    snippet = Snippet.objects.filter(release=release).select_related("paper").first()
    paper = snippet.paper.paper_id
    other, staff = Client(), Client()
    other.force_login(User.objects.create_user("other", password="pw-other-1"))
    staff.force_login(User.objects.create_user("staff", password="pw-staff-1", is_staff=True))
    tasks = f"/releases/{release.slug}/tasks.jsonl"
    snippet_page = f"/papers/{paper}/snippet/?release={release.slug}&name={snippet.name}&file={snippet.file}"
    paper_page = f"/papers/{paper}/?release={release.slug}"
    for viewer in (Client(), other, owner_view):
        assert viewer.get(tasks).status_code == 404
        assert viewer.get(snippet_page).status_code == 404
        page = viewer.get(paper_page)
        assert page.status_code == 200 and b"Reference code" not in page.content and b"held out" in page.content
    own = f"{snippet_page}&evaluation={evaluation_id}"
    page = owner_view.get(own)
    assert page.status_code == 200 and b'id="held-out-note"' in page.content
    assert b"Masked file" not in page.content and b"Reference code" not in page.content
    assert b"Test output" in page.content and b"against the reference" not in page.content
    assert Client().get(own).status_code == 404 and other.get(own).status_code == 404
    assert Client().get("/api/v1/releases").json()["releases"][0]["held_out"] is True
    assert staff.get(tasks).status_code == 200
    assert staff.get(snippet_page).status_code == 200
    assert b"Reference code" in staff.get(paper_page).content


def _redis_dump(url: str) -> bytes:
    import redis

    client = redis.Redis.from_url(url)
    out = io.BytesIO()
    for key in client.scan_iter(count=1000):
        out.write(key)
        kind = client.type(key).decode()
        if kind == "string":
            out.write(client.get(key) or b"")
        elif kind == "hash":
            for k, v in client.hgetall(key).items():
                out.write(k + v)
        elif kind == "list":
            out.write(b"".join(client.lrange(key, 0, -1)))
        elif kind == "set":
            out.write(b"".join(client.smembers(key)))
        elif kind == "zset":
            out.write(b"".join(m for m, _ in client.zrange(key, 0, -1, withscores=True)))
        elif kind == "stream":
            for _, fields in client.xrange(key):
                out.write(b"".join(k + v for k, v in fields.items()))
    return out.getvalue()


@pytest.mark.parametrize("held_out", [False, True], ids=["public", "held-out"])
@WORKER_DRILL_MARKS[0]
@WORKER_DRILL_MARKS[1]
@WORKER_DRILL_MARKS[2]
@WORKER_DRILL_MARKS[3]
def test_run_here_drill(settings, tmp_path, user, held_out):
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900}
                          for n in ("default", "scoring", "contributions", "generation")}
    settings.RCB_GENERATION_SECRET = SECRET
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    release = demo_release_create(slug="demo-run")
    if held_out:
        call_command("release_visibility", "demo-run", "--held-out", "--force", stdout=io.StringIO())
    pset = load_problemset(DEMO)
    keys = {build_prompt(p, s, with_paper=True): (p.id, s.file, s.name) for p, s in pset.snippets}
    # every 7th request a 429, every 11th a 500: retried with back-off (as the CLI does)
    server = ChatServer(answers=reference_answers(pset), delay=0.5, retry_after="0",
                        decide=lambda n: "429" if n % 7 == 3 else "500" if n % 11 == 5 else None).start()
    logs = tmp_path / "logs"
    logs.mkdir()
    gen_dir = tmp_path / "generation"
    env = worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5", RCB_GENERATION_SECRET=SECRET,
                     RCB_GENERATION_ALLOWED_HOSTS="127.0.0.1", RCB_GENERATION_DIR=str(gen_dir),
                     RCB_GENERATION_CONCURRENCY="2", DJANGO_LOG_LEVEL="DEBUG")
    settings.RCB_GENERATION_DIR = gen_dir
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "wb")
        proc = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        return proc

    def worker(name: str) -> subprocess.Popen:
        return start(name, "rqworker", "generation", "scoring", "--name", f"{name}-{os.getpid()}")

    def logs_text() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log")))

    def wait(predicate, *, timeout: float, what: str) -> None:
        try:
            wait_for(predicate, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs_text()}") from None

    try:
        first = worker("w1")
        client = Client(HTTP_AUTHORIZATION=f"Token {_token(user)}")
        body = {"release": "demo-run", "model_name": "Reference via endpoint", "base_url": server.base_url,
                "model": "ref-model", "api_key": KEY, "temperature": 0, "max_tokens": 2000, "seed": 7,
                "price_in": 1.0, "price_out": 2.0}
        answer = client.post("/api/v1/runs", json.dumps(body), content_type="application/json")
        assert answer.status_code == 201, answer.content
        run_id = answer.json()["id"]
        assert answer.json()["status"] == "queued"

        def run() -> EvaluationRun:
            return EvaluationRun.objects.get(pk=run_id)

        wait(lambda: run().answers >= 12, timeout=120, what="a dozen answers")
        # the work horse (in a process group of its own; its pid is in the job row) and the worker: no goodbye
        horse = int(Job.objects.get(run_id=run_id).worker.rsplit(":", 1)[1])
        os.killpg(horse, signal.SIGKILL)
        process_group_kill(first)
        output = gen_dir / f"run-{run_id}" / "predictions.jsonl"
        stored = {(r["paper"], r["file"], r["snippet"]) for r in
                  (json.loads(line) for line in output.read_text().splitlines() if line.strip())}
        assert 12 <= len(stored) < len(keys)
        wait_for(lambda: server.in_flight == 0, timeout=10, what="the requests in flight to end")
        mark = len(server.given)
        worker("w2")
        start("watchdog", "reconcile", "--every", "1", "--stale-after", "3")

        def ended() -> bool:
            return json.loads(client.get(f"/api/v1/runs/{run_id}").content)["status"] in ("finished", "failed",
                                                                                            "cancelled")

        wait(ended, timeout=600, what="the run to end")
        payload = client.get(f"/api/v1/runs/{run_id}").json()
        assert payload["status"] == "finished", (payload, logs_text())
        assert payload["result"]["scaled_pass_rate"] == pytest.approx(100.0)
        assert payload["result"]["run_here"] is True
        assert payload["progress"]["answers"] == payload["progress"]["expected"] == len(keys)
        assert payload["progress"]["tokens_in"] > 0 and payload["progress"]["cost_usd"] > 0
        # the failures happened and were retried; the key went to the endpoint, and only there
        assert server.failures.get("429") and server.failures.get("500")
        assert f"Bearer {KEY}" in server.auth_seen
        # no request, after the kill, for an answer the first worker had stored
        again = [keys[g["prompt"]] for g in server.given[mark:] if keys[g["prompt"]] in stored]
        assert not again, again
        assert {keys[g["prompt"]] for g in server.given} == set(keys.values())
        job = Job.objects.get(run_id=run_id)
        assert job.attempt >= 2 and any("stopped answering" in e["event"] for e in job.history)
        evaluation = Evaluation.objects.get(submission__run__pk=run_id)
        assert evaluation.run_here and evaluation.run_card["model"] == "ref-model"
        assert evaluation.run_card["endpoint_host"].startswith("127.0.0.1:")

        # the leaderboard can show run-here results only; the API rows say it
        owner_view = Client()
        owner_view.force_login(user)
        sub_id = payload["submission"]
        assert owner_view.post(f"/submissions/{sub_id}/publish/").status_code == 302
        rows = client.get("/api/v1/leaderboard?release=demo-run&run_here=1").json()["rows"]
        assert [r["run_here"] for r in rows] == [True]
        assert "run here" in Client().get("/leaderboard/?release=demo-run&run_here=1").content.decode()
        assert rows[0]["ranked"] is True  # (on a held-out release too: what the Hub ran itself is ranked)
        # the model's page and API say which of its results were run here
        model_page = Client().get(f"/models/{evaluation.model.key}/?release=demo-run").content.decode()
        assert "run here" in model_page
        model_api = Client().get(f"/api/v1/models/{evaluation.model.key}?release=demo-run").json()
        assert [e["run_here"] for e in model_api["evaluations"]] == [True]
        if held_out:
            _held_out_served_to_staff_only(release, owner_view, evaluation.pk)

        # the key, nowhere: database, Redis, logs, pages, API answers, run card, results
        assert KEY not in _database_dump()
        assert not run().has_key
        assert KEY.encode() not in _redis_dump(redis.url)
        for path in [*logs.glob("*.log"), *(ROOT / "var").rglob("*.log")]:
            assert KEY not in path.read_text(errors="replace"), path
        texts = [
            owner_view.get(f"/runs/{run_id}/").content.decode(),
            owner_view.get(f"/submissions/{sub_id}/").content.decode(),
            owner_view.get("/submissions/").content.decode(),
            client.get(f"/api/v1/runs/{run_id}").content.decode(),
            client.get(f"/api/v1/submissions/{sub_id}?results=1").content.decode(),
            b"".join(client.get(f"/api/v1/evaluations/{evaluation.pk}/outputs.jsonl").streaming_content).decode(),
            json.dumps(run().run_card), json.dumps(evaluation.run_card),
        ]
        for text in texts:
            assert KEY not in text
        assert "run here" in texts[0] and "run here" in texts[1]
        admin = Client()
        admin.force_login(django_user_model_create_admin())
        for path in (f"/admin/submissions/evaluationrun/{run_id}/change/", "/admin/submissions/evaluationrun/",
                     f"/admin/scoring/job/{job.pk}/change/"):
            page = admin.get(path)
            assert page.status_code == 200 and KEY not in page.content.decode()
        assert not (gen_dir / f"run-{run_id}").exists()  # the working file went with the hand-over
    finally:
        for proc in procs:
            session_kill(proc)
        server.stop()
        redis.stop()




@pytest.mark.django_db(transaction=True)
def test_cli_run_here_starts_a_run_and_reports_a_refusal(settings, live_server, user, monkeypatch):
    from benchmark_core.cli import main

    settings.RCB_GENERATION_SECRET = SECRET
    settings.RCB_GENERATION_ALLOWED_HOSTS = []
    demo_release_create(slug="demo-cli")
    token = _token(user)
    monkeypatch.setenv("MY_KEY", KEY)
    args = ["run-here", "--url", live_server.url, "--token", token, "--model-name", "CLI model",
            "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "MY_KEY", "--release", "demo-cli",
            "--no-wait"]
    out, err = io.StringIO(), io.StringIO()
    assert main(args, out, err) == 1
    assert "127.0.0.1" in err.getvalue() and "RCB_GENERATION_ALLOWED_HOSTS" in err.getvalue()
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    out, err = io.StringIO(), io.StringIO()
    assert main(args, out, err) == 0, err.getvalue()
    run = EvaluationRun.objects.get()
    assert out.getvalue().startswith(f"run {run.pk} queued") and run.has_key and run.model_name == "CLI model"
    assert KEY not in out.getvalue() + err.getvalue()


@pytest.mark.django_db
def test_staff_page_holds_a_draft_out_and_makes_it_public(django_user_model):
    from catalog.models import Release

    staff = Client()
    staff.force_login(django_user_model.objects.create_user("boss", password="pw-boss-1", is_staff=True))
    draft = Release.objects.create(name="Next", slug="next", status=Release.DRAFT)
    assert b'id="hold-out"' in staff.get("/contribute/releases/next/").content
    staff.post("/contribute/releases/next/", {"action": "held-out"})
    draft.refresh_from_db()
    assert draft.held_out
    page = staff.get("/contribute/releases/next/").content.decode()
    assert "Held out" in page and 'id="make-public"' in page
    staff.post("/contribute/releases/next/", {"action": "public"})
    draft.refresh_from_db()
    assert not draft.held_out
    # a published release is not held out from the page (what was served cannot be taken back)
    published = demo_release_create(slug="demo-open")
    staff.post("/contribute/releases/demo-open/", {"action": "held-out"})
    published.refresh_from_db()
    assert not published.held_out


def test_a_redirect_is_not_followed_when_the_site_calls_an_endpoint(tmp_path):
    """A public endpoint answering 307 towards another address (the site's own network) is not followed."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from benchmark_core.generate import GenerateOptions, GenTask, generate

    inner = ChatServer(answers={}).start()

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", f"{inner.base_url}/chat/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()

    outer = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=outer.serve_forever, daemon=True).start()
    try:
        options = GenerateOptions(base_url=f"http://127.0.0.1:{outer.server_address[1]}/v1", model="m",
                                  max_retries=0, follow_redirects=False)
        outcome = generate(tasks=[GenTask("p", "f.py", "s", "prompt")], options=options,
                           output=tmp_path / "out.jsonl", source={"kind": "test"})
        assert outcome.written == 0 and outcome.failed and "307" in outcome.failed[0]["error"]
        assert inner.received == 0
    finally:
        outer.shutdown()
        inner.stop()


@pytest.mark.django_db
def test_a_run_given_up_by_the_watchdog_fails_and_forgets_its_key(settings, user):
    import datetime as dt

    from django.utils import timezone

    from scoring.jobs import jobs_watchdog
    from submissions.runs import runs_settle

    settings.RCB_GENERATION_SECRET = SECRET
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.RCB_JOB_MAX_ATTEMPTS = 1
    release = demo_release_create(slug="demo-given-up")
    run = evaluation_run_create(user=user, release=release, model_name="M", base_url="http://127.0.0.1:9/v1",
                                model="m", api_key=KEY)
    Job.objects.filter(run=run).update(status="running", heartbeat_at=timezone.now() - dt.timedelta(minutes=5))
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.GENERATING)
    assert jobs_watchdog(stale_after=60)["failed"] == [Job.objects.get(run=run).pk]
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "stopped answering" in run.error and not run.has_key
    # an ended run holding a key (a crash between its end and the key's removal): the sweep empties it
    EvaluationRun.objects.filter(pk=run.pk).update(api_key_encrypted=b"leftover")
    runs_settle()
    run.refresh_from_db()
    assert not run.has_key


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_echoing_the_key_in_its_refusal_leaves_it_in_no_error(settings, user, tmp_path, caplog):
    """A 401 whose message holds the key: the run fails saying why, with the key blanked everywhere."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from submissions.runs import generation_job_run

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"error": {"message": f"Incorrect API key provided: {self.headers['Authorization']}",
                                         "type": "invalid_request_error"}}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.RCB_GENERATION_SECRET = SECRET
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.RCB_GENERATION_DIR = tmp_path
    settings.RCB_HEARTBEAT_SECONDS = 0.5
    try:
        release = demo_release_create(slug="demo-echo")
        run = evaluation_run_create(user=user, release=release, model_name="M", model="m", api_key=KEY,
                                    base_url=f"http://127.0.0.1:{server.server_address[1]}/v1")
        job = Job.objects.get(run=run)
        with pytest.raises(RunRefused) as refused:
            generation_job_run(job_id=job.pk, rq_job_id=job.rq_job_id)
        assert KEY not in str(refused.value) and "[api key]" in str(refused.value)
    finally:
        server.shutdown()
    run.refresh_from_db()
    job.refresh_from_db()
    assert run.status == RunStatus.FAILED and "HTTP 401" in run.error and "[api key]" in run.error
    assert not run.has_key and job.status == "failed"
    assert not any(tmp_path.iterdir())  # the working files (the engine's card names the refusal) went with the run
    for text in (run.error, job.error, json.dumps(job.history), json.dumps(run.run_card), caplog.text,
                 _database_dump()):
        assert KEY not in text
