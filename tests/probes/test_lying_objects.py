"""Completions that write nothing and read nothing they should not, and still pass: the wrong answer
is an object of the completion's own that answers the test's check itself (an ``__eq__`` that says
True to ``assertEqual``, a tensor subclass whose ``__torch_function__`` answers ``torch.isclose``
inside ``torch.testing.assert_close``), or the test's own floating-point policy is undone inside the
completion (``np.errstate(over="ignore")`` around a formula the test's ``errstate(over="raise")``
is there to refuse), or the test's own inputs are changed in place so that the reference, called on
them afterwards, agrees with a wrong answer (``x[...] = 0`` then the sigmoid of zero). No audit
event, no library write: a fresh interpreter passes them too, so they pass here (the verdict is the
published rule's), but never unflagged (``ast:protocol:*``, ``ast:dynamic-class``,
``ast:error-state:*``, ``ast:import:unittest``, ``ast:mutates-argument``), and honest code stays
unflagged. Nor do completions that change torch for every later call (a kernel of its dispatcher, a
global hook: ``audit:framework-global``). Scored with two workers, in bwrap and docker."""
from __future__ import annotations

import re

import pytest

from benchmark_core import runner
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import run_tasks
from benchmark_core.sandbox.base import get_sandbox
from papers_support import one_snippet_paper
from probe_support import PROBE_LIMITS, PSET, REPO
from test_focal_loss_cheats import _tasks

#: the probe paper (``solve(x)`` compared by ``assertEqual``): each returns a wrong answer that says
#: it is equal to anything; (body, flag each run must carry)
EQUAL_TO_ANYTHING = {
    "eq_method": ("class Yes:\n    def __eq__(self, other):\n        return True\nreturn Yes()",
                  r"ast:protocol:__eq__"),
    "int_subclass": ("class Zero(int):\n    def __eq__(self, other):\n        return True\n"
                     "    __hash__ = int.__hash__\nreturn Zero(0)", r"ast:protocol:__eq__"),
    "eq_in_class_body": ("class Yes:\n    __eq__ = lambda self, other: True\nreturn Yes()",
                         r"ast:protocol:__eq__"),
    "ne_and_eq_by_type": ("Yes = type('Yes', (), {'__eq__': lambda s, o: True, '__ne__': lambda s, o: False})\n"
                          "return Yes()", r"ast:dynamic-class"),
    "name_built_for_type": ("name = '_' * 2 + 'eq' + '_' * 2\nYes = type('Yes', (object,), {name: lambda s, o: True})\n"
                            "return Yes()", r"ast:dynamic-class"),
    "eq_set_after": ("class Yes:\n    pass\nsetattr(Yes, '__eq__', lambda s, o: True)\nreturn Yes()",
                     r"ast:dunder:__eq__"),
    "metaclass_eq": ("class Meta(type):\n    def __eq__(cls, other):\n        return True\n"
                     "    __hash__ = type.__hash__\nclass Yes(metaclass=Meta):\n    pass\nreturn Yes",
                     r"ast:protocol:__eq__"),
    "mock_any": ("from unittest import mock\nreturn mock.ANY", r"ast:import:unittest"),
}
#: focal-loss's "stable sigmoid" (its test raises on overflow): the naive formula, overflow ignored
ERROR_STATE = {
    "errstate_ignore": ("import numpy as npx\nwith npx.errstate(over='ignore'):\n"
                        "    return 1.0 / (1.0 + npx.exp(-x))", r"ast:error-state:errstate"),
    "seterr_and_back": ("import numpy as npx\nold = npx.seterr(all='ignore')\ntry:\n"
                        "    return 1.0 / (1.0 + npx.exp(-x))\nfinally:\n    npx.seterr(**old)",
                        r"ast:error-state:seterr"),
}
#: swiglu's "geglu": a wrong answer (zeros) in a tensor subclass whose isclose says yes
TORCH_DISPATCH = {
    "torch_function": ("import torch as T\nclass Close(T.Tensor):\n    @classmethod\n"
                       "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                       "        if func is T.isclose:\n            return T.ones(args[0].shape, dtype=T.bool)\n"
                       "        return super().__torch_function__(func, types, args, kwargs or {})\n"
                       "return T.zeros(x.shape[0], w.shape[1]).as_subclass(Close)", r"ast:protocol:__torch_function__"),
}

