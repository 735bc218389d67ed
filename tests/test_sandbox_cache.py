"""The verdict cache: identical re-scoring hits it, anything different misses, flaky papers never use it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmark_core.cache import VerdictCache, paper_content_hash
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, _cache_keys, run_tasks
from benchmark_core.sandbox.base import get_sandbox

ROOT = Path(__file__).resolve().parent.parent
PROBE_PSET = ROOT / "tests" / "probes" / "pset"


@pytest.fixture(scope="module")
def bwrap():
    sandbox = get_sandbox("bwrap")
    yield sandbox
    sandbox.close()


def _tasks(pset_dir: Path, bodies: list[str]) -> list[Task]:
    paper = load_problemset(pset_dir).paper("probe")
    snip = paper.snippet("solve")
    return [Task(paper, snip, ("    " + body,), sample=i) for i, body in enumerate(bodies)]


def _verdicts(runs):
    return [(r.sample, r.passed, r.category, r.exit_code) for r in runs]


def test_rescoring_identical_completions_hits_the_cache(tmp_path, bwrap):
    cache = VerdictCache(tmp_path / "verdicts.sqlite")
    bodies = ["return x * 2", "return x + 1", "return undefined_name"]
    first = run_tasks(_tasks(PROBE_PSET, bodies), sandbox=bwrap, cache=cache)
    assert not any(r.extra.get("cached") for r in first)
    again = run_tasks(_tasks(PROBE_PSET, bodies), sandbox=bwrap, cache=VerdictCache(tmp_path / "verdicts.sqlite"))
    assert all(r.extra.get("cached") for r in again)
    assert _verdicts(again) == _verdicts(first)
    assert [r.category for r in again] == [None, "logic", "name"]
    # a different completion is a miss; the others still hit
    changed = run_tasks(_tasks(PROBE_PSET, ["return x * 2", "return 2 * x"]), sandbox=bwrap, cache=cache)
    assert [bool(r.extra.get("cached")) for r in changed] == [True, False]
    assert changed[1].passed


def test_a_changed_paper_misses(tmp_path, bwrap):
    pset = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, pset)
    cache = VerdictCache(tmp_path / "verdicts.sqlite")
    run_tasks(_tasks(pset, ["return x * 2"]), sandbox=bwrap, cache=cache)
    before = paper_content_hash(pset / "probe")
    test = pset / "probe" / "paper2code_test.py"
    test.write_text(test.read_text().replace("solution_ref.solve(21))", "solution_ref.solve(21) + 1)"))
    assert paper_content_hash(pset / "probe") != before
    runs = run_tasks(_tasks(pset, ["return x * 2"]), sandbox=bwrap, cache=cache)
    assert not runs[0].extra.get("cached") and not runs[0].passed


def test_nondeterministic_papers_are_never_cached(tmp_path, bwrap):
    pset = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, pset)
    test = pset / "probe" / "paper2code_test.py"
    original = test.read_text()
    cache = VerdictCache(tmp_path / "verdicts.sqlite")
    # the test exits 3 on a coin flip. Each try is a new version of the paper (so a new determinism
    # check): its health gate's reference run passes with odds 1/2 (else no verdict is kept and nothing
    # is checked), then its two reference runs disagree with odds 1/2, so a try shows the paper
    # nondeterministic with odds 1/4; 40 tries none of which does: (3/4)^40, about 1e-5 (12 tries left
    # 3 %: it failed once under load, 2026-12-04)
    for attempt in range(40):
        test.write_text(original.replace(
            "import solution\n",
            f"import os\nimport solution\nif os.urandom(1)[0] % 2:  # try {attempt}\n    raise SystemExit(3)\n", 1))
        tasks = _tasks(pset, ["return x * 2"])
        _keys, paper_keys = _cache_keys(tasks, bwrap, 60.0)
        run_tasks(tasks, sandbox=bwrap, cache=cache)
        if cache.deterministic(paper_keys["probe"]) is False:
            break
    assert cache.deterministic(paper_keys["probe"]) is False
    again = run_tasks(_tasks(pset, ["return x * 2"]), sandbox=bwrap, cache=cache)
    assert not again[0].extra.get("cached")
    keys, _ = _cache_keys(_tasks(pset, ["return x * 2"]), bwrap, 60.0)
    assert cache.get(keys[0]) is None
