"""Verdicts of every isolating backend equal a fresh process's, on the NumPy demo and on a torch set."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmark_core.predictions import parse_predictions
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, answer_code, reference_code, run_tasks
from benchmark_core.sandbox.base import PaperSpec, get_sandbox

from papers_support import SCIENTIFIC_REQUIREMENTS, one_snippet_paper

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


@pytest.mark.slow
def test_a_lazy_import_is_learned_and_judged_as_fresh(sandbox_backend_name, tmp_path):
    """issue 24: a paper whose test imports scipy.stats inside a test case (no scan sees it): the
    warm server learns it from the first run and imports it before forking the next spare; every
    verdict equals a fresh process's (the seconds are printed, not asserted)."""
    tasks, fresh = _right_wrong_right_blank(_lazy_paper(tmp_path), ("2.0", "3.0"))
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm) == _verdicts(fresh)
    assert [r.passed for r in warm] == [True, False, True, False]
    print(f"\n{sandbox_backend_name}: lazy scipy.stats, warm runs " + ", ".join(f"{r.seconds:.3f}" for r in warm)
          + " s (fresh " + ", ".join(f"{r.seconds:.3f}" for r in fresh) + " s)")


@pytest.mark.slow
def test_a_known_reference_still_teaches_its_imports(sandbox_backend_name, tmp_path):
    """issue 24: a session that believes a reference outcome kept by an earlier one (a worker's
    reference store, the verdict cache) makes no reference run, so it learns from the outcome kept:
    the reference run's imports are stored with it and told to the new runner; verdicts stay a
    fresh process's."""
    from benchmark_core import runner
    from benchmark_core.cache import VerdictCache

    pset = _lazy_paper(tmp_path)
    (paper, snip), = pset.snippets
    ref = reference_code(paper, snip)
    tasks = [Task(paper, snip, ref), Task(paper, snip, ()), Task(paper, snip, ref), Task(paper, snip, ref)]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)
    store = VerdictCache(tmp_path / "references.sqlite")
    with runner._REFERENCE_LOCK:
        runner._REFERENCE.clear()  # a process that never ran this paper (another test of this file did)
    sandbox = get_sandbox(sandbox_backend_name)
    try:
        first = run_tasks(tasks, sandbox=sandbox, workers=1, timeout=120, store=store)
    finally:
        sandbox.close()
    sandbox = get_sandbox(sandbox_backend_name)
    try:
        # the reference's background thread stores it just after this process believes it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not store._db.execute("SELECT 1 FROM reference").fetchone():
            time.sleep(0.1)
        with runner._REFERENCE_LOCK:
            runner._REFERENCE.clear()  # as another worker process: only the store knows it
        known = runner.reference_known(sandbox, paper, store=store)
        assert known is not None and "scipy.stats" in known["modules"]
        second = run_tasks(tasks, sandbox=sandbox, workers=1, timeout=120, store=store)
    finally:
        sandbox.close()
    assert _verdicts(first) == _verdicts(second) == _verdicts(fresh)
    learned = [int(r.extra.get("learned") or 0) for r in second]
    assert max(learned) > 0, learned  # no reference run here, yet the later runs had scipy.stats
    print(f"\n{sandbox_backend_name}: learned imports a run had, from the kept reference: {learned}; seconds "
          + ", ".join(f"{r.seconds:.3f}" for r in second))


def _warm(tasks, backend: str):
    """The runs of ``tasks`` in a new sandbox of ``backend``, one at a time."""
    sandbox = get_sandbox(backend)
    try:
        return run_tasks(tasks, sandbox=sandbox, workers=1, timeout=120)
    finally:
        sandbox.close()


def _right_wrong_right_blank(pset, swap: tuple[str, str]):
    """The one snippet of ``pset`` answered right, wrong (``swap`` applied to the reference), right and
    blank; and those tasks' verdicts in a fresh process each."""
    (paper, snip), = pset.snippets
    ref = reference_code(paper, snip)
    wrong = tuple(line.replace(*swap) for line in ref)
    tasks = [Task(paper, snip, ref), Task(paper, snip, wrong), Task(paper, snip, ref), Task(paper, snip, ())]
    return tasks, run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)


