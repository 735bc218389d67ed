"""A module of the paper's own that both the completion's file and its reference import (``helpers``
beside ``act_00`` and ``act_00_ref``): a completion that changes it changes what the reference
computes, and its wrong answer agrees with the reference's. ``helpers.act = lambda v: v * 0``, a
constant, a class attribute, a table's entry, an array's contents: each passed, here as in a fresh
interpreter, with no flag until 2026-12-06 (the library guard watched the environment's modules and
the ``*_ref`` modules only). The guard now watches the paper's modules too, and such a change the
reference run did not make is ``audit:paper-module``; the static reading names what the completion
changes in place there (``ast:mutates-module``: an array's contents, which no guard sees). Both are
review flags. What the completion does in its own module
(whose code is its own, which the reference does not import), what the test writes into a module
of the paper, and a table the paper's code fills as it runs, stay unflagged. Scored with two
workers, in bwrap and docker."""
from __future__ import annotations

import pytest

from benchmark_core import runner
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import run_tasks
from benchmark_core.sandbox.base import get_sandbox
from probe_support import PROBE_LIMITS
from test_focal_loss_cheats import _tasks

HELPERS = """import numpy as np

SCALE = 2.0
VERBOSE = 0
_CALLS = {}  # filled by the paper's own code as it runs


def act(v):
    _CALLS["act"] = _CALLS.get("act", 0) + 1
    return np.tanh(v)


class Cfg:
    gain = 3.0


TABLE = {"gain": 1.5}
WEIGHTS = np.ones(3)
"""
BODY = "    y = helpers.act(x) * helpers.SCALE * helpers.Cfg.gain * helpers.TABLE['gain'] * helpers.WEIGHTS.sum()\n"
TEST = """import unittest

import numpy as np

import act_00 as m
import act_00_ref as r
import helpers


class TestAct(unittest.TestCase):
    def test_f(self):
        for seed in range(3):
            helpers.VERBOSE = seed  # the test writes a module of the paper: so does the reference run's
            x = np.random.default_rng(seed).normal(size=(4, 3))
            np.testing.assert_allclose(m.f(x), r.f(x), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""
#: wrong answers (zeros) made right by changing what the reference reads in ``helpers``: (body, the
#: flags the run must carry: the guard's, the static reading's)
RUN, READ = "audit:paper-module", "ast:mutates-module"
CHEATS = {
    "function": ("helpers.act = lambda v: v * 0\ny = np.zeros_like(x)", {RUN, READ}),
    "constant": ("helpers.SCALE = 0.0\ny = np.zeros_like(x)", {RUN, READ}),
    "class_attribute": ("helpers.Cfg.gain = 0.0\ny = np.zeros_like(x)", {RUN, READ}),
    "table_entry": ("helpers.TABLE['gain'] = 0.0\ny = np.zeros_like(x)", {RUN, READ}),
    "setattr_literal": ("setattr(helpers, 'SCALE', 0.0)\ny = np.zeros_like(x)", {RUN}),
    "class_imported": ("from helpers import Cfg\nCfg.gain = 0\ny = np.zeros_like(x)", {RUN, READ}),
    "module_alias": ("import helpers as h\nh.SCALE = 0\ny = np.zeros_like(x)", {RUN, READ}),
    # an array's contents: no name rebound, no table written (the guard does not see it)
    "array_in_place": ("helpers.WEIGHTS[:] = 0\ny = np.zeros_like(x)", {READ}),
    "array_through_a_view": ("w = helpers.WEIGHTS.reshape(-1)\nw *= 0\ny = np.zeros_like(x)", {READ}),
}
#: honest: the reference's lines; the same with a global of the completion's own module written
HONEST = {
    "reference": BODY.strip(),
    "own_module_global": "global _seen\n_seen = float(np.sum(x))\n" + BODY.strip(),
}


def _paper(root):
    folder = root / "set" / "act_00"
    folder.mkdir(parents=True)
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "act_00.py").write_text("import numpy as np\n\nimport helpers\n\n\ndef f(x):\n"
                                      f'    # <paper2code name="f">\n{BODY}    # </paper2code name="f">\n    return y\n')
    (folder / "act_00_ref.py").write_text(f"import numpy as np\n\nimport helpers\n\n\ndef f(x):\n{BODY}    return y\n")
    return _finish(folder, TEST, "act_00.py")


def _finish(folder, test: str, annotated: str):
    """The paper in ``folder`` (its code written) with ``test``, numpy, its set's papers.yaml."""
    (folder / "paper2code_test.py").write_text(test)
    (folder / "requirements.txt").write_text("numpy\n")
    (folder / "paper2code_paper.md").write_text(f"# {folder.name}\n")
    (folder.parent / "papers.yaml").write_text(
        f"- id: {folder.name}\n  title: {folder.name}\n  venue: test\n  first_commit_date: '2025-01-01'\n"
        f"  annotated_file_paths: {annotated}\n  context_file_paths: null\n")
    return load_problemset(folder.parent).papers[0]