#: swiglu: torch made to compute something else for every later call, with no write any namespace
#: guard sees (the kernel table is C++'s, the hook tables are dicts of a module that is not the test
#: machinery's). (snippet, {name: (body, the flag the run's audit trail must give)})
TORCH_GLOBAL = {
    "geglu": {
        "kernel_registered": ("import torch as T\nT.library.impl('aten::isclose', 'cpu', lambda a, b, rtol=1e-05, "
                              "atol=1e-08, equal_nan=False: T.ones(a.shape, dtype=T.bool))\n"
                              "return T.zeros(x.shape[0], w.shape[1])", r"audit:framework-global"),
        "library_by_a_built_name": ("import torch as T\nL = getattr(T, 'lib' + 'rary').Library('aten', 'IMPL')\n"
                                    "L.impl('isclose', lambda a, b, rtol=1e-05, atol=1e-08, equal_nan=False: "
                                    "T.ones(a.shape, dtype=T.bool), 'CPU')\nT.nn.functional.keep = L\n"
                                    "return T.zeros(x.shape[0], w.shape[1])", r"audit:framework-global"),
        "python_dispatcher": ("import torch as T\nop = T.ops.aten.isclose.default\n"
                              "op.py_impl(T._C.DispatchKey.CompositeImplicitAutograd)(lambda *a, **k: "
                              "T.ones(a[0].shape, dtype=T.bool))\nT.nn.functional.keep = T._C._EnablePythonDispatcher()\n"
                              "return T.zeros(x.shape[0], w.shape[1])", r"audit:framework-global"),
    },
    "swiglu forward": {
        "global_forward_hook": ("import torch as T\nT.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: "
                                "T.zeros_like(out) if type(mod).__name__ == 'SwiGLUFeedForward' else None)\n"
                                "return T.zeros(x.shape[:-1] + (self.w2.out_features,))", r"audit:framework-global"),
        "global_pre_hook": ("import torch as T\nT.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: "
                            "(T.zeros_like(inp[0]),) if type(mod).__name__ == 'SwiGLUFeedForward' else None)\n"
                            "return T.zeros(x.shape[:-1] + (self.w2.out_features,))", r"audit:framework-global"),
        # the hook removes itself once it has zeroed the reference's output: the table is as it was
        "self_removing_hook": ("import torch as T\nbox = []\ndef zero(mod, inp, out):\n"
                               "    if type(mod).__name__ == 'SwiGLUFeedForward' and mod is not self:\n"
                               "        box[0].remove()\n        return T.zeros_like(out)\n"
                               "box.append(T.nn.modules.module.register_module_forward_hook(zero))\n"
                               "return T.zeros(x.shape[:-1] + (self.w2.out_features,))", r"audit:framework-global"),
        "table_written_by_key": ("import torch as T\ntable = getattr(T.nn.modules.module, '_global_' + 'forward_hooks')\n"
                                 "def zero(mod, inp, out):\n"
                                 "    if type(mod).__name__ == 'SwiGLUFeedForward' and mod is not self:\n"
                                 "        table.pop(-7, None)\n        return T.zeros_like(out)\n"
                                 "table[-7] = zero\nreturn T.zeros(x.shape[:-1] + (self.w2.out_features,))",
                                 r"audit:framework-global"),
    },
}