def _lazy_paper(tmp_path: Path):
    """A paper whose test imports scipy.stats inside its test cases (no scan sees it)."""
    return one_snippet_paper(
        tmp_path, "lazy_00", imports="import numpy as np", func="scale", body="    y = np.asarray(x) * 2.0\n",
        test="import unittest\n\nimport numpy as np\n\nimport lazy_00 as m\nimport lazy_00_ref as r\n\n\n"
        "class TestLazy(unittest.TestCase):\n"
        "    def test_scale(self):\n"
        "        np.testing.assert_allclose(m.scale(np.arange(8.0)), r.scale(np.arange(8.0)))\n\n"
        + "".join(f"    def test_k{i}(self):\n        from scipy import stats\n\n"
                  f"        x = np.arange({8 + i}.0) ** 2\n"
                  "        self.assertAlmostEqual(float(stats.kurtosis(m.scale(x))), float(stats.kurtosis(r.scale(x))))\n\n"
                  for i in range(3))
        + 'if __name__ == "__main__":\n    unittest.main()\n',
        # the scientific papers' environment (bench/make_pset.py): one that has scipy
        requirements=SCIENTIFIC_REQUIREMENTS, title="A lazy paper")


def _forgetful_paper(tmp_path: Path):
    """A paper of the scientific environment (none of whose libraries imports ``unittest.mock``) whose
    files import ``unittest`` and never ``unittest.mock``."""
    return one_snippet_paper(
        tmp_path, "forget_00", imports="import unittest\n\nimport numpy as np", func="twice",
        body="    y = np.asarray(x) * 2.0\n",
        test="import unittest\n\nimport numpy as np\n\nimport forget_00 as m\nimport forget_00_ref as r\n\n\n"
        "class TestTwice(unittest.TestCase):\n"
        "    def test_twice(self):\n"
        "        np.testing.assert_allclose(m.twice(np.arange(6.0)), r.twice(np.arange(6.0)))\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n',
        requirements=SCIENTIFIC_REQUIREMENTS, title="A forgetful paper")


@pytest.mark.slow
def test_a_submodule_no_run_imported_is_not_reachable_from_its_package(sandbox_backend_name, tmp_path):
    """A completion that uses ``unittest.mock`` having imported only ``unittest`` fails in a fresh
    interpreter (the package does not import that submodule: AttributeError), so it fails here too:
    the warm parent preloads no submodule that the environment's libraries and the paper's files do
    not import (a preloaded submodule is an attribute of its package in every fork)."""
    tasks, fresh = _right_wrong_right_blank(
        _forgetful_paper(tmp_path), ("y = np.asarray(x)", "y = unittest.mock.DEFAULT and np.asarray(x)"))
    assert [r.passed for r in fresh] == [True, False, True, False]
    assert "has no attribute 'mock'" in fresh[1].output_tail
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm) == _verdicts(fresh)
    assert "has no attribute 'mock'" in warm[1].output_tail, warm[1].output_tail[-400:]


@pytest.mark.slow
def test_a_completion_importing_asyncio_is_judged_as_fresh(sandbox_backend_name, tmp_path):
    """asyncio's module body makes code under its own file name (``types.coroutine``): a library's
    own import, which once made an honest completion importing asyncio (or unittest.mock, which
    imports it) fail here as tampering:code-spoof while it passed in a fresh interpreter."""
    (pset_paper, snip), = _forgetful_paper(tmp_path).snippets
    ref = reference_code(pset_paper, snip)
    indent = ref[0][:len(ref[0]) - len(ref[0].lstrip())]
    tasks = [Task(pset_paper, snip, (indent + "import asyncio",) + ref),
             Task(pset_paper, snip, (indent + "import unittest.mock",) + ref),
             Task(pset_paper, snip, (indent + "import asyncio",) + tuple(l.replace("* 2.0", "* 3.0") for l in ref))]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)
    assert [r.passed for r in fresh] == [True, True, False]
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm) == _verdicts(fresh), [(r.category, r.flags, r.output_tail[-300:]) for r in warm]
    assert warm[0].flags == [] and warm[1].flags == ["ast:import:unittest"], [r.flags for r in warm]


