"""The bwrap backend and the auto backend: real bubblewrap sandboxes, verdicts equal to fresh processes."""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchmark_core import cli
from benchmark_core.problemset import load_problemset
from benchmark_core.sandbox.auto import default_backend
from benchmark_core.sandbox.base import Limits, PaperSpec, get_sandbox
from benchmark_core.sandbox.bwrap import BwrapSandbox, bwrap_available

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
TORCH_PSET = ROOT / "tests" / "data" / "torch_pset"
PROBE_PSET = ROOT / "tests" / "probes" / "pset"

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def bwrap():
    problem = bwrap_available()
    if problem:
        pytest.fail(f"bwrap must work here (scripts/test.sh installs bubblewrap): {problem}")
    sandbox = get_sandbox("bwrap")
    yield sandbox
    sandbox.close()


def _score(args: list[str], tmp_path: Path) -> dict:
    out = tmp_path / "results.json"
    assert cli.main(["score", *args, "--quiet", "-o", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_demo_reference_is_100_and_blank_is_0(tmp_path, bwrap):
    ref = _score([str(DEMO), "--reference", "--backend", "bwrap"], tmp_path)
    assert ref["summary"]["scaled_pass_rate"] == 100.0 and ref["backend"].startswith("bwrap")
    assert all(s["extra"]["proof"] is True for s in ref["snippets"])
    blank = _score([str(DEMO), "--blank", "--backend", "bwrap"], tmp_path)
    assert blank["summary"]["scaled_pass_rate"] == 0.0


def test_run_is_thread_safe(bwrap):
    paper = load_problemset(PROBE_PSET).paper("probe")
    with bwrap.open(PaperSpec.from_paper(paper)) as session:
        results: dict[int, str] = {}

        def one(i: int) -> None:
            code = f"def solve(x):\n    print('token-{i}')\n    return x * 2\n"
            results[i] = session.run({"solution.py": code}, timeout=30).stdout

        threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(f"token-{i}" in results[i] and results[i].count("token-") == 4 for i in range(12))


def test_a_dead_runner_is_restarted(bwrap):
    paper = load_problemset(PROBE_PSET).paper("probe")
    with bwrap.open(PaperSpec.from_paper(paper)) as session:
        first = session.server_pid
        proc = psutil.Process(first)  # once: the process may be reaped as soon as it is killed
        proc.kill()
        proc.wait(5)
        result = session.run({}, timeout=30)
        assert result.exit_code == 0 and result.extra["completed"] is True
        assert session.server_pid != first


def test_fresh_process_papers_use_a_fresh_interpreter(bwrap):
    paper = load_problemset(PROBE_PSET).paper("probe")
    spec = PaperSpec(id=paper.id, folder=paper.folder, fresh_process=True)
    with bwrap.open(spec) as session:
        assert session.ready["fresh"] is True
        result = session.run({}, timeout=60)
        assert result.exit_code == 0 and (result.extra["completed"], result.extra["tests_run"]) == (True, 2)
        assert result.extra["audit"]["authentic"] is True


def test_memory_limit_applies(bwrap):
    sandbox = BwrapSandbox(limits=Limits(memory_mb=512))
    paper = load_problemset(PROBE_PSET).paper("probe")
    with sandbox.open(PaperSpec.from_paper(paper)) as session:
        code = "def solve(x):\n    b = bytearray(800 * 1024 * 1024)\n    return x * 2\n"
        result = session.run({"solution.py": code}, timeout=30)
        assert "MemoryError" in result.stderr and result.oom


def test_auto_uses_bwrap_when_no_engine_answers(monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with caplog.at_level(logging.WARNING, logger="benchmark_core.sandbox"):
        sandbox = get_sandbox("auto")
    assert sandbox.name == "bwrap"
    assert "no Docker engine answered" in caplog.text and "using bwrap" in caplog.text


def test_cli_defaults_to_an_isolating_backend_here(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert default_backend() == "auto"
    result = _score([str(PROBE_PSET), "--reference"], tmp_path)
    assert result["backend"].startswith("bwrap") and result["summary"]["pass_rate"] == 100.0


def test_multiprocessing_works_like_in_a_fresh_process(bwrap, tmp_path):
    paper = tmp_path / "mp"
    paper.mkdir()
    (paper / "paper2code_test.py").write_text(
        "import multiprocessing as mp\nimport unittest\n\n\ndef square(x):\n    return x * x\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_spawn(self):\n"
        "        with mp.get_context('spawn').Pool(2) as pool:\n"
        "            self.assertEqual(pool.map(square, range(4)), [0, 1, 4, 9])\n\n"
        "    def test_fork(self):\n"
        "        with mp.get_context('fork').Pool(2) as pool:\n"
        "            self.assertEqual(pool.map(square, range(4)), [0, 1, 4, 9])\n\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n")
    with bwrap.open(PaperSpec(id="mp", folder=paper)) as session:
        result = session.run({}, timeout=60)
    assert result.exit_code == 0, result.stderr
    assert (result.extra["completed"], result.extra["tests_run"]) == (True, 2)
    assert result.extra["audit"]["authentic"] is True and result.extra["audit"]["forged"] == 0


def test_the_sandbox_runs_in_its_cgroups_and_leaves_none_behind():
    """Root here: every process of a bwrap sandbox is in its cpu cgroup (weighted like a docker
    container of as many runs), each run in a memory cgroup of its own, and closing the sandbox
    removes the folders."""
    import os

    if os.geteuid() != 0:
        pytest.skip("cgroups are made by a root runner only")
    sandbox = get_sandbox("bwrap")
    paper = load_problemset(DEMO).paper("focal-loss")
    made = sandbox.cgroups.get()
    assert made is not None and "cgroup" in sandbox.memory_bound
    try:
        with sandbox.open(PaperSpec.from_paper(paper)) as session:
            lines = Path(f"/proc/{session.server_pid}/cgroup").read_text().splitlines()
            cpu = next(line.split(":", 2)[2] for line in lines if line.split(":")[1] == "cpu")
            assert made.cpu is not None and str(made.cpu).endswith(cpu), (cpu, made.cpu)
            assert int((made.cpu / "cpu.shares").read_text()) == 1024 * ((os.cpu_count() or 1) + 1)
            result = session.run({}, timeout=60)
            assert result.exit_code == 0, result.stderr
            runs = [p for p in made.dirs["memory"].iterdir() if p.name.startswith("run-")]
            assert runs and all((p / "memory.limit_in_bytes").read_text().strip() == str(
                sandbox.limits.memory_mb << 20) for p in runs)
            # the next run's child, forked ahead, waits in that run's cgroups already (joining one
            # waits for the kernel: not the run's time), under the same limits (after a run of the
            # paper's own code, it is forked once that run's lesson is taken: after its answer)
            deadline = time.monotonic() + 10
            while True:
                spares = [p for p in psutil.Process(session.server_pid).children(recursive=True)
                          if p.name() == "rcb-spare"]
                groups = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{spares[0].pid}/cgroup").read_text()
                              .splitlines()) if len(spares) == 1 else {}
                if "/run-" in groups.get("memory", "") or time.monotonic() > deadline:
                    break  # (it joins them once forked)
                time.sleep(0.05)
            assert len(spares) == 1, spares
            runs = [p for p in made.dirs["memory"].iterdir() if p.name.startswith("run-")]
            joined = [run for run in runs if str(run).endswith(groups["memory"])]
            assert len(joined) == 1, (groups["memory"], runs)
            assert groups["pids"].endswith("/" + joined[0].name), groups["pids"]
            result = session.run({}, timeout=60)  # that spare's run
            assert result.exit_code == 0, result.stderr
            assert not spares[0].is_running() or spares[0].status() == psutil.STATUS_ZOMBIE
    finally:
        sandbox.close()
    assert not made.dirs["memory"].exists() and not made.cpu.exists()


def test_a_paper_big_for_the_runs_disk_is_not_copied_ahead(tmp_path):
    """A server copies the paper for its next run ahead only where the copy leaves the runs' disk far
    from the disk guard's alarm (``Server.ahead_room``): a paper of 2.5 MB on an 8 MB disk is copied at
    each request, as before, and its runs pass; the probe paper alone on the same disk is copied ahead."""
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("runs have uids of their own (and a copy made ahead) under a root runner only")
    big = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, big)
    look = ("def solve(x):\n    import os, sys, time\n    ahead = os.path.join(os.getcwd(), '..', '..', '+ahead')\n"
            "    t0 = time.monotonic()\n"
            "    while not os.path.isdir(ahead) and time.monotonic() - t0 < 0.5:\n        time.sleep(0.02)\n"
            "    print('AHEAD', 'there' if os.path.isdir(ahead) else 'missing', file=sys.stderr)\n    return x * 2\n")
    seen = {}
    for name, extra in (("small", 0), ("big", 5 << 19)):
        if extra:
            (big / "probe" / "data.bin").write_bytes(os.urandom(extra))
        paper = load_problemset(big).paper("probe")
        sandbox = get_sandbox("bwrap", limits=Limits(tmpfs_mb=8))
        try:
            with sandbox.open(PaperSpec.from_paper(paper)) as session:
                results = [session.run({"solution.py": look}, timeout=60) for _ in range(2)]
        finally:
            sandbox.close()
        assert all(r.exit_code == 0 for r in results), [r.stderr[-500:] for r in results]
        # each run's copy is made at its request or ahead; the next one's, if any, right after it starts
        seen[name] = sorted({line.split()[1] for r in results for line in r.stderr.splitlines()
                             if line.startswith("AHEAD")})
    assert seen == {"small": ["there"], "big": ["missing"]}, seen
