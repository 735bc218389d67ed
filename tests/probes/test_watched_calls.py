"""Inputs changed in place by a path the static reading does not follow: the test hands the same
array to the completion and then to the reference, and the completion changes it so that the
reference agrees with a wrong answer. A mutator looked up by a built name, a helper of the paper's
own defined outside the completion, an array reached through another object the model was given
(``self.cfg.W``), an array a module of the paper's hands out (``helpers.table()``): each passed,
here as in a fresh interpreter, with no flag until 2026-12-06. The paper's functions around the
snippets are now watched across each call (``warm/watch.py``): what a call was handed, and what the
paper's modules hold, is fingerprinted where it starts and compared where it ends, and a change the
reference run did not make is ``audit:input-changed``. The paper's own code that updates what it is
handed (an optimizer's step) asks for it, and an honest completion doing the same in another form
stays unflagged. A completion that reaches the watch's own builtin to take its call off the watch
fails as ``tampering:watch``. Scored with two workers, in bwrap and docker."""
from __future__ import annotations

import pytest

from benchmark_core import runner
from papers_support import one_snippet_paper
from test_focal_loss_cheats import _tasks
from test_lying_objects import SOFTPLUS_TEST, _passed_flagged
from test_paper_modules import _finish, _score

#: the numpy softplus paper (``softplus(x)``, the test's ``x`` handed to the reference after it);
#: ``_clear`` is the paper's own helper, outside the completion's lines
SOFTPLUS_HEAD = "import numpy as np\n\n\ndef _clear(a):\n    a[...] = 0.0"
UNSEEN = {
    "mutator_by_a_built_name": ("getattr(x, 'fi' + 'll')(0.0)\ny = np.full_like(x, np.log(2.0))", r"audit:input-changed"),
    "helper_of_the_paper": ("_clear(x)\ny = np.full_like(x, np.log(2.0))", r"audit:input-changed"),
    # written by a finalizer as the call's frame goes, after the call's end was looked at
    "finalizer_after_the_call": ("import weakref\nops = {'c': np.copyto}\nclass K:\n    pass\nk = K()\n"
                                 "weakref.finalize(k, ops['c'], x, 0.0)\ny = np.full_like(x, np.log(2.0))",
                                 r"audit:input-changed"),
    "mutator_from_a_table": ("ops = {'c': np.copyto}\nops['c'](x, 0.0)\ny = np.full_like(x, np.log(2.0))", r"audit:input-changed"),
}
#: takes its call off the watch (the builtin reached by a built name), then writes
FORGED = ("w = getattr(__import__('builtins'), '_rcb' + '.watch')\nw()\nw('softplus', (), ())\n"
          "getattr(x, 'fi' + 'll')(0.0)\ny = np.full_like(x, np.log(2.0))")


def _softplus(tmp_path):
    return one_snippet_paper(tmp_path, "softplus_00", imports=SOFTPLUS_HEAD, func="softplus",
                             body="    y = np.logaddexp(0.0, x)\n", test=SOFTPLUS_TEST,
                             requirements="numpy\n", title="Softplus").papers[0]


@pytest.mark.slow
def test_inputs_changed_by_paths_the_reading_does_not_follow_never_pass_unflagged(sandbox_backend_name, tmp_path):
    paper = _softplus(tmp_path)
    for name, (body, _) in UNSEEN.items():  # the static reading is blind to each: the run's watch sees it
        task = runner.Task(paper, paper.snippets[0], tuple("    " + line for line in body.split("\n")))
        text = runner.build_file(paper, task.snippet, task.code)
        assert not [f for f in runner.static_reading_of(task, text).flags if "mutates" in f], name
    _passed_flagged(paper, UNSEEN, "softplus", sandbox_backend_name)


@pytest.mark.slow
def test_a_completion_that_takes_its_call_off_the_watch_fails_as_tampering(sandbox_backend_name, tmp_path):
    paper = _softplus(tmp_path)
    [result] = _score(_tasks(paper, {"forged": FORGED}), sandbox_backend_name)
    assert not result.passed and result.category == "tampering", (result.category, result.flags)
    assert "tampering:watch" in result.flags, result.flags


