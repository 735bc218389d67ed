"""Hostile completions against every isolating backend: each ends contained, not passed (or passed
only with a flag that keeps it off the ranked board), with a sensible category, and the worker is
healthy afterwards (no process left, no file outside the run touched, the next honest run passes)."""
from __future__ import annotations

import importlib.util
import re
import socket
import threading

import pytest

from hostile import PROBES, ROBUSTNESS, STATIC, TAMPERING
from probe_support import CANARY, PSET, REPO, run_probe, tree_digest, wait_until_clean

HONEST = "return x * 2"
ALL_PROBES = PROBES + TAMPERING + ROBUSTNESS + STATIC


def _host_service_up(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def host_state():
    CANARY.write_text("canary\n")
    state = {"paper": tree_digest(PSET), "canary": CANARY.read_text(),
             "redis": _host_service_up(6379), "postgres": _host_service_up(5432)}
    yield state
    CANARY.unlink(missing_ok=True)


def test_honest_completion_passes(probe_session, probe_paper):
    run = run_probe(probe_session, probe_paper, HONEST, timeout=30)
    assert run.passed, run.output_tail
    assert run.extra["completed"] is True and run.extra["tests_run"] == 2
    assert run.flags == [], run.flags


def test_probe_list_is_long_enough():
    assert len(PROBES) >= 25
    assert len(TAMPERING) + len(ROBUSTNESS) >= 20, "issue 9 asks for at least 20 new probes"
    assert len({p.name for p in ALL_PROBES}) == len(ALL_PROBES)


@pytest.mark.slow
@pytest.mark.parametrize("probe", ALL_PROBES, ids=[p.name for p in ALL_PROBES])
def test_probe_contained(probe, probe_session, probe_paper, host_state):
    for module in probe.needs:
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"{module} is needed by this probe (requirements-dev.txt installs it)")
    run = run_probe(probe_session, probe_paper, probe.body, timeout=probe.timeout)
    output = run.stdout + "\n" + run.stderr
    for module in probe.needs:
        if f"No module named '{module}'" in output:
            pytest.fail(f"{module} is missing inside the sandbox (the probe paper's requirements list it)")
    assert "ESCAPED" not in output, output[-3000:]
    flags = " ".join(run.flags)
    if probe.may_pass and run.passed:
        assert re.search(probe.flagged, flags), f"{probe.name} passed without its flag: {run.flags}"
    else:
        assert not run.passed, f"{probe.name} passed:\n{output[-2000:]}"
        assert run.category in probe.categories, f"{probe.name}: category {run.category} {run.flags}\n{output[-2000:]}"
    if probe.flagged:
        assert re.search(probe.flagged, flags), f"{probe.name}: flags {run.flags}\n{output[-1500:]}"
    if probe.blocked:
        pattern = probe.blocked.replace("__REPO__", re.escape(str(REPO)))
        assert re.search(pattern, output, re.M), f"{probe.name}: no sign of the block in:\n{output[-2000:]}"
    if probe.name == "stdout_flood_1gb":
        assert len(run.stdout) < 100_000
    # the worker is healthy afterwards
    assert wait_until_clean(probe_session) == []
    assert tree_digest(PSET) == host_state["paper"], "the paper folder on the host changed"
    assert CANARY.read_text() == host_state["canary"], "a file outside the sandbox changed"
    assert _host_service_up(6379) == host_state["redis"] and _host_service_up(5432) == host_state["postgres"]
    honest = run_probe(probe_session, probe_paper, HONEST, timeout=30)
    assert honest.passed, f"the next honest run failed after {probe.name}:\n{honest.output_tail}"
    assert not any(f.startswith(("tampering:", "audit:")) for f in honest.flags), honest.flags


@pytest.mark.slow
def test_runs_cannot_touch_each_other(probe_session, probe_paper):
    """A victim run waits while an attacker run tries to rewrite every other run's folder."""
    victim_body = "import time\ntime.sleep(1.5)\nreturn x * 2"
    attacker = next(p for p in PROBES if p.name == "other_runs_folders")
    results = {}

    def victim():
        results["victim"] = run_probe(probe_session, probe_paper, victim_body, timeout=30)

    thread = threading.Thread(target=victim)
    thread.start()
    results["attacker"] = run_probe(probe_session, probe_paper, attacker.body, timeout=30)
    thread.join()
    assert results["victim"].passed, results["victim"].output_tail
    out = results["attacker"].stdout + results["attacker"].stderr
    assert "ESCAPED" not in out, out
    assert not results["attacker"].passed


@pytest.mark.slow
def test_fork_bomb_beside_an_honest_run(probe_session, probe_paper):
    """The runner keeps the CPU it needs: the bomb is stopped on time and the honest run passes."""
    bomb = next(p for p in PROBES if p.name == "fork_bomb")
    results = {}

    def honest():
        results["honest"] = run_probe(probe_session, probe_paper, "import time\ntime.sleep(0.5)\nreturn x * 2",
                                      timeout=40)

    thread = threading.Thread(target=honest)
    thread.start()
    results["bomb"] = run_probe(probe_session, probe_paper, bomb.body, timeout=4.0)
    thread.join()
    assert results["honest"].passed, results["honest"].output_tail
    assert results["bomb"].timed_out or not results["bomb"].passed
    assert results["bomb"].seconds < 4.0 + 3.0, f"the bomb's timeout came {results['bomb'].seconds - 4:.1f}s late"
    assert wait_until_clean(probe_session, seconds=10) == []
