"""Drive every public page, the leaderboard API and a trivial endpoint with wrk, warm and cold.

Run through bench/web_load (it installs wrk and the venv first). Each endpoint gets the same wrk
settings on the same server in the same run, so a ratio to the trivial endpoint (/api/v1/ping)
compares like with like. Two servers, one after the other: *warm* with the page cache on (each
page is fetched once first; its first answer's time is the cold single-request latency), and
*cold* with RCB_PAGE_CACHE=0 (every request renders the page: the throughput of a cache that
has just been invalidated). The query count of each page, cold and warm, comes from Django's
test client in a separate process on the same database.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from leaderboard.query import TABLE_ROWS  # noqa: E402 - the rows of a page of a long table
TARGET_WARM = 0.5  # issue 14: every public page, warm, >= 0.5 x the trivial endpoint
TARGET_COLD = 0.1


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


def page_targets(base: str, release: str, get: Callable[[str], tuple[int, bytes]] = fetch) -> dict[str, str]:
    """Every public page of ``release`` (one of each kind, with real ids taken from the API)."""
    board = json.loads(get(f"{base}/api/v1/leaderboard?release={release}")[1])
    model = next((r["model"] for r in board["rows"] if r.get("ranked")), board["rows"][0]["model"])
    papers = json.loads(get(f"{base}/api/v1/heatmap?release={release}")[1])["papers"]
    paper = papers[0]
    snippets = json.loads(get(f"{base}/api/v1/papers/{paper}?release={release}")[1])["snippets"]
    snippet = urllib.parse.urlencode({"release": release, "file": snippets[0]["file"], "name": snippets[0]["name"]})
    q = f"release={release}"
    last = math.ceil(len(board["rows"]) / TABLE_ROWS)  # long tables come TABLE_ROWS rows a page
    later = {"overall, last page": f"{base}/leaderboard/?{q}&page={last}"} if last > 1 else {}
    return {
        "home": f"{base}/?{q}",
        "overall leaderboard": f"{base}/releases/{release}/leaderboard/",
        **later,
        "overall, sorted + filtered": f"{base}/leaderboard/?{q}&sort=cost&open_weights=1",
        "overall CSV": f"{base}/leaderboard/?{q}&format=csv",
        "per paper (heatmap)": f"{base}/leaderboard/papers/?{q}",
        "per paper, chosen": f"{base}/leaderboard/papers/?{q}&paper={paper}",
        "contamination-safe": f"{base}/leaderboard/contamination-safe/?{q}",
        "contamination window": f"{base}/leaderboard/contamination-safe/?{q}&from=2024-01-01&to=2024-12-31",
        "errors": f"{base}/leaderboard/errors/?{q}",
        "paper ablation": f"{base}/leaderboard/paper-ablation/?{q}",
        "releases": f"{base}/releases/",
        "release": f"{base}/releases/{release}/",
        "model": f"{base}/models/{model}/?{q}",
        "paper": f"{base}/papers/{paper}/?{q}",
        "snippet": f"{base}/papers/{paper}/snippet/?{snippet}",
        "snippet drill-down": f"{base}/papers/{paper}/snippet/?{snippet}&model={urllib.parse.quote(model)}",
        # live state of the scoring queue: a live page of the page cache (its own stamp, 5 s period)
        "queue (live, 5 s)": f"{base}/queue/",
    }


API = "leaderboard API"


def count_queries(release: str) -> int:
    """In this process (Django set up on the server's database): queries per page, cold and warm."""
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcbsite.settings")
    django.setup()
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from leaderboard import page_cache

    client = Client(HTTP_HOST="127.0.0.1")

    def get(url: str) -> tuple[int, bytes]:
        response = client.get(url)
        return response.status_code, response.content

    counts = {}
    for name, url in page_targets("", release, get).items():
        cache.clear()  # this process's own cache (locmem) unless RCB_CACHE says otherwise
        page_cache.local_clear()
        with CaptureQueriesContext(connection) as cold:
            status = client.get(url).status_code
        with CaptureQueriesContext(connection) as warm:
            client.get(url)
        counts[name] = {"cold": len(cold.captured_queries), "warm": len(warm.captured_queries), "status": status}
    print(json.dumps(counts))
    return 0


def server_start(env: dict[str, str], workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "rcbsite.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True,
    )
    wait_up(base, proc)
    return proc, base


def server_stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def release_touch(release: str, env: dict[str, str]) -> None:
    """A write, as a submission finishing makes one: the release's version moves, every cached page goes stale."""
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--touch", "--release", release],
                   cwd=ROOT, env=env, check=True)


