"""Reference outcomes kept on disk (VerdictCache): a later scoring in a new process makes no reference
run; a failed outcome is believed only FAILED_REFERENCE_SECONDS; one the sandbox caused is never kept."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Mapping

import pytest

from benchmark_core import runner
from benchmark_core.cache import VerdictCache
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, run_tasks
from benchmark_core.sandbox.base import PaperSpec, RunResult, Sandbox, SandboxSession, get_sandbox

ROOT = Path(__file__).resolve().parent.parent
PROBE_PSET = ROOT / "tests" / "probes" / "pset"

pytestmark = pytest.mark.bwrap


class _Counting(Sandbox):
    """The real bwrap backend, counting the runs with no file replaced (reference runs)."""

    name = "bwrap"

    def __init__(self, inner: Sandbox):
        super().__init__(python=inner.python, limits=inner.limits)
        self.inner = inner
        self.reference_runs = 0
        self.lock = threading.Lock()

    @property
    def environment_id(self) -> str:
        return self.inner.environment_id  # type: ignore[attr-defined]

    def environment_id_for(self, paper: PaperSpec) -> str:
        return self.inner.environment_id_for(paper)  # type: ignore[attr-defined]

    def open(self, paper: PaperSpec) -> SandboxSession:
        return _CountingSession(self, paper, self.inner.open(paper))


class _CountingSession(SandboxSession):
    def __init__(self, sandbox: _Counting, paper: PaperSpec, inner: SandboxSession):
        super().__init__(sandbox, paper)
        self.inner = inner

    @property
    def ready(self):
        return getattr(self.inner, "ready", None)

    def run(self, files: Mapping[str, str], *, timeout: float, last: bool = False) -> RunResult:
        if not files:
            with self.sandbox.lock:  # type: ignore[attr-defined]
                self.sandbox.reference_runs += 1  # type: ignore[attr-defined]
        return self.inner.run(files, timeout=timeout, last=last)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def bwrap():
    sandbox = get_sandbox("bwrap")
    yield sandbox
    sandbox.close()


def _tasks(pset_dir: Path, bodies: list[str]) -> list[Task]:
    paper = load_problemset(pset_dir).paper("probe")
    snip = paper.snippet("solve")
    return [Task(paper, snip, ("    " + body,), sample=i) for i, body in enumerate(bodies)]


def _new_process(monkeypatch) -> None:
    """Forget what this process remembers, as a new worker process would have."""
    monkeypatch.setattr(runner, "_REFERENCE", {})


def test_a_later_scoring_reuses_the_stored_reference_outcome(tmp_path, bwrap, monkeypatch):
    pset = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, pset)
    # the content hash is the probe paper's, which earlier tests of this process ran: forget them
    _new_process(monkeypatch)
    path = tmp_path / "verdicts.sqlite"
    counting = _Counting(bwrap)
    first = run_tasks(_tasks(pset, ["return x * 2", "return x + 1"]), sandbox=counting, cache=VerdictCache(path))
    assert [r.passed for r in first] == [True, False]
    assert counting.reference_runs >= 1
    _new_process(monkeypatch)
    counting.reference_runs = 0
    # new completions (no cached verdict): runs are made, the reference outcome comes from the file
    second = run_tasks(_tasks(pset, ["return 2 * x", "return x - 1"]), sandbox=counting, cache=VerdictCache(path))
    assert [r.passed for r in second] == [True, False]
    assert [r.category for r in second] == [None, "logic"]
    assert counting.reference_runs == 0
    # the proof still compares with the stored outcome: a run of fewer cases than the reference fails
    assert second[0].extra.get("proof") is True and second[0].extra.get("expected_tests") == 2


def test_a_failed_reference_is_believed_only_for_a_while(tmp_path, bwrap, monkeypatch):
    pset = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, pset)
    ref = pset / "probe" / "solution_ref.py"
    ref.write_text(ref.read_text() + "\nraise RuntimeError('broken environment')\n")
    path = tmp_path / "verdicts.sqlite"
    counting = _Counting(bwrap)
    first = run_tasks(_tasks(pset, ["return x * 2"]), sandbox=counting, cache=VerdictCache(path))
    assert first[0].category == "environment" and "broken environment" in first[0].stderr
    assert counting.reference_runs == 1
    _new_process(monkeypatch)
    counting.reference_runs = 0
    again = run_tasks(_tasks(pset, ["return 2 * x"]), sandbox=counting, cache=VerdictCache(path))
    assert again[0].category == "environment" and counting.reference_runs == 0
    # once its time is up, the reference code is run again (an environment repaired meanwhile counts)
    _new_process(monkeypatch)
    monkeypatch.setattr(runner, "FAILED_REFERENCE_SECONDS", 0.0)
    later = run_tasks(_tasks(pset, ["return x + x"]), sandbox=counting, cache=VerdictCache(path))
    assert later[0].category == "environment" and counting.reference_runs >= 1


def test_a_sandbox_failure_is_not_stored(tmp_path):
    cache = VerdictCache(tmp_path / "verdicts.sqlite")

    class Dead(SandboxSession):
        def run(self, files, *, timeout, last=False):
            return RunResult(exit_code=None, signal=None, timed_out=False, stdout="", stderr="gone", seconds=0.0,
                             extra={"proof": False, "sandbox_error": "the runner died"})

    class Box(Sandbox):
        name = "dead"
        environment_id = "dead-env"

        def open(self, paper):
            return Dead(self, paper)

    paper = load_problemset(PROBE_PSET).paper("probe")
    session = Box().open(PaperSpec.from_paper(paper))
    info = runner.reference_run(session, paper, timeout=30, store=cache)
    assert info["sandbox_error"] == "the runner died"
    key = runner._reference_store_key(("dead-env", runner._content_hash(paper)))
    assert cache.reference_get(key, failed_seconds=1e9) is None


def test_forgetting_reference_outcomes_makes_the_next_scoring_run_them(tmp_path, bwrap, monkeypatch):
    """A long-lived worker forgets the failed outcomes it believed (``reference_forget()``); the bench
    forgets them all (``passed=True``), so that each timed scoring makes its reference runs as a new
    process's first scoring does."""
    pset = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, pset)
    _new_process(monkeypatch)
    counting = _Counting(bwrap)
    assert [r.passed for r in run_tasks(_tasks(pset, ["return x * 2"]), sandbox=counting)] == [True]
    assert counting.reference_runs == 1
    assert runner.reference_forget() == 0  # a passing outcome is kept
    counting.reference_runs = 0
    run_tasks(_tasks(pset, ["return 2 * x"]), sandbox=counting)
    assert counting.reference_runs == 0
    assert runner.reference_forget(passed=True) == 1
    run_tasks(_tasks(pset, ["return x + x"]), sandbox=counting)
    assert counting.reference_runs == 1


