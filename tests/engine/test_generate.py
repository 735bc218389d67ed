"""`generate` against a real chat-completions server on 127.0.0.1 that fails on purpose."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark_core.generate import GenerateError, GenerateOptions, card_path, generate, tasks_from_problemset
from benchmark_core.problemset import load_problemset

from .chat_server import ChatServer, reference_answers

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"


@pytest.fixture(scope="module")
def demo():
    return load_problemset(DEMO)


@pytest.fixture(scope="module")
def answers(demo):
    return reference_answers(demo)


@pytest.fixture
def server(answers):
    servers = []

    def start(**kwargs) -> ChatServer:
        s = ChatServer(answers=answers, **kwargs).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def cli(*args: str, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmark_core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def keys(rows: list[dict]) -> list[tuple]:
    return [(r["paper"], r["file"], r["snippet"], r["sample"]) for r in rows]


def every_seventh(number: int) -> str | None:
    """Requests 7, 14, 21, ... fail: 429 (with Retry-After), then 500, alternately."""
    if number % 7:
        return None
    return "429" if (number // 7) % 2 else "500"


def options(server: ChatServer, **kw) -> GenerateOptions:
    return GenerateOptions(base_url=server.base_url, model="oracle", backoff_base=0.05, backoff_cap=0.2, **kw)


def test_must_show_oracle_with_failures_scores_100_and_a_rerun_sends_nothing(server, tmp_path):
    srv = server(decide=every_seventh)
    out = tmp_path / "p.jsonl"
    done = cli("generate", "demo", "--base-url", srv.base_url, "--model", "oracle", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = lines(out)
    assert len(rows) == 50 and len(set(keys(rows))) == 50
    assert srv.failures.get("429", 0) >= 3 and srv.failures.get("500", 0) >= 3  # the failures did happen
    assert all(r["finish_reason"] == "stop" and r["usage"]["prompt_tokens"] > 0 for r in rows)

    card = json.loads(card_path(out).read_text())
    assert card["counts"]["answers"] == 50 and card["complete"] is True
    assert card["requests"] == len(srv.given) == 50
    assert card["tokens"] == {"input": sum(g["usage"]["prompt_tokens"] for g in srv.given),
                              "output": sum(g["usage"]["completion_tokens"] for g in srv.given)}
    assert card["errors"] == {"http_500": srv.failures["500"], "rate_limited": srv.failures["429"]}
    assert card["model"] == "oracle" and card["endpoint_host"].startswith("127.0.0.1:")
    assert card["source"]["kind"] == "problem_set" and len(card["source"]["hash"]) == 64
    assert card["prompt_version"] and card["with_paper"] is True

    scored = cli("score", "demo", str(out), "--backend", "local", "-o", str(tmp_path / "r.json"), "--quiet")
    assert scored.returncode == 0, scored.stderr
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert summary["scaled_pass_rate"] == 100.0 and summary["passed"] == 50

    received = srv.received
    again = cli("generate", "demo", "--base-url", srv.base_url, "--model", "oracle", "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert srv.received == received  # no request at all
    assert lines(out) == rows
    assert json.loads(card_path(out).read_text()) == card


def test_sigkill_mid_run_then_resume_loses_nothing_and_duplicates_nothing(server, tmp_path):
    srv = server(delay=0.25)
    out = tmp_path / "p.jsonl"
    args = [sys.executable, "-m", "benchmark_core", "generate", "demo", "--base-url", srv.base_url,
            "--model", "oracle", "--concurrency", "3", "-o", str(out), "--quiet"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 12):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    while srv.in_flight:  # the server finishes the answers nobody reads any more
        time.sleep(0.05)
    before = out.read_bytes()
    first = lines(out)
    assert 12 <= len(first) < 50
    answered_then = len(srv.given)
    assert answered_then - len(first) <= 3  # only the requests in flight were lost

    done = cli("generate", "demo", "--base-url", srv.base_url, "--model", "oracle", "--concurrency", "3", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = lines(out)
    assert out.read_bytes().startswith(before)  # what was there stays, byte for byte
    assert len(rows) == 50 and len(set(keys(rows))) == 50
    assert len(srv.given) - answered_then == 50 - len(first)  # the second run asked only for what was missing
    card = json.loads(card_path(out).read_text())
    assert card["counts"]["answers"] == 50 and card["complete"]


def test_concurrency_is_bounded(server, tmp_path, demo):
    srv = server(delay=0.15)
    tasks = tasks_from_problemset(demo, with_paper=True)[:15]
    outcome = generate(tasks=tasks, options=options(srv, concurrency=3), output=tmp_path / "p.jsonl", source={})
    assert outcome.written == 15
    assert srv.max_in_flight == 3


def test_card_counts_and_tokens_match_the_requests_with_drops_and_slow_answers(server, tmp_path, demo):
    def decide(number: int) -> str | None:
        return "drop" if number % 5 == 0 else "slow" if number % 11 == 0 else None

    srv = server(decide=decide, slow_seconds=2.0)
    tasks = tasks_from_problemset(demo, with_paper=False)[:20]
    out = tmp_path / "p.jsonl"
    outcome = generate(tasks=tasks, options=options(srv, concurrency=4, timeout=0.8, samples=2, with_paper=False,
                                                   price_in=2.0, price_out=8.0),
                       output=out, source={"kind": "test", "hash": "x"})
    assert not outcome.failed and outcome.fatal is None
    rows = lines(out)
    assert sorted(keys(rows)) == sorted((t.paper, t.file, t.snippet, s) for t in tasks for s in (0, 1))
    # the server understood n=2: one request per snippet
    assert len(srv.given) == 20 and all(g["n"] == 2 for g in srv.given)
    card = outcome.card
    assert card["requests"] == 20 and card["counts"]["answers"] == 40 and card["samples"] == 2
    tin = sum(g["usage"]["prompt_tokens"] for g in srv.given)
    tout = sum(g["usage"]["completion_tokens"] for g in srv.given)
    assert card["tokens"] == {"input": tin, "output": tout}
    assert card["cost_usd"] == pytest.approx(tin * 2 / 1e6 + tout * 8 / 1e6)
    assert card["errors"]["connection"] == srv.failures["drop"] >= 1
    assert card["errors"]["timeout"] == srv.failures["slow"] >= 1
    assert card["with_paper"] is False
    assert "EMPTY" not in card_path(out).read_text()


def test_samples_without_n_support_are_separate_requests(server, tmp_path, demo):
    srv = server(support_n=False)
    tasks = tasks_from_problemset(demo, with_paper=True)[:4]
    out = tmp_path / "p.jsonl"
    outcome = generate(tasks=tasks, options=options(srv, samples=3), output=out, source={})
    rows = lines(out)
    assert sorted(keys(rows)) == sorted((t.paper, t.file, t.snippet, s) for t in tasks for s in range(3))
    assert outcome.card["requests"] == len(srv.given) == 12


def test_401_stops_with_the_servers_message_and_exit_1(server, tmp_path):
    srv = server(decide=lambda n: "401")
    out = tmp_path / "p.jsonl"
    done = cli("generate", "demo", "--base-url", srv.base_url, "--model", "oracle", "--api-key-env", "RCB_TEST_KEY",
               "-o", str(out), env={"RCB_TEST_KEY": "sk-test-secret-123"})
    assert done.returncode == 1
    assert "Incorrect API key provided" in done.stderr and "401" in done.stderr
    assert srv.received <= 4  # stopped at once, not retried
    assert srv.auth_seen[0] == "Bearer sk-test-secret-123"
    assert not lines(out) if out.exists() else True
    assert "sk-test-secret-123" not in card_path(out).read_text()


def test_404_wrong_route_or_unknown_model_stops_with_exit_1(server, tmp_path):
    srv = server(models={"oracle"})
    done = cli("generate", "demo", "--base-url", srv.base_url.replace("/v1", "/nope/v1"), "--model", "oracle",
               "-o", str(tmp_path / "p.jsonl"))
    assert done.returncode == 1
    assert "404" in done.stderr and "no route /nope/v1/chat/completions" in done.stderr
    done = cli("generate", "demo", "--base-url", srv.base_url, "--model", "nosuch", "-o", str(tmp_path / "q.jsonl"))
    assert done.returncode == 1
    assert "The model `nosuch` does not exist" in done.stderr
    assert not srv.given


def test_other_settings_on_the_same_file_are_refused_and_nothing_is_sent(server, tmp_path, demo):
    srv = server()
    tasks = tasks_from_problemset(demo, with_paper=True)[:3]
    out = tmp_path / "p.jsonl"
    generate(tasks=tasks, options=options(srv), output=out, source={"hash": "a"})
    received = srv.received
    with pytest.raises(GenerateError, match="temperature"):
        generate(tasks=tasks + tasks_from_problemset(demo, with_paper=True)[3:5],
                 options=options(srv, temperature=0.7), output=out, source={"hash": "a"})
    assert srv.received == received and len(lines(out)) == 3


def test_a_line_cut_by_a_kill_is_asked_for_again(server, tmp_path, demo):
    srv = server()
    tasks = tasks_from_problemset(demo, with_paper=True)[:3]
    out = tmp_path / "p.jsonl"
    generate(tasks=tasks[:2], options=options(srv), output=out, source={})
    with out.open("ab") as fh:
        fh.write(b'{"paper": "rope", "snippet": "half a li')
    outcome = generate(tasks=tasks, options=options(srv), output=out, source={})
    rows = lines(out)
    assert outcome.written == 1 and len(rows) == 3 and len(set(keys(rows))) == 3


def test_a_bad_line_in_the_middle_stops_before_sending(server, tmp_path, demo):
    srv = server()
    out = tmp_path / "p.jsonl"
    out.write_text('not json\n{"paper": "rope", "snippet": "x", "completion": ""}\n')
    with pytest.raises(GenerateError, match=r"p.jsonl:1"):
        generate(tasks=tasks_from_problemset(demo, with_paper=True)[:2], options=options(srv), output=out, source={})
    assert srv.received == 0


def test_progress_line_shows_answers_rate_tokens_and_cost(server, tmp_path, demo):
    import io

    srv = server()
    stream = io.StringIO()
    tasks = tasks_from_problemset(demo, with_paper=True)[:3]
    generate(tasks=tasks, options=options(srv, price_in=1.0, price_out=2.0), output=tmp_path / "p.jsonl", source={},
             progress_stream=stream, progress=True)
    last = stream.getvalue().rstrip("\n").split("\r")[-1]
    assert "3/3 answers" in last and "/s" in last and " in / " in last and "$0.00" in last and "0 retries" in last


def test_ctrl_c_keeps_the_answers_and_says_how_to_go_on(server, tmp_path):
    srv = server(delay=0.3)
    out = tmp_path / "p.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "benchmark_core", "generate", "demo", "--base-url", srv.base_url,
                             "--model", "oracle", "--concurrency", "2", "-o", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 4):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "run the same command to go on" in stderr
    rows = lines(out)
    assert 4 <= len(rows) < 50 and len(set(keys(rows))) == len(rows)
    card = json.loads(card_path(out).read_text())
    assert card["counts"]["answers"] == len(rows) and card["complete"] is False


def test_an_endpoint_that_never_answers_stops_with_exit_1(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    done = cli("generate", "demo", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--max-retries", "2",
               "-o", str(tmp_path / "p.jsonl"))
    assert done.returncode == 1
    assert f"127.0.0.1:{port} gave no answer after 3 attempts" in done.stderr
    assert time.monotonic() - started < 60  # not 50 snippets times every retry


def test_a_second_generate_on_the_same_file_is_refused(server, tmp_path, demo):
    import fcntl

    srv = server()
    out = tmp_path / "p.jsonl"
    with out.open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # as a running generate holds it
        with pytest.raises(GenerateError, match="another generate is writing"):
            generate(tasks=tasks_from_problemset(demo, with_paper=True)[:2], options=options(srv), output=out,
                     source={})
    assert srv.received == 0


def test_a_ctrl_c_is_noted_even_where_the_http_clients_cancel_scope_takes_the_cancel():
    """asyncio turns Ctrl-C into KeyboardInterrupt only when the main task ends cancelled; a cancel
    that lands inside a request can be taken by the HTTP client's own cancel scope, and the
    generation then went on to the end and exited 0 (seen once, on a loaded machine). The Ctrl-C
    is noted before asyncio's handler runs, the workers stop taking requests, and the generation
    ends with KeyboardInterrupt (exit 130)."""
    import types

    from benchmark_core.generate import _sigint_noted

    seen = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        run = types.SimpleNamespace(interrupted=False)
        restore = _sigint_noted(run)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert run.interrupted and seen == [signal.SIGINT]  # noted, and asyncio's handler still ran
        restore()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert seen == [signal.SIGINT, signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, before)
