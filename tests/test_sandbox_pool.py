"""The warm pool (sandbox/pool.py): a paper scored again reuses its warm runner; a changed paper, an idle
expiry, the count and the memory bound each close or replace it; verdicts equal the unpooled ones."""
from __future__ import annotations

import shutil
from pathlib import Path

import psutil
import pytest

from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, run_tasks
from benchmark_core.sandbox.base import PaperSpec, get_sandbox
from benchmark_core.sandbox.pool import SandboxPool, session_memory_bytes

ROOT = Path(__file__).resolve().parent.parent
PROBE_PSET = ROOT / "tests" / "probes" / "pset"

pytestmark = pytest.mark.bwrap


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pset(tmp_path):
    shutil.copytree(PROBE_PSET, tmp_path / "pset")
    shutil.copytree(PROBE_PSET / "probe", tmp_path / "pset" / "other")
    (tmp_path / "pset" / "papers.yaml").write_text(
        (PROBE_PSET / "papers.yaml").read_text() + "\n" + (PROBE_PSET / "papers.yaml").read_text().replace(
            "probe", "other"))
    return tmp_path / "pset"


def _spec(pset: Path, paper: str = "probe") -> PaperSpec:
    return PaperSpec.from_paper(load_problemset(pset).paper(paper))


def _tasks(pset: Path, bodies: list[str]) -> list[Task]:
    paper = load_problemset(pset).paper("probe")
    snip = paper.snippet("solve")
    return [Task(paper, snip, ("    " + body,), sample=i) for i, body in enumerate(bodies)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_paper_opened_again_reuses_its_warm_runner_until_it_idles_out(pset):
    clock = Clock()
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), idle_seconds=60, clock=clock, reaper=False)
    try:
        with pool.open(_spec(pset)) as first:
            pid = first.server_pid
            assert first.run({}, timeout=60).exit_code == 0
        assert _alive(pid) and len(pool) == 1
        with pool.open(_spec(pset)) as again:
            assert again.server_pid == pid
            assert again.run({}, timeout=60).exit_code == 0
        assert pool.opened == 1
        clock.now += 59
        assert pool.prune() == 0 and _alive(pid)
        clock.now += 2
        assert pool.prune() == 1 and len(pool) == 0
        assert not _alive(pid)
        with pool.open(_spec(pset)) as fresh:
            assert fresh.server_pid != pid
        assert pool.opened == 2
    finally:
        pool.close()


def test_a_changed_paper_gets_a_new_runner(pset):
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), reaper=False)
    try:
        with pool.open(_spec(pset)) as first:
            pid = first.server_pid
        (pset / "probe" / "solution_ref.py").write_text(
            (pset / "probe" / "solution_ref.py").read_text() + "\n# a new version\n")
        with pool.open(_spec(pset)) as second:
            assert second.server_pid != pid
        assert pool.opened == 2
    finally:
        pool.close()


def test_count_and_memory_bounds_close_the_least_recently_used(pset):
    clock = Clock()
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), max_sessions=1, clock=clock, reaper=False)
    try:
        a = pool.open(_spec(pset, "probe"))
        b = pool.open(_spec(pset, "other"))
        pid_a, pid_b = a.server_pid, b.server_pid
        assert len(pool) == 2  # both in use: over the count, but nothing idle to close
        a.close()
        b.close()
        # a went back while b was in use: it is the one closed
        assert len(pool) == 1 and not _alive(pid_a) and _alive(pid_b)
    finally:
        pool.close()
    assert not _alive(pid_b)

    tight = SandboxPool(get_sandbox("bwrap", shared_parent=False), memory_mb=1, reaper=False)
    try:
        with tight.open(_spec(pset)) as session:
            assert session_memory_bytes(session.inner) > 1024 * 1024  # a warm interpreter holds more than 1 MB
            pid = session.server_pid
        assert len(tight) == 0 and not _alive(pid)
    finally:
        tight.close()