def test_a_later_scoring_runs_the_papers_with_the_longest_runs_first(tmp_path, bwrap, monkeypatch):
    """Papers whose reference runs took longest (kept in the store) are run first by a later scoring,
    so that it ends on short runs, not on one long run holding a core while the others wait; a first
    scoring, knowing none, keeps the given order; the verdicts are the same in either order."""
    pset = tmp_path / "pset"
    shutil.copytree(ROOT / "demo", pset, ignore=shutil.ignore_patterns("predictions"))
    slow = pset / "minp-sampling" / "paper2code_test.py"  # the set's last paper: its runs made the longest
    slow.write_text("import time\ntime.sleep(1.0)\n" + slow.read_text())
    problems = load_problemset(pset)
    wanted = {"rope", "minp-sampling"}
    tasks = [Task(p, s, runner.reference_code(p, s)) for p, s in problems.snippets if p.id in wanted]
    tasks = [t for t in tasks if t.paper.id == "rope"][:2] + [t for t in tasks if t.paper.id == "minp-sampling"][:2]
    path = tmp_path / "verdicts.sqlite"

    def scoring() -> tuple[list[str], list[tuple]]:
        order: list[str] = []
        runs = run_tasks(tasks, sandbox=bwrap, workers=1, store=VerdictCache(path),
                         progress=lambda run: order.append(run.paper))
        return order, [(r.paper, r.snippet, r.passed, r.category) for r in runs]

    _new_process(monkeypatch)
    first_order, first = scoring()
    assert first_order == ["rope", "rope", "minp-sampling", "minp-sampling"]
    assert all(passed for _, _, passed, _ in first)
    _new_process(monkeypatch)  # a new worker: what it knows of the papers' runs comes from the store
    order = runner.longest_runs_first(tasks, list(range(len(tasks))), bwrap, VerdictCache(path))
    assert [tasks[i].paper.id for i in order] == ["minp-sampling", "minp-sampling", "rope", "rope"]
    later_order, later = scoring()
    assert later_order == ["minp-sampling", "minp-sampling", "rope", "rope"]
    assert later == first  # results in task order, verdicts unchanged