@pytest.mark.slow
def test_a_completion_registering_hooks_on_its_own_module_is_judged_as_fresh(sandbox_backend_name):
    """Every hook torch registers bumps a counter of its handle class (``RemovableHandle.next_id``):
    an honest completion hooking its own module (or a tensor of its own) once failed here as
    tampering:patch while it passed in a fresh interpreter. A wrong answer that does the same still fails."""
    paper = load_problemset(TORCH_PSET).paper("swiglu")
    snip = paper.snippet("swiglu forward")
    hooked = ("        seen = []", "        h = self.w.register_forward_hook(lambda m, i, o: seen.append(o.shape))",
              "        gate = swish(self.w(x))", "        h.remove()",
              "        if gate.requires_grad:", "            gate.register_hook(lambda g: g)",
              "        return self.w2(gate * self.v(x))")
    wrong = hooked[:-1] + ("        return self.w2(gate + self.v(x))",)
    tasks = [Task(paper, snip, hooked), Task(paper, snip, wrong), Task(paper, snip, reference_code(paper, snip))]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)
    assert [r.passed for r in fresh] == [True, False, True]
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm) == _verdicts(fresh), [(r.category, r.flags, r.output_tail[-300:]) for r in warm]
    assert warm[0].flags == [] and warm[2].flags == [], [r.flags for r in warm]


@pytest.mark.slow
def test_a_completion_setting_torchs_default_dtype_is_judged_as_fresh(sandbox_backend_name):
    """``torch.set_default_dtype`` makes torch's C code rebind ``torch.Storage`` (to
    ``torch.DoubleStorage``): a completion calling it where the reference does not failed here as
    tampering:patch while it passed in a fresh interpreter. It is the setting changed, state
    (``audit:library-state``: a default dtype can loosen the test's tolerances, so the run is kept
    for review); ``torch.Storage`` bound to anything else, or by the completion itself, is still a patch."""
    paper = load_problemset(TORCH_PSET).paper("swiglu")
    snip = paper.snippet("geglu")
    right = "    return torch.nn.functional.gelu(x @ w) * (x @ v)"
    tasks = [Task(paper, snip, ("    torch.set_default_dtype(torch.float64)", right)),
             Task(paper, snip, ("    torch.set_default_tensor_type(torch.DoubleTensor)", right)),
             Task(paper, snip, ("    torch.set_default_dtype(torch.float64)",
                                "    return torch.nn.functional.gelu(x @ v) * (x @ w)")),
             Task(paper, snip, ("    torch.Storage = torch.DoubleStorage", right)),
             Task(paper, snip, ("    vars(torch)['Storage'] = list", right))]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)
    assert [r.passed for r in fresh] == [True, True, False, True, True]
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm[:3]) == _verdicts(fresh[:3]), [(r.category, r.flags, r.output_tail[-300:]) for r in warm]
    assert warm[0].flags == ["audit:library-state"] and warm[1].flags == ["audit:library-state"], [r.flags for r in warm]
    # a passing run kept for review says why, for the reviewer: in the results and in its output
    assert "torch.Storage" in warm[0].extra["flag_notes"]["audit:library-state"], warm[0].extra
    assert "[harness] audit:library-state: " in warm[0].output_tail, warm[0].output_tail[-400:]
    assert [r.category for r in warm[3:]] == ["tampering", "tampering"], [(r.category, r.flags) for r in warm]
    assert all("tampering:patch" in r.flags for r in warm[3:]), [r.flags for r in warm]


