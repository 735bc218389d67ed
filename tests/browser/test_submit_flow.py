"""Must-show, in a real browser: a new user signs up, creates a token, submits the demo predictions
with the CLI, watches the progress page reach 100 %, publishes, and finds the model on the leaderboard.

Scoring is done by two real `manage.py rqworker scoring` processes (bwrap sandbox) on a
redis-server of the test's own; the page updates itself through static/submissions/progress.js.
"""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from submissions_support import (  # noqa: E402
    PREDICTIONS,
    RedisServer,
    demo_release_create,
    process_group_kill,
    worker_env,
    worker_start,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("redis-server") is None,
                       reason="needs bubblewrap and redis-server"),
]

SHOTS = ROOT / "test-artifacts" / "screenshots"


@pytest.fixture
def stack(settings, tmp_path):
    from django.core.cache import cache

    cache.clear()
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
    release = demo_release_create(slug="demo-browser")
    env = worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap", RCB_RUN_TIMEOUT="5")
    procs = [worker_start(env, name=f"w{i}", log_dir=tmp_path) for i in (1, 2)]
    try:
        yield release
    finally:
        for proc in procs:
            process_group_kill(proc, signal.SIGKILL)
        redis.stop()


def test_sign_up_token_cli_submit_progress_publish_leaderboard(stack, browser, live_server, tmp_path):
    release = stack
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # sign up
    page.goto(f"{live_server.url}/accounts/signup/")
    page.fill("#id_username", "newcomer")
    page.fill("#id_email", "newcomer@example.org")
    page.fill("#id_password1", "a-long-Passphrase-42")
    page.fill("#id_password2", "a-long-Passphrase-42")
    page.click("main button[type=submit]")
    page.wait_for_url("**/accounts/profile/")

    # create a token
    page.fill("#id_name", "laptop")
    page.click("#create-token")
    token = page.inner_text("#new-token").strip()
    assert token.startswith("rcb_")
    page.screenshot(path=str(SHOTS / "submit-01-token.png"))

    # submit with the CLI, which follows the scoring to its end
    cli = subprocess.Popen(
        [sys.executable, "-m", "benchmark_core", "submit", "--url", live_server.url, "--token", token,
         "--model-name", "Newcomer-LM", "--organisation", "Newcomer Labs", "--knowledge-cutoff", "2024-06",
         "--wait", "--poll", "1", "--timeout", "400", str(PREDICTIONS / "demo-imperfect.jsonl")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    first_lines = [cli.stdout.readline() for _ in range(3)]
    assert re.match(r"submission \d+ queued", first_lines[0]), first_lines
    page_url = first_lines[2].split("page: ", 1)[1].strip()

    # the progress page updates itself (JavaScript polling the API) up to 100 %, then shows the result
    page.goto(page_url)
    page.wait_for_selector("#progress-bar")
    page.screenshot(path=str(SHOTS / "submit-02-progress.png"))
    page.wait_for_selector("#publish", timeout=400_000)
    assert "50 / 50 snippets (100.0 %)" in page.inner_text("#progress-text")
    assert page.inner_text("#scaled-pass-rate").strip() == "83.72 %"
    page.screenshot(path=str(SHOTS / "submit-03-finished.png"), full_page=True)

    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, (out, err)
    assert "finished: scaled pass rate 83.72 %, pass rate 72.00 %" in out
    assert "50/50 snippets (100.0 %) finished" in out

    # private until published
    page.goto(f"{live_server.url}/leaderboard/?release={release.slug}")
    assert "Newcomer-LM" not in page.content()
    page.goto(page_url)
    page.click("#publish")
    page.wait_for_selector("#unpublish")
    page.goto(f"{live_server.url}/leaderboard/?release={release.slug}")
    assert page.get_by_text("Newcomer-LM").first.is_visible()
    page.screenshot(path=str(SHOTS / "submit-04-leaderboard.png"), full_page=True)
    assert not errors, errors
    context.close()
