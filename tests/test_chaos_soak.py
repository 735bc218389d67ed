"""The chaos soak in short: bench/chaos.py for 2 minutes with a fixed seed, bwrap, fewer submissions.

bench/chaos.py runs as a process of its own (it builds its own PostgreSQL cluster, Redis, S3
bucket, web server, watchdog and worker hosts in network namespaces; nothing of this test's
database or Redis is touched). The seed is fixed so that a failure replays; every fault kind of
the bwrap variant (all but stopping the Docker engine, which other tests use) comes once in the
first round of the seeded draw, so two minutes see each. Its report (JSON) must hold every check:
each submission ended finished (or cancelled where it was cancelled on purpose), every verdict
stored once and equal to the CLI's, no job waited past the heartbeat limit + the watchdog period
after its worker died or hung, nothing charged to a quota for a fault.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.site_drill import netns_problem

ROOT = Path(__file__).resolve().parent.parent
SEED = 7

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(shutil.which("initdb") is None or shutil.which("pg_ctl") is None,
                       reason="needs initdb and pg_ctl (a PostgreSQL cluster of the soak's own)"),
]


def test_two_minutes_of_chaos_lose_nothing(tmp_path):
    reason = netns_problem()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("moto", reason="needs moto[server] (requirements-dev.txt): the soak's S3 bucket")
    report_path = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCB_PAPER_")}
    done = subprocess.run(
        [sys.executable, "bench/chaos.py", "--minutes", "2", "--seed", str(SEED), "--submissions", "10",
         "--backend", "bwrap", "--drain-minutes", "6", "--report", str(report_path), "--work-dir", str(tmp_path / "soak")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=15 * 60,
    )
    assert report_path.exists(), f"no report (exit {done.returncode})\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    report = json.loads(report_path.read_text())
    detail = f"\n{done.stdout[-6000:]}"
    assert report["checks"] == {"ended": [], "verdicts": [], "waits": [], "quota": []}, detail
    assert report["ok"] and done.returncode == 0, detail
    # the soak did what it says: every kind of fault of the bwrap variant was made, and it mattered
    kinds = {f["kind"] for f in report["faults"] if not f["note"].startswith("not made")}
    assert kinds >= {"sigkill", "sigstop", "pg-restart", "redis-restart", "pg-terminate", "bucket-away",
                     "disk-full"}, report["faults"]
    assert report["statuses"].get("finished", 0) >= 7, report["statuses"]
    assert report["cancelled_on_purpose"] >= 1 and report["statuses"].get("cancelled", 0) == report["cancelled_on_purpose"]
    assert report["verdicts_compared"] >= 300, report["verdicts_compared"]
    assert report["worker_death_waits"], "no job was caught by a dead or hung worker: the faults came to nothing"
    assert all(v is None or v < 120 for v in report["worst_recovery_seconds"].values()), report["worst_recovery_seconds"]
