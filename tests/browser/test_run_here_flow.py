"""Must-show (issue 23), in a real browser: a signed-in user starts an evaluation run here from the
site's form, watches its progress, cancels it (nothing more is asked of the endpoint), starts another
and finds its result with the "run here" badge, on its page and on the leaderboard once published.

Real parts: a `manage.py rqworker generation scoring` process (bwrap sandboxes) on a redis-server
of the test's own, the OpenAI-compatible test server of tests/engine/chat_server.py on 127.0.0.1
answering every demo prompt with the reference code, Debian's chromium through Playwright.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from engine.chat_server import ChatServer, reference_answers  # noqa: E402
from submissions_support import (  # noqa: E402
    DEMO,
    RedisServer,
    demo_release_create,
    process_group_kill,
    wait_for,
    worker_env,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("redis-server") is None,
                       reason="needs bubblewrap and redis-server"),
]

SHOTS = ROOT / "test-artifacts" / "screenshots"
SECRET = Fernet.generate_key().decode()
KEY = "sk-browser-RUNHERE-9876543210"


@pytest.fixture
def stack(settings, tmp_path):
    import subprocess

    from benchmark_core.problemset import load_problemset
    from django.core.cache import cache

    cache.clear()
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900}
                          for n in ("default", "scoring", "contributions", "generation")}
    settings.RCB_GENERATION_SECRET = SECRET
    settings.RCB_GENERATION_ALLOWED_HOSTS = ["127.0.0.1"]
    release = demo_release_create(slug="demo-run-browser")
    server = ChatServer(answers=reference_answers(load_problemset(DEMO)), delay=1.0).start()
    env = worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5", RCB_GENERATION_SECRET=SECRET,
                     RCB_GENERATION_ALLOWED_HOSTS="127.0.0.1", RCB_GENERATION_DIR=str(tmp_path / "generation"),
                     RCB_GENERATION_CONCURRENCY="2")
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "generation", "scoring", "--name",
                               f"browser-{os.getpid()}"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        yield release, server, tmp_path / "worker.log"
    finally:
        process_group_kill(worker, signal.SIGKILL)
        server.stop()
        redis.stop()


def _start(page, url: str, *, server: ChatServer, name: str) -> str:
    page.goto(f"{url}/runs/new/")
    page.fill("#id_model_name", name)
    page.fill("#id_base_url", server.base_url)
    page.fill("#id_model", "ref-model")
    page.fill("#id_api_key", KEY)
    page.fill("#id_max_tokens", "2000")
    page.fill("#id_price_in", "1")
    page.fill("#id_price_out", "2")
    page.click("#run-start")
    page.wait_for_url("**/runs/*/")
    assert KEY not in page.content()
    return page.url


def _goto(page, url: str) -> None:
    """Open `url` on a page that may be refreshing itself (the run page's meta refresh, every 2 s): a
    refresh that fires at the same moment interrupts Playwright's navigation, which is not a failure.
    When the navigation that interrupted it goes to `url` itself (the refresh of that page: on a
    loaded machine a load can take longer than the refresh's 2 s, every time), that one is waited
    for; an interruption towards another page is retried."""
    for attempt in range(5):
        try:
            page.goto(url)
            return
        except Exception as exc:  # playwright's Error; only an interrupted navigation is retried
            if "interrupted by another navigation" not in str(exc) or attempt == 4:
                raise
            page.wait_for_load_state()
            if f'another navigation to "{url}"' in str(exc) and page.url == url:
                return


def test_start_progress_cancel_then_result_with_badge(stack, browser, live_server, django_user_model):
    release, server, worker_log = stack
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        _flow(page, release, server, worker_log, live_server, django_user_model)
    except Exception as exc:  # what the page and the worker said, for a failure seen once in a loaded run
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "run-here-failure.png"), full_page=True)
        raise AssertionError(f"{exc}\n--- page {page.url}\n{page.inner_text('body')[:2000]}\n--- worker\n"
                             f"{worker_log.read_text(errors='replace')[-3000:]}") from exc
    finally:
        context.close()


def _flow(page, release, server, worker_log, live_server, django_user_model) -> None:
    from submissions.models import EvaluationRun

    django_user_model.objects.create_user("evaluator", email="e@example.org", password="a-long-Passphrase-42")
    SHOTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "evaluator")
    page.fill("#id_password", "a-long-Passphrase-42")
    page.click("main form button[type=submit]")  # (the header has a search form of its own)
    page.wait_for_url("**/accounts/profile/")

    # start a run from the form; its page shows the answers coming in (it refreshes itself)
    run_url = _start(page, live_server.url, server=server, name="Slow endpoint")
    wait_for(lambda: EvaluationRun.objects.get().answers >= 3, timeout=120, what="some answers")
    _goto(page, run_url)
    assert page.inner_text("#run-status") == "generating"
    assert "answers" in page.inner_text("#run-answers") and "tokens in" in page.inner_text("#run-tokens")
    page.screenshot(path=str(SHOTS / "run-here-01-progress.png"), full_page=True)

    # cancel: the page says so, and the endpoint is asked nothing more (after the requests in flight)
    page.click("#run-cancel")
    page.wait_for_selector("#run-status:text('cancelled')")
    assert not page.query_selector("#run-cancel")
    run = EvaluationRun.objects.get()
    assert run.status == "cancelled" and not run.has_key
    time.sleep(3)  # a heartbeat (0.5 s) and the requests in flight (1 s each)
    received = server.received
    time.sleep(3)
    assert server.received == received, "requests were sent after the cancel"
    assert server.received < run.expected
    page.screenshot(path=str(SHOTS / "run-here-02-cancelled.png"), full_page=True)

    # a second run (a fast endpoint now) goes through generation and scoring to its result, with the badge
    server.delay = 0.0
    run_url = _start(page, live_server.url, server=server, name="Reference via endpoint")
    page.wait_for_selector("#run-here-badge", timeout=400_000)
    assert page.inner_text("#run-status") == "finished", worker_log.read_text(errors="replace")[-3000:]
    assert page.inner_text("#run-scaled-pass-rate").strip() == "100.00 %"
    assert "50 / 50 answers" in page.inner_text("#run-answers")
    assert page.inner_text("#run-here-badge").strip() == "run here"
    page.screenshot(path=str(SHOTS / "run-here-03-finished.png"), full_page=True)

    # published from its submission's page, it is on the leaderboard with the badge (and the filter keeps it)
    page.click("#run-submission")
    assert page.inner_text("#run-here-badge").strip() == "run here"
    page.click("#publish")
    page.wait_for_selector("#unpublish")
    page.goto(f"{live_server.url}/leaderboard/?release={release.slug}&run_here=1")
    row = page.locator("tr", has_text="Reference via endpoint").first
    assert row.is_visible() and "run here" in row.inner_text()
    page.screenshot(path=str(SHOTS / "run-here-04-leaderboard.png"), full_page=True)
    for path in ("/submissions/", run_url):
        _goto(page, path if path.startswith("http") else f"{live_server.url}{path}")
        assert KEY not in page.content()
    assert KEY not in worker_log.read_text(errors="replace")
    assert not errors, errors