#: a model built from a configuration object, its reference from the same one
CFG_TEST = """import types
import unittest

import numpy as np

import layer_00 as m
import layer_00_ref as r


class TestLayer(unittest.TestCase):
    def test_call(self):
        rng = np.random.default_rng(0)
        cfg = types.SimpleNamespace(W=rng.normal(size=(3, 2)), gain=1.5, name="layer")
        mine, ref = m.Layer(cfg), r.Layer(cfg)
        for _ in range(3):
            x = rng.normal(size=(4, 3))
            np.testing.assert_allclose(mine(x), ref(x), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""
REACHED_THROUGH = {
    "through_the_config": ("self.cfg.W[...] = 0.0\nreturn np.zeros((x.shape[0], self.cfg.W.shape[1]))",
                           r"audit:input-changed"),
    "through_a_module_helper": ("helpers.table()[...] = 0.0\nreturn x @ self.cfg.W * 0.0",
                                r"audit:input-changed"),
    # a number of the configuration the reference reads too (watched since 2026-12-06, night, later)
    "a_configuration_value": ("self.cfg.gain = 0.0\nreturn np.zeros((x.shape[0], self.cfg.W.shape[1]))",
                              r"audit:input-changed"),
}


@pytest.mark.slow
def test_what_a_model_reaches_through_what_it_was_given_never_passes_unflagged(sandbox_backend_name, tmp_path):
    """``self.cfg.W`` (an array held by an object the model was given), ``helpers.table()`` (an
    array a module of the paper's hands out, which the reference reads too) and ``self.cfg.gain``
    (a number of that object's)."""
    folder = tmp_path / "set" / "layer_00"
    folder.mkdir(parents=True)
    (folder / "helpers.py").write_text("import numpy as np\n\nTABLE = np.ones(2)\n\n\ndef table():\n    return TABLE\n")
    head = ("import numpy as np\n\nimport helpers\n\n\nclass Layer:\n    def __init__(self, cfg):\n"
            "        self.cfg = cfg\n\n    def __call__(self, x):\n")
    body = "        return x @ self.cfg.W * helpers.TABLE * self.cfg.gain\n"
    (folder / "layer_00.py").write_text(
        f'{head}        # <paper2code name="call">\n{body}        # </paper2code name="call">\n')
    (folder / "layer_00_ref.py").write_text(head + body)
    _passed_flagged(_finish(folder, CFG_TEST, "layer_00.py"), REACHED_THROUGH, "call", sandbox_backend_name)


SGD_TEST = """import unittest

import numpy as np

import sgd_00 as m
import sgd_00_ref as r


class TestStep(unittest.TestCase):
    def test_step(self):
        rng = np.random.default_rng(1)
        p, g = rng.normal(size=5), rng.normal(size=5)
        mine, ref = p.copy(), p.copy()
        m.step(mine, g)
        r.step(ref, g)
        np.testing.assert_allclose(mine, ref, rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""


@pytest.mark.slow
def test_a_paper_that_updates_what_it_is_handed_asks_for_it(sandbox_backend_name, tmp_path):
    """An optimizer's step updates its parameters in place: the reference run's watch sees it too,
    so an honest completion doing it in another form passes unflagged; the gradient it was handed
    changed is still flagged."""
    folder = tmp_path / "set" / "sgd_00"
    folder.mkdir(parents=True)
    head = "import numpy as np\n\n\ndef step(p, g, lr=0.1):\n"
    body = "    p -= lr * g\n"
    (folder / "sgd_00.py").write_text(f'{head}    # <paper2code name="step">\n{body}    # </paper2code name="step">\n')
    (folder / "sgd_00_ref.py").write_text(head + body)
    paper = _finish(folder, SGD_TEST, "sgd_00.py")
    named = _tasks(paper, {"honest_other_form": "np.subtract(p, lr * g, out=p)",
                           "gradient_changed": "ops = {'c': np.copyto}\nops['c'](g, 0.0)\np -= lr * g"})
    runs = dict(zip([n for n, _ in named], _score(named, sandbox_backend_name)))  # noqa: B905
    honest, changed = runs["honest_other_form"], runs["gradient_changed"]
    assert honest.passed and not honest.flags, (honest.category, honest.flags, honest.output_tail[-600:])
    assert changed.passed and "audit:input-changed" in changed.flags, (changed.category, changed.flags)
    assert "step:g" in str(changed.extra.get("flag_notes", {}).get("audit:input-changed")), changed.extra


#: the model called on two inputs before the first answer is compared with the reference's
TWICE_TEST = """import unittest

import numpy as np

import softplus_00 as m
import softplus_00_ref as r


class TestSoftplus(unittest.TestCase):
    def test_softplus(self):
        rng = np.random.default_rng(3)
        x1, x2 = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
        got1, got2 = m.softplus(x1), m.softplus(x2)
        np.testing.assert_allclose(got1, r.softplus(x1), rtol=1e-12)
        np.testing.assert_allclose(got2, r.softplus(x2), rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
"""
#: keeps what its first call was handed and zeroes it in its second (handed another array), after
#: the second call's start looked at it: the first answer (log 2) then matches the reference's
LATER = ("kept = globals().setdefault('_kept', [])\nif kept:\n    ops = {'c': np.copyto}\n"
         "    ops['c'](kept.pop(), 0.0)\n    y = np.logaddexp(0.0, x)\nelse:\n    kept.append(x)\n"
         "    y = np.full_like(x, np.log(2.0))")


@pytest.mark.slow
def test_an_earlier_calls_input_changed_in_a_later_call_never_passes_unflagged(sandbox_backend_name, tmp_path):
    paper = one_snippet_paper(tmp_path, "softplus_00", imports=SOFTPLUS_HEAD, func="softplus",
                              body="    y = np.logaddexp(0.0, x)\n", test=TWICE_TEST,
                              requirements="numpy\n", title="Softplus").papers[0]
    _passed_flagged(paper, {"earlier_call": (LATER, r"audit:input-changed")}, "softplus", sandbox_backend_name)