@pytest.mark.slow
def test_a_completion_whose_first_use_imports_a_library_is_judged_as_fresh(sandbox_backend_name):
    """``torch.func.grad`` and ``torch.utils.checkpoint`` import ``torch._dynamo`` at their first use,
    and its import rebinds ``torch.manual_seed`` and gives a class of ``torch.compiler`` properties:
    a completion using them where the reference does not failed here as tampering:patch while it
    passed in a fresh interpreter. Such an import is the library's own (``audit._audit_import_window``);
    a wrong answer using them still fails, and a patch the completion made before the import is
    still a patch."""
    paper = load_problemset(TORCH_PSET).paper("swiglu")
    snip = paper.snippet("geglu")
    grad = "    _ = torch.func.grad(lambda a: (a * a).sum())(torch.ones(3))"
    tasks = [Task(paper, snip, (grad, "    return torch.nn.functional.gelu(x @ w) * (x @ v)")),
             Task(paper, snip, ("    from torch.utils.checkpoint import checkpoint",
                                "    return checkpoint(lambda a, b, c: torch.nn.functional.gelu(a @ b) * (a @ c), x, w, v,"
                                " use_reentrant=False)")),
             Task(paper, snip, (grad, "    return torch.nn.functional.gelu(x @ v) * (x @ w)")),
             Task(paper, snip, ("    torch.testing.__dict__['assert_close'] = lambda *a, **k: None", grad,
                                "    return torch.zeros(x.shape[0], w.shape[1])"))]
    fresh = run_tasks(tasks[:3], sandbox=get_sandbox("local"), workers=1, timeout=180)
    assert [r.passed for r in fresh] == [True, True, False]
    warm = _warm(tasks, sandbox_backend_name)
    assert _verdicts(warm[:3]) == _verdicts(fresh), [(r.category, r.flags, r.output_tail[-300:]) for r in warm]
    assert not any(f.startswith("tampering:") for r in warm[:3] for f in r.flags), [r.flags for r in warm]
    # the window opens inside torch.func.grad, its functorch layer pushed: torch's thread-local keys
    # read there are the call's, not a state the completion left (it was audit:framework-global)
    assert "audit:framework-global" not in warm[0].flags, warm[0].extra.get("flag_notes")
    assert warm[3].category == "tampering" and "tampering:patch" in warm[3].flags, (warm[3].category, warm[3].flags)


def _threads_paper(root: Path):
    """A torch paper whose test prints the threads its run was given, then checks a product."""
    return one_snippet_paper(
        root, "threads_00", imports="import torch", func="gram", body="    y = x @ x.T\n",
        test="import os\nimport unittest\n\nimport torch\n\nimport threads_00 as m\nimport threads_00_ref as r\n\n\n"
        "class TestGram(unittest.TestCase):\n"
        "    def test_gram(self):\n"
        "        print(f'threads={torch.get_num_threads()} omp={os.environ.get(\"OMP_NUM_THREADS\")}', flush=True)\n"
        "        x = torch.randn(384, 384, generator=torch.Generator().manual_seed(3))\n"
        "        torch.testing.assert_close(m.gram(x), r.gram(x))\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n',
        requirements="torch\n", title="Threads")


@pytest.mark.slow
def test_runs_share_the_cores_by_the_runs_in_flight(sandbox_backend_name, tmp_path):
    """issue 24: a compute-heavy run never oversubscribes the cores: each run's BLAS/OpenMP/torch
    threads are the cores shared by the runs the scheduler has in flight (one worker on two cores:
    two threads a run; two workers: one each), and its verdicts equal a fresh process's."""
    from benchmark_core.sandbox.base import threads_per_run

    tasks, fresh = _right_wrong_right_blank(_threads_paper(tmp_path), ("x @ x.T", "x.T @ x"))
    # (one worker given one core: a site worker's share when two share two cores, scoring.evaluate)
    for workers, cores in ((1, None), (2, None), (1, 1)):
        sandbox = get_sandbox(sandbox_backend_name)
        try:
            warm = run_tasks(tasks, sandbox=sandbox, workers=workers, timeout=120, cores=cores)
        finally:
            sandbox.close()
        assert _verdicts(warm) == _verdicts(fresh)
        assert [r.passed for r in warm] == [True, False, True, False]
        given = threads_per_run(workers, cores)
        for run in warm[:3]:  # (the blank never reaches its test)
            assert f"threads={given} " in run.stdout, (workers, run.stdout[-300:])
            assert f"omp={given if given > 1 else 1}" in run.stdout, run.stdout[-300:]
        print(f"\n{sandbox_backend_name}, {workers} worker(s): {given} thread(s) a run")