def _score(named: list, backend: str) -> list:
    """The runs of ``named`` tasks beside the paper's reference run (made anew), two workers."""
    runner._REFERENCE.clear()
    sandbox = get_sandbox(backend, limits=PROBE_LIMITS)
    try:
        return run_tasks([t for _, t in named], sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()

@pytest.mark.slow
def test_a_module_the_reference_imports_changed_never_passes_unflagged(sandbox_backend_name, tmp_path):
    paper = _paper(tmp_path)
    named = _tasks(paper, {**{k: body for k, (body, _) in CHEATS.items()}, **HONEST})
    runs = _score(named, sandbox_backend_name)
    fresh = run_tasks([t for _, t in named], sandbox=get_sandbox("local"), workers=2, timeout=60)
    for (name, _), run, alone in zip(named, runs, fresh):
        # the verdict is the published rule's: each passes, as in a fresh interpreter
        assert run.passed and alone.passed, (name, run.category, alone.category, run.output_tail[-800:])
        if name in CHEATS:
            assert CHEATS[name][1] <= set(run.flags), (name, run.flags)
            for flag in CHEATS[name][1]:  # and the reviewer reads why
                assert f"[harness] {flag}: " in run.stderr, (name, flag)
        else:
            assert not {RUN, READ} & set(run.flags), (name, run.flags)
    assert dict(zip([n for n, _ in named], [r.flags for r in runs]))["reference"] == []


def test_the_host_reads_which_module_an_event_is_about():
    """``tamper.audit_verdict``: the guard reports a module of the paper's under ``paper:<its file>``
    (whatever name the test imported it under); such an event is ``audit:paper-module`` (a class of
    it too), about the completion's own file nothing, about a library or a ``*_ref`` module what it
    was (``tampering:patch``), and a library module put in ``sys.modules`` under a ``paper:`` name
    is reported as ``?paper:...``, a library's."""
    from benchmark_core.tamper import audit_verdict, module_of_file

    assert [module_of_file(p) for p in ("model.py", "pkg/model.py", "pkg/__init__.py", "./x.py")] == [
        "model", "pkg.model", "pkg", "x"]

    def verdict(*details, event="rcb.attr"):
        trail = {"events": [{"event": event, "detail": d, "caller": "test"} for d in details]}
        return audit_verdict(trail, {"events": []}, "pkg/model.py")[:2]

    assert verdict("paper:pkg/model.py.f changed", "paper:pkg/model.py.Net.scale changed") == ([], [])  # its own
    assert verdict("paper:./pkg/model.py.f changed") == ([], [])  # one spelling of the path
    assert verdict("paper:helpers.py.act changed") == ([], ["audit:paper-module"])
    assert verdict("paper:pkg/model_utils.py.f changed") == ([], ["audit:paper-module"])
    assert verdict("paper:helpers.py.Cfg.gain", event="rcb.state") == ([], ["audit:paper-module"])
    assert verdict("paper:helpers.py", event="rcb.rewrite") == ([], ["audit:paper-module"])
    assert verdict("model_ref.f changed") == (["tampering:patch"], [])  # the reference's own: tampering
    assert verdict("numpy.mean changed", "?paper:numpy.mean changed") == (["tampering:patch"], [])


SRC_TEST = """import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
import model as m  # noqa: E402  (src/model.py, imported as "model")
import model_ref as r  # noqa: E402


class TestScale(unittest.TestCase):
    def test_scale(self):
        for seed in range(3):
            x = np.random.default_rng(seed).normal(size=(4,))
            np.testing.assert_allclose(m.scale(x), r.scale(x))


if __name__ == "__main__":
    unittest.main()
"""


@pytest.mark.slow
def test_the_completions_own_module_is_its_own_under_any_name(sandbox_backend_name, tmp_path):
    """The completion's file ``src/model.py``, imported by a test that put ``src/`` on ``sys.path``
    as ``model``: a function of its own module rebound by the completion (a lazily chosen
    implementation) is its own business, whatever name the module has in ``sys.modules``."""
    folder = tmp_path / "set" / "scale_00"
    (folder / "src").mkdir(parents=True)
    for name in ("model", "model_ref"):
        snippet = ('    # <paper2code name="scale">\n    y = x * 2\n    # </paper2code name="scale">\n'
                   if name == "model" else "    y = x * 2\n")
        (folder / "src" / f"{name}.py").write_text(
            "import numpy as np\n\n\ndef helper(v):\n    return v\n\n\n"
            f"def scale(x):\n{snippet}    return helper(y)\n")
    paper = _finish(folder, SRC_TEST, "src/model.py")
    body = "global helper\nhelper = lambda v: np.asarray(v)\ny = x * 2"
    named = _tasks(paper, {"own_function_rebound": body})
    run, = _score(named, sandbox_backend_name)
    assert run.passed, (run.category, run.flags, run.output_tail[-600:])
    assert not [f for f in run.flags if f.startswith(("tampering:", "audit:"))], run.flags


CLASS_TEST = """import unittest

import this  # noqa: F401  (a library the test imports itself; its import prints, so no server preloads it)

import numpy as np

import {first}
import {second}


class TestAct(unittest.TestCase):
    def test_f(self):
        for seed in range(3):
            x = np.random.default_rng(seed).normal(size=(4, 3))
            np.testing.assert_allclose(act_00.Act().f(x), act_00_ref.Act().f(x), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""
METHOD = "def f(self, x):\n    return helpers.act(x) * helpers.SCALE\n"
#: a snippet that is a class's body runs where the test imports the completion's file: what it
#: changes there, before any test starts (the names are literal: the static reading names none)
AT_IMPORT = {
    "paper_constant": ("setattr(helpers, 'SCALE', 0.0)\ndef f(self, x):\n    return np.zeros_like(x)",
                       "audit:paper-module"),
    "paper_function": ("setattr(helpers, 'act', np.zeros_like)\ndef f(self, x):\n    return np.zeros_like(x)",
                       "audit:paper-module"),
    # a library the test imported itself, before the completion's file (no preloaded copy)
    "test_library": ("setattr(this, 's', '')\n" + METHOD.strip(), "audit:library-state"),
    # a library the completion's own line imports first (its import is a window: seen from its end)
    "own_library": ("import wave as w\nsetattr(w, 'open', None)\n" + METHOD.strip(), "tampering:patch"),
}


@pytest.mark.slow
@pytest.mark.parametrize("order", ["reference_first", "completion_first"])
def test_what_a_completion_changes_while_the_test_imports_it_is_seen(sandbox_backend_name, tmp_path, order):
    """A module is watched from the end of its own import, not from the first test's start: a class
    body of the completion's that changed ``helpers`` (which the reference imports too) or a library
    the test had imported passed unflagged until 2026-12-06, whichever of the two files the test
    imported first (the paper's modules and the test's own imports were first seen at the first
    test's start, as the completion had left them)."""
    folder = tmp_path / "set" / "act_00"
    folder.mkdir(parents=True)
    (folder / "helpers.py").write_text(HELPERS)
    body = "".join("    " + line + "\n" for line in METHOD.splitlines())
    head = "import numpy as np\n\nimport helpers\nimport this  # noqa: F401\n\n\nclass Act:\n"
    (folder / "act_00.py").write_text(f'{head}    # <paper2code name="act">\n{body}    # </paper2code name="act">\n')
    (folder / "act_00_ref.py").write_text(head + body)
    names = ("act_00_ref", "act_00") if order == "reference_first" else ("act_00", "act_00_ref")
    paper = _finish(folder, CLASS_TEST.format(first=names[0], second=names[1]), "act_00.py")
    named = _tasks(paper, {**{k: body for k, (body, _) in AT_IMPORT.items()}, "reference": METHOD.strip()})
    runs = _score(named, sandbox_backend_name)
    for (name, _), run in zip(named, runs):
        if name == "reference":
            assert run.passed and run.flags == [], (run.category, run.flags, run.output_tail[-600:])
            continue
        flag = AT_IMPORT[name][1]
        assert flag in run.flags, (name, run.category, run.flags, run.output_tail[-600:])
        assert run.passed == (not flag.startswith("tampering:")), (name, run.category, run.flags)
