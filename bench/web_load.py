"""Drive the leaderboard API, the overall page and a trivial endpoint with wrk; print the ratio.

Run through bench/web_load (it installs wrk and the venv first). Each endpoint gets the same wrk
settings on the same server in the same run, so the ratio compares like with like.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_up(url: str, proc: subprocess.Popen | None, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        try:
            if fetch(url + "/api/v1/ping", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {seconds:.0f}s")


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else float("nan")


def run_wrk(url: str, *, duration: int, connections: int, threads: int) -> dict:
    """Run wrk on one URL; parse requests/s, latency percentiles and errors from its report."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "10s", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    result = {"url": url, "rps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"), "avg_ms": float("nan"),
              "errors": 0, "non_2xx": 0, "requests": 0}
    if m := re.search(r"Requests/sec:\s+([\d.]+)", out):
        result["rps"] = float(m.group(1))
    if m := re.search(r"Latency\s+([\d.]+\w+)", out):
        result["avg_ms"] = _ms(m.group(1))
    if m := re.search(r"50%\s+([\d.]+\w+)", out):
        result["p50_ms"] = _ms(m.group(1))
    if m := re.search(r"99%\s+([\d.]+\w+)", out):
        result["p99_ms"] = _ms(m.group(1))
    if m := re.search(r"(\d+) requests in", out):
        result["requests"] = int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        result["errors"] = sum(int(x) for x in m.groups())
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        result["non_2xx"] = int(m.group(1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server (default: start gunicorn here)")
    parser.add_argument("--release", default="synthetic", help="release slug to load (default: synthetic)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per endpoint (default 10)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2), help="gunicorn workers")
    parser.add_argument("--models", type=int, default=100, help="synthetic size when it must be generated")
    parser.add_argument("--snippets", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args(argv)
    if not shutil.which("wrk"):
        print("wrk is not installed (Debian package wrk)", file=sys.stderr)
        return 2

    env = dict(os.environ)
    env.setdefault("DJANGO_DEBUG", "0")
    env.setdefault("DJANGO_SECURE_COOKIES", "0")
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(40))
    env.setdefault("DJANGO_LOG_LEVEL", "WARNING")
    proc = None
    base = args.url.rstrip("/") if args.url else None
    try:
        if base is None:
            Path(env.get("RCB_VAR_DIR", ROOT / "var")).mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
            subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "rcbsite.wsgi:application", "--bind", f"127.0.0.1:{port}",
                 "--workers", str(args.workers), "--log-level", "warning"],
                cwd=ROOT, env=env, start_new_session=True,
            )
            wait_up(base, proc)
        else:
            wait_up(base, None, seconds=10)
        status, body = fetch(f"{base}/api/v1/releases")
        slugs = {r["slug"] for r in json.loads(body)["releases"]} if status == 200 else set()
        if args.release not in slugs:
            if args.url or args.release != "synthetic":
                print(f"release {args.release!r} not found on {base} (have: {', '.join(sorted(slugs)) or 'none'})",
                      file=sys.stderr)
                return 2
            print(f"generating the synthetic release ({args.models} models x {args.snippets} snippets x "
                  f"{args.samples} samples); this takes a few minutes once")
            subprocess.run([sys.executable, "manage.py", "generate_synthetic", "--models", str(args.models),
                            "--snippets", str(args.snippets), "--samples", str(args.samples)],
                           cwd=ROOT, env=env, check=True)
        targets = {
            "trivial (/api/v1/ping)": f"{base}/api/v1/ping",
            "leaderboard API": f"{base}/api/v1/leaderboard?release={args.release}",
            "overall page": f"{base}/releases/{args.release}/leaderboard/",
        }
        for url in targets.values():  # warm caches and check each answers 200 before measuring
            status, body = fetch(url)
            if status != 200:
                print(f"{url} answered {status}: {body[:200]!r}", file=sys.stderr)
                return 1
        rows = api = None
        n_rows = len(json.loads(fetch(targets["leaderboard API"])[1])["rows"])
        print(f"server {base}, release {args.release!r} ({n_rows} models); wrk -t{args.threads} "
              f"-c{args.connections} -d{args.duration}s per endpoint")
        results = {name: run_wrk(url, duration=args.duration, connections=args.connections, threads=args.threads)
                   for name, url in targets.items()}
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    print(f"\n{'endpoint':<26}{'req/s':>10}{'avg ms':>9}{'p50 ms':>9}{'p99 ms':>9}{'requests':>10}{'errors':>8}{'non-2xx':>9}")
    for name, r in results.items():
        print(f"{name:<26}{r['rps']:>10.1f}{r['avg_ms']:>9.2f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
              f"{r['requests']:>10}{r['errors']:>8}{r['non_2xx']:>9}")
    trivial = results["trivial (/api/v1/ping)"]["rps"]
    api = results["leaderboard API"]["rps"]
    rows = results["overall page"]["rps"]
    ratio = api / trivial if trivial else 0.0
    print(f"\nratio leaderboard API / trivial: {ratio:.2f} (target >= {TARGET_RATIO:.2f}: "
          f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})")
    print(f"ratio overall page / trivial:    {rows / trivial if trivial else 0.0:.2f}")
    failures = sum(r["errors"] + r["non_2xx"] for r in results.values())
    print(f"errors: {failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