def _touch(release: str) -> int:
    import django

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcbsite.settings")
    django.setup()
    from catalog.models import Release
    from catalog.aggregates import release_touch as touch

    touch(release_id=Release.objects.get(slug=release).pk)
    return 0


def measure(base: str, targets: dict[str, str], args: argparse.Namespace, env: dict[str, str], *,
            mode: str, first: dict[str, float] | None = None, sizes: dict[str, int] | None = None) -> dict:
    """wrk on the trivial endpoint, then on each target.

    mode "warm": a write, then the first request's time into ``first`` (a render on a cold cache),
    a few more requests (every worker has it; the body's size into ``sizes``), then wrk. "cold": a
    write just before each wrk run, so it starts on an invalidated cache. "uncached": wrk on a
    server without the page cache.

    Each target gets ``args.rounds`` pairs of runs (the trivial endpoint, then the target): on a
    shared machine the neighbours' load comes in bursts, and a burst during one run of a pair
    skews that pair's ratio; the reported ratio is the median of the pairs' ratios, the rates the
    medians of the runs'.
    """
    wrk = dict(duration=args.duration, connections=args.connections, threads=args.threads)
    results = {}
    for name, url in targets.items():
        pairs = []
        for round_ in range(args.rounds):
            # the trivial endpoint right before each run: the load drifts, and a ratio to a rate
            # measured minutes earlier would measure the neighbours
            trivial = run_wrk(f"{base}/api/v1/ping", **wrk)
            if mode == "cold" or (mode == "warm" and round_ == 0):
                release_touch(args.release, env)
            if mode == "warm" and round_ == 0:
                started = time.monotonic()
                status, body = fetch(url, timeout=120)
                if first is not None:
                    first[name] = (time.monotonic() - started) * 1000
                for _ in range(2 * args.workers):
                    status, body = fetch(url, timeout=120)
                if status != 200:
                    raise SystemExit(f"{url} answered {status}: {body[:200]!r}")
                if sizes is not None:
                    sizes[name] = len(body)
            pairs.append((trivial, run_wrk(url, **wrk)))
        runs = [run for _, run in pairs]
        result = dict(runs[0])
        for key in ("rps", "p50_ms", "p99_ms", "avg_ms"):
            result[key] = statistics.median(run[key] for run in runs)
        result["trivial_rps"] = statistics.median(t["rps"] for t, _ in pairs)
        result["ratio"] = statistics.median(run["rps"] / (t["rps"] or float("nan")) for t, run in pairs)
        result["errors"] = sum(run["errors"] + run["non_2xx"] + t["errors"] + t["non_2xx"] for t, run in pairs)
        result["non_2xx"] = 0
        results[name] = result
        print(f"  {name:<30} {result['rps']:>9.1f} req/s, ratio {result['ratio']:.2f} (median of "
              + ", ".join(f"{run['rps']:.0f}/{t['rps']:.0f}" for t, run in pairs) + " page/trivial)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server: warm measurements only (default: start gunicorn here)")
    parser.add_argument("--release", default="synthetic", help="release slug to load (default: synthetic)")
    parser.add_argument("--duration", type=int, default=10, help="seconds per endpoint (default 10)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1,
                        help="pairs of runs (trivial endpoint, page) per endpoint; ratios are the pairs' median (default 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2), help="gunicorn workers")
    parser.add_argument("--models", type=int, default=100, help="synthetic size when it must be generated")
    parser.add_argument("--snippets", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--no-cold", action="store_true", help="skip the cold runs (each right after a write)")
    parser.add_argument("--uncached", action="store_true",
                        help="also measure a server without the page cache (RCB_PAGE_CACHE=0)")
    parser.add_argument("--count-queries", action="store_true", help=argparse.SUPPRESS)  # child processes
    parser.add_argument("--touch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count_queries:
        return count_queries(args.release)
    if args.touch:
        return _touch(args.release)
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
    warm_first: dict[str, float] = {}
    sizes: dict[str, int] = {}
    cold: dict = {}
    uncached: dict = {}
    counts: dict = {}
    try:
        if base is None:
            Path(env.get("RCB_VAR_DIR", ROOT / "var")).mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
            subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
            proc, base = server_start({**env, "RCB_PAGE_CACHE": "1"}, args.workers)
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
                  f"{args.samples} samples); this takes a few minutes once", flush=True)
            subprocess.run([sys.executable, "manage.py", "generate_synthetic", "--models", str(args.models),
                            "--snippets", str(args.snippets), "--samples", str(args.samples)],
                           cwd=ROOT, env=env, check=True)
        pages = page_targets(base, args.release)
        n_rows = len(json.loads(fetch(f"{base}/api/v1/leaderboard?release={args.release}")[1])["rows"])
        print(f"server {base}, release {args.release!r} ({n_rows} models); wrk -t{args.threads} "
              f"-c{args.connections} -d{args.duration}s per endpoint, {args.workers} gunicorn workers", flush=True)
        targets = {API: f"{base}/api/v1/leaderboard?release={args.release}", **pages}
        if args.url:  # another machine's database: no writes from here
            print("warm:", flush=True)
            for url in targets.values():
                fetch(url, timeout=120)
            warm = measure(base, targets, args, env, mode="as is")
        else:
            print("warm (page cache on; after a write, the first request renders):", flush=True)
            warm = measure(base, targets, args, env, mode="warm", first=warm_first, sizes=sizes)
            if not args.no_cold:
                print("cold (each run starts right after a write):", flush=True)
                cold = measure(base, pages, args, env, mode="cold")
            server_stop(proc)
            proc = None
            if args.uncached:
                print("uncached (RCB_PAGE_CACHE=0: every request renders the page):", flush=True)
                proc, base = server_start({**env, "RCB_PAGE_CACHE": "0"}, args.workers)
                uncached = measure(base, page_targets(base, args.release), args, env, mode="uncached")
                server_stop(proc)
                proc = None
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--count-queries", "--release",
                                  args.release], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
            if out.returncode == 0:
                counts = json.loads(out.stdout.strip().splitlines()[-1])
            else:
                print(f"query counts failed: {out.stderr[-2000:]}", file=sys.stderr)
    finally:
        server_stop(proc)

    print(f"\n{'endpoint':<30}{'warm r/s':>10}{'ping':>8}{'ratio':>7}{'p50 ms':>8}{'p99 ms':>8}{'cold r/s':>10}"
          f"{'ping':>8}{'ratio':>7}{'first ms':>10}{'uncached':>10}{'ratio':>7}{'queries':>9}{'kB':>7}{'errors':>8}")
    failures = 0
    missed = []
    for name in targets:
        w, c, u, q = warm[name], cold.get(name), uncached.get(name), counts.get(name)
        w_ratio = w["ratio"]
        c_ratio = c["ratio"] if c else float("nan")
        errors = sum(r["errors"] + r["non_2xx"] for r in (w, c, u) if r)
        failures += errors
        if name != API and (w_ratio < TARGET_WARM or (c and c_ratio < TARGET_COLD)):
            missed.append(name)
        queries = f"{q['cold']}/{q['warm']}" if q else "-"
        first = f"{warm_first[name]:.0f}" if name in warm_first else "-"
        print(f"{name:<30}{w['rps']:>10.1f}{w['trivial_rps']:>8.0f}{w_ratio:>7.2f}{w['p50_ms']:>8.1f}{w['p99_ms']:>8.1f}"
              + (f"{c['rps']:>10.1f}{c['trivial_rps']:>8.0f}{c_ratio:>7.2f}" if c else f"{'-':>10}{'-':>8}{'-':>7}")
              + f"{first:>10}"
              + (f"{u['rps']:>10.1f}{u['ratio']:>7.2f}" if u else f"{'-':>10}{'-':>7}")
              + f"{queries:>9}{(f'{sizes[name] / 1024:.0f}' if name in sizes else '-'):>7}{errors:>8}")
    print(f"\nratio = req/s over the trivial endpoint's (ping), measured just before on the same server (the median of "
          f"{args.rounds} such pair(s) per endpoint; the rates are medians too); cold = a run that starts right after a "
          "write (every cached page and figure stale); first ms = the first request after a write (the render); "
          "uncached = a server with RCB_PAGE_CACHE=0; queries = per request, cache cold/warm; kB = the page's size")
    print(f"targets: warm >= {TARGET_WARM} and cold >= {TARGET_COLD} for every page: "
          + ("met" if not missed else "NOT met by " + ", ".join(missed)))
    print(f"errors: {failures}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
