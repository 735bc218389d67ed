"""2,000 quick runs through one warm runner: no leftover process, no zombie growth, no memory growth."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from probe_support import descendants, run_probe, sandbox_leftovers, sandbox_processes, warm_server

RUNS = 2000
HONEST = "return x * 2"
WRONG = "return x + 1"


@pytest.mark.slow
def test_two_thousand_runs(probe_session, probe_paper):
    def one(i: int):
        # every fifth run fails, so both paths of the runner are exercised
        return run_probe(probe_session, probe_paper, WRONG if i % 5 == 0 else HONEST, timeout=60)

    with ThreadPoolExecutor(max_workers=2) as pool:
        warmup = list(pool.map(one, range(100)))
        rows = sandbox_processes(probe_session)
        server = warm_server(rows)
        assert server is not None
        rss_before = server.rss_kb
        runs = list(pool.map(one, range(RUNS)))
    assert all(r.passed for i, r in enumerate(warmup) if i % 5)
    passed = [r.passed for r in runs]
    assert passed == [i % 5 != 0 for i in range(RUNS)]
    rows = sandbox_processes(probe_session)
    server_after = warm_server(rows)
    assert server_after is not None and server_after.pid == server.pid, "the warm runner was restarted"
    assert [p for p in descendants(rows, server.pid) if p.zombie] == []
    assert sandbox_leftovers(probe_session) == []
    growth_kb = server_after.rss_kb - rss_before
    print(f"warm runner RSS {rss_before} kB -> {server_after.rss_kb} kB after {RUNS} runs")
    assert growth_kb < 8 * 1024, f"warm runner grew by {growth_kb} kB over {RUNS} runs"
