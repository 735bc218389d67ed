"""Verdicts of every isolating backend equal a fresh process's, on the NumPy demo and on a torch set."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmark_core.predictions import parse_predictions
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, answer_code, reference_code, run_tasks
from benchmark_core.sandbox.base import PaperSpec, get_sandbox

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
TORCH_PSET = ROOT / "tests" / "data" / "torch_pset"


def _verdicts(runs):
    return [(r.paper, r.snippet, r.sample, r.passed, r.category) for r in runs]


def _fresh_and_warm(tasks, backend: str, timeout: float):
    """The runs of ``tasks`` in a fresh process each (local) and warm in ``backend``."""
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=timeout)
    sandbox = get_sandbox(backend)
    try:
        return fresh, run_tasks(tasks, sandbox=sandbox, workers=2, timeout=timeout)
    finally:
        sandbox.close()


@pytest.mark.slow
def test_verdicts_equal_a_fresh_process(sandbox_backend_name):
    """Warm, sandboxed runs judge the demo's imperfect predictions exactly like `python paper2code_test.py`."""
    pset = load_problemset(DEMO)
    predictions, problems = parse_predictions((DEMO / "predictions" / "demo-imperfect.jsonl").read_bytes(), pset)
    assert not problems
    index = {(p.paper, p.file, p.snippet): p for p in predictions}
    tasks = []
    for paper, snip in pset.snippets:
        pred = index.get((paper.id, snip.file, snip.name))
        tasks.append(Task(paper, snip, answer_code(paper, snip, pred.completion) if pred else None))
    fresh, warm = _fresh_and_warm(tasks, sandbox_backend_name, 20)
    assert _verdicts(warm) == _verdicts(fresh)
    assert 0 < sum(r.passed for r in warm) < len(warm)


@pytest.mark.slow
def test_torch_problem_set(sandbox_backend_name):
    pset = load_problemset(TORCH_PSET)
    sandbox = get_sandbox(sandbox_backend_name)
    ref = run_tasks([Task(p, s, reference_code(p, s)) for p, s in pset.snippets], sandbox=sandbox, timeout=300)
    assert all(r.passed for r in ref), [r.output_tail for r in ref if not r.passed]
    blank = run_tasks([Task(p, s, ()) for p, s in pset.snippets], sandbox=sandbox, timeout=300)
    assert not any(r.passed for r in blank)
    # the warm runner imported torch once, before forking
    paper = pset.paper("dyt")
    with sandbox.open(PaperSpec.from_paper(paper)) as session:
        assert "torch" in session.ready["preloaded"]
        assert "dyt" not in session.ready["preloaded"] and "dyt_ref" not in session.ready["preloaded"]
    sandbox.close()


@pytest.mark.slow
def test_a_paper_like_the_published_ones_judged_as_fresh(sandbox_backend_name, tmp_path):
    """A paper whose test imports scipy, pandas, matplotlib and ml_collections, reads data files and
    runs many cases (bench/make_pset.py "scientific"): the warm runner preloads the submodules the
    files name (scipy.stats, matplotlib.pyplot), and its verdicts still equal a fresh process's."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import make_pset

    make_pset.pset_write(tmp_path / "set", kind="realistic", work_ms=300, python=str(tmp_path / "no-python"))
    pset = load_problemset(tmp_path / "set", papers=["scientific_00"])
    tasks = []
    for n, (paper, snip) in enumerate(pset.snippets):
        ref = reference_code(paper, snip)
        wrong = tuple(line.replace("+", "-", 1) for line in ref)  # a wrong answer of the same shape
        tasks += [Task(paper, snip, ref), Task(paper, snip, wrong if n % 2 else ())]
    fresh, warm = _fresh_and_warm(tasks, sandbox_backend_name, 120)
    assert _verdicts(warm) == _verdicts(fresh)
    assert sum(r.passed for r in warm) >= len(pset.snippets)  # every reference passes
    assert not any(r.flags for r in warm if r.passed), [(r.snippet, r.flags) for r in warm if r.flags]