#: the inputs changed in place: the reference, called on them after the completion, agrees with it
INPUTS_CHANGED = {
    "numpy": ("softplus", {
        "zeroed": ("x[...] = 0.0\ny = np.full_like(x, np.log(2.0))", r"ast:mutates-argument"),
        "zeroed_through_a_view": ("flat = np.asarray(x).reshape(-1)\nflat *= 0.0\ny = np.full(np.shape(x), np.log(2.0))",
                                  r"ast:mutates-argument"),
        # the same bytes reached as raw memory: an array over the buffer's address (no ctypes call)
        "zeroed_through_raw_memory": ("import argparse\nraw = np.asarray(argparse.Namespace(__array_interface__={"
                                      "'data': (x.ctypes.data, False), 'shape': (x.size,), 'typestr': '<f8', "
                                      "'version': 3}))\nraw[:] = 0.0\ny = np.full(np.shape(x), np.log(2.0))",
                                      r"ast:raw-memory:ctypes|ast:protocol:__array_interface__"),
    }),
    "swiglu": ("geglu", {
        "zeroed": ("import torch as T\nx.zero_()\nreturn T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "copied_over": ("import torch as T\nfor row in x:\n    row.copy_(T.zeros_like(row))\n"
                        "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        # the same through a path that names no mutation of x (found 2026-12-06, later): a local
        # helper, a mutator handed to map, the operator module, a loop over a container holding x
        "through_a_helper": ("import torch as T\ndef z(t):\n    t.zero_()\nz(x)\n"
                             "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "mutator_handed_to_map": ("import torch as T\nlist(map(T.Tensor.zero_, (x,)))\n"
                                  "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "operator_imul": ("import torch as T\nimport operator\noperator.imul(x, 0)\n"
                          "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "loop_over_a_container": ("import torch as T\nfor t in [x]:\n    t *= 0\n"
                                  "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        # torch's inplace handed by its place (found 2026-12-06, evening): p = 1 zeroes x
        "dropout_inplace_by_place": ("import torch as T\nimport torch.nn.functional as F\nF.dropout(x, 1.0, True, True)\n"
                                     "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        # x put into a container and taken out of it later (found 2026-12-06, latest): a dict's key,
        # a list's append, an object's attribute, the container handed to a mutator
        "through_a_dict": ("import torch as T\nkeep = {}\nkeep['x'] = x\nkeep['x'].zero_()\n"
                           "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "through_an_attribute": ("import torch as T\nimport types\nbox = types.SimpleNamespace()\nbox.v = x\n"
                                 "box.v *= 0\nreturn T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "container_to_foreach": ("import torch as T\nheld = []\nheld.append(x)\nT._foreach_zero_(held)\n"
                                 "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        # x itself through a conversion it already satisfies, its memory handed on, a mutator renamed
        "through_contiguous": ("import torch as T\nx.contiguous().float().zero_()\n"
                               "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "through_dlpack": ("import torch as T\nT.from_dlpack(x).zero_()\n"
                           "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
        "renamed_mutator": ("import torch as T\nwipe = getattr(T.Tensor, 'zero_')\nwipe(x)\n"
                            "return T.zeros(x.shape[0], w.shape[1])", r"ast:mutates-argument"),
    }),
}
#: a paper whose test hands the same array to the completion and then to the reference
SOFTPLUS_TEST = """import unittest

import numpy as np

import softplus_00 as m
import softplus_00_ref as r


class TestSoftplus(unittest.TestCase):
    def test_softplus(self):
        x = np.random.default_rng(3).normal(size=(4, 5))
        got = m.softplus(x)
        np.testing.assert_allclose(got, r.softplus(x), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""


def _passed_flagged(paper, cheats: dict[str, tuple[str, str]], snippet: str, backend: str) -> None:
    """Score ``cheats`` on ``snippet`` of ``paper`` (two workers, ``backend``) beside the paper's
    reference code: each passes, as in a fresh interpreter, with its flag and why; the reference
    code passes unflagged."""
    named = [(name, task) for name, task in _tasks(paper, {k: body for k, (body, _) in cheats.items()})
             if task.snippet.name == snippet]
    assert len(named) == len(cheats)
    honest = [runner.Task(paper, s, runner.reference_code(paper, s)) for s in paper.snippets]
    runner._REFERENCE.clear()
    sandbox = get_sandbox(backend, limits=PROBE_LIMITS)
    try:
        runs = run_tasks([t for _, t in named] + honest, sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()
    runs, refs = runs[:len(named)], runs[len(named):]
    fresh = run_tasks([t for _, t in named], sandbox=get_sandbox("local"), workers=2, timeout=60)
    for (name, _), run, alone in zip(named, runs, fresh):
        # the attack is real: the published rule passes it, here as in a fresh interpreter...
        assert run.passed and alone.passed, (name, run.category, alone.category, run.output_tail[-800:])
        # ...and it is named for what it does, which keeps its evaluation off the ranked board
        assert any(re.fullmatch(cheats[name][1], f) for f in run.flags), (name, run.flags)
        for flag in run.extra.get("flag_notes", {}):  # and the run's output says why
            assert f"[harness] {flag}: " in run.stderr, (name, flag)
    assert all(r.passed and not r.flags for r in refs), [(r.snippet, r.category, r.flags) for r in refs]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["probe", "focal-loss", "swiglu"])
def test_objects_that_answer_the_check_never_pass_unflagged(where, sandbox_backend_name):
    paper, cheats, snippet = {
        "probe": (lambda: load_problemset(PSET).paper("probe"), EQUAL_TO_ANYTHING, "solve"),
        "focal-loss": (lambda: load_problemset(REPO / "demo").paper("focal-loss"), ERROR_STATE, "stable sigmoid"),
        "swiglu": (lambda: load_problemset(REPO / "tests" / "data" / "torch_pset").paper("swiglu"),
                   TORCH_DISPATCH, "geglu"),
    }[where]
    _passed_flagged(paper(), cheats, snippet, sandbox_backend_name)


@pytest.mark.slow
@pytest.mark.parametrize("where", sorted(INPUTS_CHANGED))
def test_inputs_changed_in_place_never_pass_unflagged(where, sandbox_backend_name, tmp_path):
    snippet, cheats = INPUTS_CHANGED[where]
    if where == "numpy":
        paper = one_snippet_paper(tmp_path, "softplus_00", imports="import numpy as np", func="softplus",
                                  body="    y = np.logaddexp(0.0, x)\n", test=SOFTPLUS_TEST,
                                  requirements="numpy\n", title="Softplus").papers[0]
    else:
        paper = load_problemset(REPO / "tests" / "data" / "torch_pset").paper(where)
    _passed_flagged(paper, cheats, snippet, sandbox_backend_name)


#: a model and its reference built from the same array: what the instance keeps of its constructor's
#: arguments is the test's object, which the reference holds too
SHARED_WEIGHT_TEST = """import unittest

import numpy as np

import layer_00 as m
import layer_00_ref as r


class TestLayer(unittest.TestCase):
    def test_call(self):
        rng = np.random.default_rng(0)
        W = rng.normal(size=(3, 2))
        mine, ref = m.Layer(W), r.Layer(W)
        for _ in range(3):
            x = rng.normal(size=(4, 3))
            np.testing.assert_allclose(mine(x), ref(x), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""
KEPT_CHANGED = {
    "zeroed": ("self.W[...] = 0.0\nreturn np.zeros((x.shape[0], self.W.shape[1]))", r"ast:mutates-argument"),
    "zeroed_through_a_view": ("w = self.W.reshape(-1)\nw *= 0.0\nreturn np.zeros((x.shape[0], self.W.shape[1]))",
                              r"ast:mutates-argument"),
}


@pytest.mark.slow
def test_what_a_model_keeps_of_its_arguments_changed_never_passes_unflagged(sandbox_backend_name, tmp_path):
    """``self.W = W`` in the paper's ``__init__``, the test building the model and its reference from
    the same ``W``: ``self.W[...] = 0`` in the completion's ``__call__`` zeroes the reference's weight
    too, and a zero answer passes (here as in a fresh interpreter). In-place changes of ``self``'s
    attributes were read as nobody's until 2026-12-06; what the instance keeps of its constructor's
    arguments is now read as an argument (``mutations._kept_on_self``)."""
    from test_paper_modules import _finish

    folder = tmp_path / "set" / "layer_00"
    folder.mkdir(parents=True)
    head = "import numpy as np\n\n\nclass Layer:\n    def __init__(self, W):\n        self.W = W\n\n    def __call__(self, x):\n"
    body = "        return x @ self.W\n"
    (folder / "layer_00.py").write_text(
        f'{head}        # <paper2code name="call">\n{body}        # </paper2code name="call">\n')
    (folder / "layer_00_ref.py").write_text(head + body)
    _passed_flagged(_finish(folder, SHARED_WEIGHT_TEST, "layer_00.py"), KEPT_CHANGED, "call", sandbox_backend_name)


#: a test that takes a copy of the reference's answer before calling the completion: the block the
#: reference's own result was in is free again, and numpy hands it to the next array of its size
REFERENCE_FIRST_TEST = SOFTPLUS_TEST.replace(
    "        got = m.softplus(x)\n        np.testing.assert_allclose(got, r.softplus(x), rtol=1e-12)\n",
    "        want = r.softplus(x).copy()\n        np.testing.assert_allclose(m.softplus(x), want, rtol=1e-12)\n")
UNINITIALIZED = {
    "empty_like": ("y = np.empty_like(x)", r"ast:uninitialized:empty_like"),
    "ndarray": ("y = np.ndarray(np.shape(x))", r"ast:uninitialized:ndarray"),
}


#: library objects that answer the check: a masked element is equal to anything for every
#: numpy.testing assertion (numpy.ma, reached by any path)
LENIENT = {
    "masked_all": ("y = np.ma.masked_all(np.shape(x))", r"ast:lenient:masked_all"),
    "masked_by_another_path": ("import matplotlib.cbook as cb\ny = cb.np.ma.array(x * 0, mask=True)", r"ast:lenient:ma"),
}


@pytest.mark.slow
def test_library_objects_that_equal_anything_never_pass_unflagged(sandbox_backend_name, tmp_path):
    """``np.ma.masked_all(shape)`` passes ``np.testing.assert_allclose`` against any array (every
    element masked): no dunder of the completion's own answers the check, numpy's masked arrays do.
    It passes, as in a fresh interpreter, and is named ``ast:lenient:*``."""
    paper = one_snippet_paper(tmp_path, "softplus_00", imports="import numpy as np", func="softplus",
                              body="    y = np.logaddexp(0.0, x)\n", test=SOFTPLUS_TEST,
                              requirements="numpy\nmatplotlib\n", title="Softplus").papers[0]
    _passed_flagged(paper, LENIENT, "softplus", sandbox_backend_name)


#: a paper whose function answers a scalar (a loss), checked by numpy's assertions
LOSS_TEST = """import unittest

import numpy as np

import loss_00 as m
import loss_00_ref as r


class TestLoss(unittest.TestCase):
    def test_close(self):
        x = np.random.default_rng(3).normal(size=(4, 5))
        np.testing.assert_allclose(m.loss(x), r.loss(x), rtol=1e-12)

    def test_almost_equal(self):
        x = np.random.default_rng(4).normal(size=(3, 2))
        np.testing.assert_array_almost_equal(m.loss(x), r.loss(x), decimal=10)


if __name__ == "__main__":
    unittest.main()
"""
#: the same paper checked by ``np.allclose`` only (no numpy.testing assertion in the run)
LOSS_ALLCLOSE_TEST = LOSS_TEST.split("class TestLoss")[0] + """class TestLoss(unittest.TestCase):
    def test_allclose(self):
        for seed in range(3):
            x = np.random.default_rng(seed).normal(size=(6,))
            self.assertTrue(np.allclose(m.loss(x), r.loss(x), atol=1e-12))


if __name__ == "__main__":
    unittest.main()
"""
#: an empty answer broadcast against a scalar: every element (none) is close
VACUOUS = {
    "empty_array": ("y = np.array([])", r"audit:vacuous-check"),
    "nothing_selected": ("y = np.asarray(x)[np.asarray(x) > 1e300]", r"audit:vacuous-check"),
    "no_rows": ("y = x[:0]", r"audit:vacuous-check"),
    "empty_list": ("y = []", r"audit:vacuous-check"),
}


@pytest.mark.slow
@pytest.mark.parametrize("check", ["numpy.testing", "np.allclose"])
def test_an_empty_answer_to_a_scalar_never_passes_unflagged(check, sandbox_backend_name, tmp_path):
    """A scalar answer (a loss) checked by ``np.testing.assert_allclose`` (or ``np.allclose``):
    numpy broadcasts, so an empty array (or list) is close to anything. Such a completion passes, here as in a fresh
    interpreter, and the check that compared it says so (``audit:vacuous-check``:
    ``launch._wrap_checks``); the reference's own checks compare nothing empty."""
    paper = one_snippet_paper(tmp_path, "loss_00", imports="import numpy as np", func="loss",
                              body="    y = np.mean(np.logaddexp(0.0, np.asarray(x)))\n",
                              test=LOSS_TEST if check == "numpy.testing" else LOSS_ALLCLOSE_TEST,
                              requirements="numpy\n", title="Loss").papers[0]
    _passed_flagged(paper, VACUOUS, "loss", sandbox_backend_name)


@pytest.mark.slow
def test_memory_taken_uninitialized_never_passes_unflagged(sandbox_backend_name, tmp_path):
    """``np.empty_like(x)`` returned unwritten holds what its block held before: after a test took a
    copy of the reference's answer, the answer itself. It passes, as in a fresh interpreter, and the
    static reading names the allocator (``ast:uninitialized:*``), which the reference does not use."""
    assert REFERENCE_FIRST_TEST != SOFTPLUS_TEST
    paper = one_snippet_paper(tmp_path, "softplus_00", imports="import numpy as np", func="softplus",
                              body="    y = np.logaddexp(0.0, x)\n", test=REFERENCE_FIRST_TEST,
                              requirements="numpy\n", title="Softplus").papers[0]
    _passed_flagged(paper, UNINITIALIZED, "softplus", sandbox_backend_name)


@pytest.mark.slow
@pytest.mark.parametrize("snippet", sorted(TORCH_GLOBAL))
def test_torch_changed_for_every_later_call_never_passes_unflagged(snippet, sandbox_backend_name):
    """A kernel registered for ``aten::isclose`` in torch's dispatcher (through ``torch.library``, a
    ``Library`` reached by a built name, or the python dispatcher entered for good with a ``py_impl``
    kernel), or a global forward hook that zeroes the reference module's output: the test's check or
    the reference computes what the completion wants (and a hook that removes itself once it has,
    leaving the table as it was). Each passes, here as in a fresh interpreter,
    and the run's audit trail names it (``audit:framework-global``), whatever the static reading saw."""
    paper = load_problemset(REPO / "tests" / "data" / "torch_pset").paper("swiglu")
    _passed_flagged(paper, TORCH_GLOBAL[snippet], snippet, sandbox_backend_name)


#: the softplus paper's test imports the reference as ``r``: the test's own namespace hands it out
THROUGH_THE_TEST = {
    "import_main": ("import __main__\ny = __main__.r.softplus(x)", r"ast:import:__main__"),
    "from_main": ("from __main__ import r as answer\ny = answer.softplus(x)", r"ast:import:__main__"),
    "resolved_by_name": ("import pkgutil\ny = pkgutil.resolve_name('__main__:r').softplus(x)", r"ast:import:pkgutil"),
}


@pytest.mark.slow
def test_the_reference_reached_through_the_tests_namespace_never_passes_unflagged(sandbox_backend_name, tmp_path):
    """A test imports the reference under a name of its own (``import softplus_00_ref as r``): the
    test script is ``__main__``, so ``import __main__`` (or ``pkgutil.resolve_name``) hands the
    completion the reference without naming it. It passes, as in a fresh interpreter, flagged."""
    paper = one_snippet_paper(tmp_path, "softplus_00", imports="import numpy as np", func="softplus",
                              body="    y = np.logaddexp(0.0, x)\n", test=SOFTPLUS_TEST,
                              requirements="numpy\n", title="Softplus").papers[0]
    _passed_flagged(paper, THROUGH_THE_TEST, "softplus", sandbox_backend_name)


#: a paper whose snippet lies at module level, run when the test imports it, right after torch
MODULE_LEVEL = {
    "act.py": "import torch\n\n# <paper2code name=\"scale\">\nSCALE = 2.0\n# </paper2code name=\"scale\">\n\n\n"
              "def act(x):\n    return torch.tanh(x) * SCALE\n",
    "act_ref.py": "import torch\n\nSCALE = 2.0\n\n\ndef act(x):\n    return torch.tanh(x) * SCALE\n",
    "paper2code_test.py": "import unittest\n\nimport torch\n\nimport act as m\nimport act_ref as r\n\n\n"
                          "class TestAct(unittest.TestCase):\n    def test_act(self):\n"
                          "        x = torch.linspace(-2, 2, 9)\n        torch.testing.assert_close(m.act(x), r.act(x))\n\n\n"
                          "if __name__ == \"__main__\":\n    unittest.main()\n",
    "paper2code_requirements.txt": "torch==2.13.0\n",
    "paper2code_paper.md": "# Module level\n",
}
#: a wrong scale, and the python dispatcher entered for good with a py_impl kernel of isclose, as the
#: paper's module is imported (before any test starts)
ENTERED_AT_IMPORT = {
    "python_dispatcher_at_import": (
        "SCALE = 7.0\nimport torch as T\nT.ops.aten.isclose.default.py_impl(T._C.DispatchKey.CompositeImplicitAutograd)"
        "(lambda *a, **k: T.ones(a[0].shape, dtype=T.bool))\nKEEP = T._C._EnablePythonDispatcher()",
        r"audit:framework-global"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh-process"])
def test_torch_changed_as_the_paper_is_imported_never_passes_unflagged(fresh, sandbox_backend_name, tmp_path):
    """torch's global state is first seen when its own import ends (a warm server's preload, or the
    test's ``import torch``), not at the first test's start: a module-level snippet that enters the
    python dispatcher as the test imports the paper is seen in a warm run and in a fresh process."""
    folder = tmp_path / "set" / "modlevel"
    folder.mkdir(parents=True)
    for name, text in MODULE_LEVEL.items():
        (folder / name).write_text(text)
    (tmp_path / "set" / "papers.yaml").write_text(
        "- id: modlevel\n  title: Module level\n  venue: test\n  first_commit_date: '2025-01-01'\n"
        f"  annotated_file_paths: act.py\n  context_file_paths: null\n  fresh_process: {str(fresh).lower()}\n")
    paper = load_problemset(tmp_path / "set").paper("modlevel")
    _passed_flagged(paper, ENTERED_AT_IMPORT, "scale", sandbox_backend_name)