def test_memory_is_measured_at_each_open_and_at_most_every_few_seconds_as_sessions_come_back(pset, monkeypatch):
    from benchmark_core.sandbox import pool as pool_module

    measures = []
    real = pool_module.sessions_memory_bytes
    monkeypatch.setattr(pool_module, "sessions_memory_bytes", lambda sessions: measures.append(1) or real(sessions))
    clock = Clock()
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), memory_mb=64 * 1024, clock=clock, reaper=False,
                       memory_check_seconds=5.0)
    try:
        pool.open(_spec(pset)).close()
        assert len(measures) == 1  # the open measured; the give-back right after used that measure
        for _ in range(5):
            pool.open(_spec(pset)).close()  # warm: no new session, nothing new to count
        assert len(measures) == 1
        clock.now += 5.0
        pool.open(_spec(pset)).close()
        assert len(measures) == 2  # the measure was old
        pool.open(_spec(pset, "other")).close()
        assert len(measures) == 3  # a new session is always counted
        assert len(pool) == 2
    finally:
        pool.close()


def test_scorings_through_the_pool_share_a_runner_and_give_the_same_verdicts(pset):
    plain = get_sandbox("bwrap")
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), reaper=False)
    try:
        bodies = ["return x * 2", "return x + 1", "return undefined_name"]
        expected = [(r.passed, r.category) for r in run_tasks(_tasks(pset, bodies), sandbox=plain)]
        for _ in range(2):
            runs = run_tasks(_tasks(pset, bodies), sandbox=pool)
            assert [(r.passed, r.category) for r in runs] == expected == [(True, None), (False, "logic"),
                                                                          (False, "name")]
        assert pool.opened == 1 and len(pool) == 1
    finally:
        pool.close()
        plain.close()


def _endless_then_stop(pset, sandbox) -> tuple[list, list]:
    """A quick task and an endless one (10 minutes of timeout) in parallel; the quick one's result
    sets ``stop``. Returns (the results, what progress saw); a stop that did not end the endless
    run would keep run_tasks for its whole timeout."""
    import threading

    stop = threading.Event()
    seen = []

    def progress(run):
        seen.append(run)
        stop.set()

    tasks = _tasks(pset, ["import time; time.sleep(0.5); return x * 2", "while True: pass"])
    done: list = []
    caller = threading.Thread(target=lambda: done.append(
        run_tasks(tasks, sandbox=sandbox, workers=2, timeout=600, progress=progress, stop=stop)), daemon=True)
    caller.start()
    caller.join(180)  # a liveness bound (the endless run's timeout is 600 s), not a timing assertion
    assert done, "run_tasks went on after stop was set"
    return done[0], seen


def test_a_stop_ends_the_running_tests_and_discards_the_pooled_runner(pset):
    pool = SandboxPool(get_sandbox("bwrap", shared_parent=False), reaper=False)
    try:
        with pool.open(_spec(pset)) as warm:
            pid = warm.server_pid
        runs, seen = _endless_then_stop(pset, pool)
        # the quick one was reported and returned; the endless one was ended, neither reported nor returned
        assert [(r.sample, r.passed) for r in runs] == [(r.sample, r.passed) for r in seen] == [(0, True)]
        # its runner (with the endless test in it) is gone, not given back to the pool
        assert len(pool) == 0 and not _alive(pid)
        assert run_tasks(_tasks(pset, ["return x * 2"]), sandbox=pool)[0].passed
        assert pool.opened == 2
    finally:
        pool.close()


def test_a_stop_ends_the_running_tests_of_a_plain_sandbox(pset):
    plain = get_sandbox("bwrap")
    try:
        runs, seen = _endless_then_stop(pset, plain)
        assert [(r.sample, r.passed) for r in runs] == [(r.sample, r.passed) for r in seen] == [(0, True)]
    finally:
        plain.close()


def test_shared_processes_count_once_against_the_memory_bound(pset):
    """Sessions served by one warm parent report the same parent process: counted once, not per session."""
    from benchmark_core.sandbox.pool import sessions_memory_bytes

    shared = get_sandbox("bwrap")  # one warm parent per environment
    try:
        with shared.open(_spec(pset, "probe")) as a, shared.open(_spec(pset, "other")) as b:
            assert a.run({}, timeout=60).exit_code == 0 and b.run({}, timeout=60).exit_code == 0
            assert a.server_pid == b.server_pid
            one = sessions_memory_bytes([a])
            assert one > 1024 * 1024 and sessions_memory_bytes([a, b]) < 1.5 * one
    finally:
        shared.close()
