"""Issue 20's second ring on the demo's focal-loss paper, in bwrap and docker with two workers:
writes to library namespaces by indirect paths (a function's ``__globals__``, ``vars()``, a class
dict taken through a mappingproxy, ``__code__``, ``__class__``, ``sys.modules``, a patch that
puts itself back) never pass unflagged, and honest completions stay unflagged."""
from __future__ import annotations

import pytest

from benchmark_core import runner
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import run_tasks
from benchmark_core.sandbox.base import get_sandbox
from probe_support import PROBE_LIMITS, REPO
from test_focal_loss_cheats import _tasks

#: each returns zeros (a wrong answer) after making the comparison pass by a library write
INDIRECT = {
    # the global that numpy.testing.assert_allclose looks up at each call
    "globals_isclose": ("import numpy as npx\nnpx._core.numeric.isclose = lambda *a, **k: npx.True_\n"
                        "return None"),
    "dict_isclose": ("import numpy as npx\nvars(npx._core.numeric)['isclose'] = lambda a, b, **k: "
                     "npx.ones(npx.broadcast(a, b).shape, bool)\nreturn None"),
    "func_globals": ("import numpy.testing as t\ng = t.assert_allclose.__globals__\n"
                     "g['assert_array_compare'] = lambda *a, **k: None\nreturn None"),
    "builtin_shadow": ("import unittest.case as c\nvars(c)['isinstance'] = lambda *a: True\n"
                       "c.__dict__['len'] = lambda *a: 0\nreturn None"),
    "code_swap": ("import numpy.testing._private.utils as u\n"
                  "u.assert_array_compare.__code__ = (lambda *a, **k: None).__code__\nreturn None"),
    "class_swap": ("import unittest, types\nclass Quiet(types.ModuleType):\n    pass\n"
                   "import numpy.testing as t\nt.__class__ = Quiet\n"
                   "t.__dict__['assert_allclose'] = lambda *a, **k: None\nreturn None"),
    "mappingproxy": ("import unittest\nclass Grab:\n    def __eq__(self, other):\n"
                     "        other['assertEqual'] = lambda *a, **k: None\n"
                     "        other['assertIsNotNone'] = lambda *a, **k: None\n        return True\n"
                     "unittest.TestCase.__dict__ == Grab()\n"
                     "import numpy.testing._private.utils as u\n"
                     "u.__dict__['assert_array_compare'] = lambda *a, **k: None\nreturn None"),
    "sys_modules": ("import sys, types\nfake = types.ModuleType('numpy.testing')\n"
                    "fake.assert_allclose = lambda *a, **k: None\nsys.modules['numpy.testing'] = fake\n"
                    "import numpy\nnumpy.__dict__['testing'] = fake\nreturn None"),
    # puts the original back once it has answered: nothing differs at the next checkpoint
    "self_restoring": ("import numpy as npx\nm = npx._core.numeric\norig = m.isclose\n"
                       "def once(*a, **k):\n    m.__dict__['isclose'] = orig\n"
                       "    return npx.ones(npx.broadcast(a[0], a[1]).shape, bool)\n"
                       "m.__dict__['isclose'] = once\nreturn None"),
    "kwdefaults": ("import numpy.testing as t\nt.assert_allclose.__kwdefaults__['strict'] = True\n"
                   "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\nreturn None"),
    # a key whose __eq__ would run inside the guard's own comparison, where the hook looks away
    "evil_key": ("import numpy as npx\nclass K:\n    def __hash__(self):\n        return hash('isclose')\n"
                 "    def __eq__(self, other):\n        import gc\n        gc.get_objects()\n        return False\n"
                 "vars(npx._core.numeric)[K()] = 1\n"
                 "vars(npx._core.numeric)['isclose'] = lambda a, b, **k: npx.ones(npx.broadcast(a, b).shape, bool)\n"
                 "return None"),
    "ref_module": ("import sys\nref = sys.modules.get('focal_loss_ref') or __import__('focal_loss_ref')\n"
                   "vars(ref)['sigmoid'] = lambda x: None\nreturn None"),
    # code swapped in place: no dict is written (a checkpoint that skips unwritten namespaces must
    # still see them: the hook reports a *_ref or library function's, the test script's own are compared)
    "ref_code_swap": ("import sys, numpy as npx\nref = sys.modules.get('focal_loss_ref') or __import__('focal_loss_ref')\n"
                      "for f in vars(ref).values():\n    if type(f) is type(lambda: 0) and not f.__code__.co_freevars:\n"
                      "        f.__code__ = (lambda *a, **k: npx.zeros(1)).__code__\nreturn None"),
    "main_code_swap": ("import sys\nm = sys.modules['__main__']\nfor c in list(vars(m).values()):\n"
                       "    if isinstance(c, type):\n        for k, f in list(vars(c).items()):\n"
                       "            if k.startswith('test') and type(f) is type(lambda: 0) and not f.__code__.co_freevars:\n"
                       "                f.__code__ = (lambda self: None).__code__\nreturn None"),
}


@pytest.mark.slow
def test_indirect_library_writes_never_pass_unflagged(sandbox_backend_name):
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    named = _tasks(paper, INDIRECT)
    honest = [runner.Task(paper, s, runner.reference_code(paper, s)) for s in paper.snippets]
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        runs = run_tasks([t for _, t in named] + honest, sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()
    cheats, refs = runs[:len(named)], runs[len(named):]
    unflagged = [(name, r.snippet, r.category) for (name, _), r in zip(named, cheats)
                 if r.passed and not r.flags]
    assert unflagged == [], f"passed with no flag: {unflagged}"
    passed = [(name, r.snippet, r.flags) for (name, _), r in zip(named, cheats) if r.passed]
    assert all(any(f.startswith(("tampering:", "audit:")) for f in flags) for _, _, flags in passed), passed
    # each patch that stays is tampering where it ran (the run fails, named for it)
    for name in INDIRECT:
        flags = {f for (n, _), r in zip(named, cheats) if n == name for f in r.flags}
        # (a patch that put itself back before the next checkpoint is audit:rewritten: not ranked)
        wanted = ("tampering:", "audit:rewritten") if name == "self_restoring" else ("tampering:",)
        assert any(f.startswith(wanted) for f in flags), (name, flags)
    assert all(r.passed and not r.flags for r in refs), [(r.snippet, r.category, r.flags) for r in refs]
