"""The static reading of a completion is the reading of its inserted file (issue 20): a completion
that only parses joined to its file is read all the same, and one that reaches out of its snippet
is flagged ``ast:scope``; honest completions get no new flag. One completion the host cannot read
is that completion's verdict (category ``invalid``), never its neighbours'."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmark_core.completions import completion_lines, extract_code
from benchmark_core.predictions import parse_predictions
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, build_file, reference_code, run_task, run_tasks, static_reading_of
from benchmark_core.sandbox.base import PaperSpec, get_sandbox

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"
PROBE_PSET = ROOT / "tests" / "probes" / "pset"

#: nested past the parser's limits: MemoryError, RecursionError (or the tokenizer's SyntaxError)
NESTED = {
    "unary": "    out = " + "-" * 100000 + "1",
    "not": "    out = " + "not " * 50000 + "x",
    "attribute": "    out = x" + ".T" * 50000,
    "parentheses": "    out = " + "(" * 10000 + "x" + ")" * 10000,
    "lists": "    out = " + "[" * 10000 + "]" * 10000,
}


def _reading(paper, snippet_name: str, lines: list[str]):
    snippet = paper.snippet(snippet_name)
    task = Task(paper, snippet, tuple(lines))
    return static_reading_of(task, build_file(paper, snippet, task.code))


@pytest.fixture(scope="module")
def focal():
    return load_problemset(DEMO).paper("focal-loss")


def test_honest_code_gets_no_new_flag():
    """Every reference snippet of our problem sets and every demo prediction: no ast:scope, and the
    file-based reading finds exactly what the code itself holds."""
    for folder in (DEMO, PROBE_PSET, ROOT / "tests" / "data" / "quirky_pset", ROOT / "tests" / "data" / "torch_pset"):
        pset = load_problemset(folder)
        for paper in pset.papers:
            for snippet in paper.snippets:
                reading = _reading(paper, snippet.name, list(reference_code(paper, snippet)))
                assert reading.parsed and "ast:scope" not in reading.flags, (paper.id, snippet.name, reading)
                assert "audit:ref-module" not in reading.flags
                for body in ([], [snippet.indent + "pass"]):  # blank and trivial answers
                    assert "ast:scope" not in _reading(paper, snippet.name, body).flags
    demo = load_problemset(DEMO)
    flagged = set()
    for preds in sorted((DEMO / "predictions").glob("*.jsonl")):
        predictions, problems = parse_predictions(preds.read_bytes(), demo)
        assert not problems
        for p in predictions:
            paper = demo.paper(p.paper)
            reading = _reading(paper, paper.snippet(p.snippet, p.file).name, completion_lines(p.completion))
            assert "ast:scope" not in reading.flags and "audit:ref-module" not in reading.flags, (p, reading)
            if reading.flags:
                flagged.add((p.paper, p.snippet, tuple(reading.flags)))
    # the one hostile demo answer (it kills its own process) and nothing else
    assert flagged == {("focal-loss", "prior initialisation", ("ast:import:os", "ast:import:signal",
                                                               "ast:os-call:kill"))}


@pytest.mark.parametrize("name, lines, why", [
    # ends in a backslash continued by the closing tag line: it does not parse on its own
    ("backslash", ["    import focal_loss_ref as r", "    out = r.sigmoid(x) \\"], "does not parse on its own"),
    # a line at column 0 closes the function and opens a new one, which takes the lines after the tag
    ("new function", ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "def _hidden():",
                      "    pass"], "column 0, below its snippet's block (column 4)"),
    # a form feed puts the tokenizer back to column 0 (the line looks indented)
    ("form feed", ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "    \fdef _hidden():",
                   "    \f    pass"], "column 0"),
    ("class", ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "class _Hidden:",
               "    pass"], "column 0"),
    ("decorator", ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "@staticmethod",
                   "def _hidden():", "    pass"], "column 0"),
    # carriage returns are line breaks to the interpreter: one "line" here is three
    ("carriage return", ["    out = focal_loss_ref.sigmoid(x)\rdef _hidden():\r    import focal_loss_ref"], "column 0"),
])
def test_code_leaving_its_snippet_is_read_and_flagged(focal, name, lines, why):
    reading = _reading(focal, "stable sigmoid", lines)
    assert reading.parsed, name
    assert "ast:scope" in reading.flags and why in reading.notes["ast:scope"], (name, reading)
    assert "audit:ref-module" in reading.flags, (name, reading)  # the code it holds is read all the same


@pytest.mark.parametrize("lines, flags", [
    (["    out = np.zeros_like(x); import focal_loss_ref"], {"audit:ref-module", "ast:import:focal_loss_ref"}),
    (["    exec('import focal_' + 'loss_ref')", "    out = x"], {"ast:exec"}),
    (["    exec('from focal_loss_ref import *')", "    out = x"], {"ast:exec", "audit:ref-module"}),
    # tag comments inside a completion change nothing: its lines are known, not looked for
    (['    # </paper2code name="stable sigmoid">', "    import focal_loss_ref", "    out = x",
      '    # <paper2code name="stable sigmoid">'], {"audit:ref-module", "ast:import:focal_loss_ref"}),
])
def test_code_inside_its_snippet_is_read_without_a_scope_flag(focal, lines, flags):
    reading = _reading(focal, "stable sigmoid", lines)
    assert flags <= set(reading.flags) and "ast:scope" not in reading.flags, reading


@pytest.mark.parametrize("lines", [["\tout = x"], ["    out = (x +"], ['    out = x; s = """']])
def test_a_file_that_does_not_parse_is_harmless(focal, lines):
    """Tabs against spaces, a bracket or string left open here: the file does not compile, so its
    run fails as ``syntax``; no flag is needed (a flag on a failure would only keep an honest
    model's syntax error off the board)."""
    reading = _reading(focal, "stable sigmoid", lines)
    assert not reading.parsed and reading.flags == []


def _paper_with(tmp_path, source: str):
    folder = tmp_path / "pset"
    shutil.copytree(PROBE_PSET, folder)
    (folder / "probe" / "solution.py").write_text(source)
    return load_problemset(folder).paper("probe")


def test_an_open_string_that_swallows_the_rest_of_the_file(tmp_path):
    paper = _paper_with(tmp_path, 'def solve(x):\n    # <paper2code name="solve">\n    return x * 2\n'
                                  '    # </paper2code name="solve">\n\n\n# the end: """ in it\nit = ()\n')
    reading = _reading(paper, "solve", ["    import solution_ref", '    return solution_ref.solve(x) if 1 else """'])
    assert reading.parsed
    assert "ast:scope" in reading.flags and "goes on past the completion's last line" in reading.notes["ast:scope"]
    assert "audit:ref-module" in reading.flags


def test_an_encoding_line_is_flagged(tmp_path):
    paper = _paper_with(tmp_path, '# <paper2code name="solve">\ndef solve(x):\n    return x * 2\n'
                                  '# </paper2code name="solve">\n')
    honest = _reading(paper, "solve", ["def solve(x):", "    return x * 2"])
    assert honest.flags == []
    reading = _reading(paper, "solve", ["# -*- coding: latin-1 -*-", "def solve(x):", "    return x * 2"])
    assert "ast:scope" in reading.flags and "encoding" in reading.notes["ast:scope"]


def test_a_tag_inside_a_bracket_holds_its_completions_to_the_reference(tmp_path):
    """Where the paper's own snippet is part of an expression, a completion that is one as well
    is not flagged (the reference does the same), while a dedent out of it still is."""
    paper = _paper_with(tmp_path, 'def solve(x):\n    return sum([\n        # <paper2code name="solve">\n'
                                  '        x, x,\n        # </paper2code name="solve">\n    ])\n')
    assert _reading(paper, "solve", ["        x,", "        x,"]).flags == []
    assert "audit:ref-module" in _reading(paper, "solve", ["        __import__('solution_ref').solve(x) // 2,",
                                                           "        x,"]).flags


@pytest.mark.parametrize("lines, flags", [
    # an object of its own that answers the comparison: the test's check is no longer computed
    (["    class Yes:", "        def __eq__(self, other):", "            return True", "    return Yes()"],
     {"ast:protocol:__eq__"}),
    (["    class Yes:", "        __ne__ = lambda self, other: False", "    return Yes()"], {"ast:protocol:__ne__"}),
    (["    return type('Z', (float,), {'__sub__': lambda a, b: 0.0})(x)"],
     {"ast:dynamic-class", "ast:protocol:__sub__"}),
    (["    import numpy as np", "    class A(np.ndarray):", "        def __array_function__(self, *a):",
      "            return True", "    return x"], {"ast:protocol:__array_function__"}),
    (["    import numpy as np", "    with np.errstate(over='ignore'):", "        return x * 2"],
     {"ast:error-state:errstate"}),
    (["    import warnings", "    warnings.simplefilter('ignore')", "    return x * 2"], {"ast:error-state:simplefilter"}),
])
def test_objects_that_could_answer_the_check_are_flagged(tmp_path, lines, flags):
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    reading = _reading(paper, "solve", lines)
    assert flags <= set(reading.flags), reading
    for flag in flags:  # each says why
        assert reading.notes[flag].startswith(("the completion defines", "the completion calls",
                                               "the completion builds")), reading.notes


@pytest.mark.parametrize("lines, mutated", [
    (["    x[:] = 0", "    return x"], True),
    (["    x.zero_()", "    return x"], True),
    (["    x *= 0", "    return x"], True),
    (["    y = x.view(-1)", "    y.fill_(0)", "    return y"], True),
    (["    import numpy as np", "    x = np.asarray(x)", "    x[...] = 0", "    return x"], True),
    (["    import numpy as np", "    np.copyto(x, 0)", "    return x"], True),
    (["    import numpy as np", "    np.multiply(x, 0, out=x)", "    return x"], True),
    (["    for row in x:", "        row[:] = 0", "    return x"], True),
    (["    if x is None:", "        x = x.copy()", "    x[:] = 0", "    return x"], True),  # a copy it may skip
    (["    def _h(x):", "        return x", "    x.zero_()", "    return x"], True),  # a helper's name changes nothing
    (["    x = x.copy() if x is None else x", "    x[:] = 0", "    return x"], True),
    (["    y = [0, x][1]", "    y[:] = 0", "    return y"], True),
    (["    for i, row in enumerate(x):", "        row[:] = 0", "    return x"], True),
    (["    m = memoryview(x)", "    m[0:8] = bytes(8)", "    return x"], True),  # its buffer, written through
    (["    import numpy as np", "    v = np.frombuffer(x, dtype=np.float64)", "    v[:] = 0", "    return x"], True),
    (["    import numpy as np", "    np.multiply.at(x, slice(None), 0)", "    return x"], True),  # a ufunc in place
    (["    getattr(x, 'fill')(0)", "    return x"], True),  # a mutator looked up by its literal name
    (["    getattr(x, 'T')[...] = 0", "    return x"], True),  # a view looked up by its literal name
    # a type's method called unbound, a positional out, a writeable window, a field set (2026-12-06)
    (["    import numpy as np", "    np.ndarray.fill(x, 0)", "    return x"], True),
    (["    import numpy as np", "    np.ndarray.sort(x)", "    return x"], True),
    (["    import numpy as np", "    np.clip(x, 0, 0, x)", "    return x"], True),
    (["    import numpy as np", "    np.lib.stride_tricks.sliding_window_view(x, 1, writeable=True)[...] = 0",
      "    return x"], True),
    (["    x.setfield(0, x.dtype)", "    return x"], True),
    (["    import numpy as np", "    np.flip(x)[...] = 0", "    return x"], True),  # numpy's flip is a view
    (["    import numpy as np", "    np.expand_dims(x, 0)[0][:] = 0", "    return x"], True),
    (["    for part in x.swapdims(0, 0).tensor_split(2):", "        part.zero_()", "    return x"], True),
    # torch's inplace by its place, an in-place operator's overload, an argument written into, dlpack
    (["    import torch.nn.functional as F", "    F.dropout(x, 1.0, True, True)", "    return x"], True),
    (["    import torch", "    torch.nn.functional.hardtanh(x, 0.0, 0.0, True)", "    return x"], True),
    (["    import torch", "    torch.nn.Threshold(1e9, 0.0, True)(x)", "    return x"], True),
    (["    import torch", "    torch.ops.aten.fill_.Scalar(x, 0)", "    return x"], True),
    (["    import torch", "    torch.nn.utils.vector_to_parameters(torch.zeros(x.numel()), [x])", "    return x"], True),
    (["    import torch", "    torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x)).zero_()", "    return x"], True),
    (["    import torch", "    import torch.nn.functional as F", "    y = F.dropout(x, 0.5, True) + F.relu(x, False)",
      "    return y + torch.nn.Dropout(0.1)(x) + torch.nn.ReLU(False)(x) + F.threshold(x, 0.5, 0.0)"], False),
    # honest: a module's functions of the same names make a new array
    (["    import numpy as np", "    y = np.resize(x, (2, 2))", "    z = np.append(x, 1)", "    w = np.sort(x)",
      "    return y.sum() + z.sum() + w.sum() + np.partition(x, 0).sum() + np.clip(x, 0, 1).sum()"], False),
    (["    import torch", "    values, order = torch.Tensor.sort(x)", "    return values"], False),  # its answer
    (["    import numpy as np", "    c = np.conj(x)", "    c *= 2", "    return c"], False),  # numpy's conj: a copy
    (["    import numpy as np", "    np.multiply(x, 0, x)", "    return x"], True),  # a ufunc's positional output
    (["    import numpy as np", "    np.exp(x, x)", "    return x"], True),
    # through a local helper, a lambda, a mutator handed on, the operator module, a loop over a container
    (["    def z(t):", "        t[:] = 0", "    z(x)", "    return x"], True),
    (["    def z(t):", "        t.fill(0)", "    def y(u):", "        z(u)", "    y(x)", "    return x"], True),
    (["    def z(a, t=None):", "        t.fill(0)", "    z(1, t=x)", "    return x"], True),
    (["    z = lambda t: t.fill(0)", "    z(x)", "    return x"], True),
    (["    list(map(lambda t: t.fill(0), [x]))", "    return x"], True),
    (["    import numpy as np", "    list(map(np.ndarray.fill, [x], [0]))", "    return x"], True),
    (["    import torch", "    list(map(torch.Tensor.zero_, (x,)))", "    return x"], True),
    (["    import functools, torch", "    functools.partial(torch.Tensor.mul_, other=0)(x)", "    return x"], True),
    (["    import operator", "    operator.imul(x, 0)", "    return x"], True),
    (["    from operator import setitem", "    setitem(x, slice(None), 0)", "    return x"], True),
    (["    for t in [x]:", "        t *= 0", "    return x"], True),
    (["    [t.fill(0) for t in (x,)]", "    return x"], True),
    (["    g = x.mul_", "    g(0)", "    return x"], True),  # a bound in-place method, called later
    (["    import torch", "    torch.nn.functional.relu(x, inplace=True)", "    return x"], True),
    (["    import torch", "    torch.nn.Hardtanh(0.0, 0.0, inplace=True)(x)", "    return x"], True),
    (["    import torch", "    torch._foreach_mul_([x], 0.0)", "    return x"], True),
    (["    import numpy as np", "    np.random.shuffle(x)", "    return x"], True),
    # through a container it is put in and taken out of later, a view by a slice, a keyword, a sort
    (["    d = {}", "    d['a'] = x", "    d['a'].fill(0)", "    return x"], True),
    (["    s = []", "    s.append(x)", "    s[-1][:] = 0", "    return x"], True),
    (["    d = {'a': x}", "    d['a'] += 1", "    return d['a']"], True),
    (["    d = dict(a=x)", "    d['a'] *= 0", "    return x"], True),
    (["    rows = list(x)", "    rows[0][:] = 0", "    return x"], True),
    (["    store = {'a': x}", "    for t in store.values():", "        t.fill(0)", "    return x"], True),
    (["    store = [x]", "    t = store.pop()", "    t *= 0", "    return x"], True),
    (["    class H:", "        pass", "    h = H()", "    h.v = x", "    h.v[:] = 0", "    return x"], True),
    (["    from types import SimpleNamespace", "    ns = SimpleNamespace(v=x)", "    ns.v *= 0", "    return x"], True),
    (["    import torch", "    store = [x]", "    torch._foreach_zero_(store)", "    return x"], True),
    (["    def z(ts):", "        for t in ts:", "            t.fill(0)", "    store = [x]", "    z(store)", "    return x"], True),
    (["    y = x[...]", "    y *= 0", "    return x"], True),
    (["    import numpy as np", "    np.copyto(dst=x, src=0)", "    return x"], True),
    (["    x.sort()", "    return x"], True),
    (["    (lambda t: t.fill(0))(x)", "    return x"], True),
    (["    import numpy as np", "    with np.nditer(x, op_flags=['readwrite']) as it:", "        for v in it:",
      "            v[...] = 0", "    return x"], True),
    # a mutator under another name, the object itself through a conversion it already satisfies,
    # its memory or buffer handed on
    (["    from numpy import copyto as cp", "    cp(x, 0)", "    return x"], True),
    (["    from operator import imul as im", "    im(x, 0)", "    return x"], True),
    (["    import torch", "    z = torch.Tensor.zero_", "    z(x)", "    return x"], True),
    (["    import torch", "    f = getattr(torch.Tensor, 'zero_')", "    f(x)", "    return x"], True),
    (["    x.contiguous().zero_()", "    return x"], True),
    (["    y = x.float()", "    y *= 0", "    return x"], True),
    (["    x.to(x.dtype).fill_(0)", "    return x"], True),
    (["    x.untyped_storage().fill_(0)", "    return x"], True),
    (["    import numpy as np", "    np.ascontiguousarray(x)[:] = 0", "    return x"], True),
    (["    import torch", "    torch.from_dlpack(x).zero_()", "    return x"], True),
    (["    import numpy as np", "    y = x.astype(np.float64)", "    y[:] = 0", "    return y"], False),  # a copy
    (["    import torch", "    z = torch.zeros_like", "    return z(x)"], False),
    # honest: a container of its own changed (not what it holds), other keys, an element replaced,
    # a container bound again, elements only read
    (["    store = [x]", "    store.append(1)", "    store.pop()", "    return x * 2"], False),
    (["    d = dict(a=x)", "    d['b'] = d['a'] * 2", "    d['b'] += 1", "    return d['b']"], False),
    (["    kv = {'k': x}", "    kv['k'] = kv['k'] * 2", "    return kv['k']"], False),
    (["    ys = [x]", "    ys = [x.copy()]", "    ys[0][:] = 0", "    return ys[0]"], False),
    (["    hs = [x]", "    for i in range(3):", "        hs.append(hs[-1] * 2)", "    return sum(hs)"], False),
    (["    class B:", "        pass", "    b = B()", "    b.v = x", "    b.w = x * 0", "    b.w[:] = 1", "    return b.w"], False),
    (["    stack = [x]", "    total = 0", "    while stack:", "        t = stack.pop()", "        total += t.sum()",
      "    return total"], False),
    (["    s = x.sort()", "    return s"], False),  # torch's sort gives its answer, the input unchanged
    (["    import torch", "    return torch.nn.functional.relu(x, inplace=False) + torch.nn.ReLU()(x)"], False),
    (["    import numpy as np", "    return np.maximum(0, x) + np.add(x, x)"], False),  # inputs only
    # honest look-alikes: helpers and lambdas that leave their parameter alone, a list of its own
    # filled by a bound append, a fitted attribute, a loop over inputs that only reads them
    (["    def f(t):", "        t = t.copy()", "        t[:] = 0", "        return t", "    return f(x)"], False),
    (["    sq = lambda t: t * t", "    return sorted(map(sq, [x]), key=lambda t: t.sum())"], False),
    (["    out = []", "    list(map(out.append, x))", "    return out"], False),
    (["    import numpy as np", "    return np.dot(x, model.coef_)"], False),
    (["    y = 0", "    for t in [x, x]:", "        y = y + t", "    return [t * 2 for t in (x, y)]"], False),
    # a part of the input is no view: an augmented assignment to it rebinds a number
    (["    n = x.shape[0]", "    n += 1", "    return x * 2"], False),
    # honest: a copy first, new objects, a helper's own parameter, a list of its own
    (["    x = x.copy()", "    x[x < 0] = 0", "    return x"], False),
    (["    y = x.clone()", "    y[y < 0] = 0", "    return y"], False),
    (["    y = x.sum(0)", "    z = x.add(1)", "    s, i = x.sort()", "    return z"], False),
    (["    def _h(buf):", "        buf[:] = 0", "        return buf", "    return _h(x.copy())"], False),
    (["    out = []", "    out.append(x)", "    return out"], False),
])
def test_a_completion_changing_its_inputs_in_place_is_flagged(tmp_path, lines, mutated):
    """The test may hand the same objects to the reference afterwards: zeroed inputs make the
    reference agree with a constant answer."""
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    reading = _reading(paper, "solve", lines)
    assert ("ast:mutates-argument" in reading.flags) == mutated, reading
    if mutated:
        assert "(x)" in reading.notes["ast:mutates-argument"], reading.notes


def test_a_paper_whose_own_code_changes_its_inputs_asks_for_it(tmp_path):
    """An optimizer's step updates the parameters it is given: the reference does it, so a
    completion doing it is not flagged."""
    paper = _paper_with(tmp_path, 'def step(p, g, lr=0.1):\n    # <paper2code name="solve">\n'
                                  '    p.add_(g, alpha=-lr)\n    return p\n    # </paper2code name="solve">\n')
    assert _reading(paper, "solve", ["    p -= lr * g", "    return p"]).flags == []



SELF_KEPT = (
    "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
    "    def __init__(self, W, b, n: int, lr=0.1):\n        super().__init__()\n        self.W = W\n"
    "        self.P = nn.Parameter(b)\n        self.register_buffer('mask', torch.ones(n) * 0 + b)\n"
    "        self.register_buffer('given', b)\n        self.stats = torch.zeros(n)\n        self.n = n\n"
    "        self.lr = lr\n        self.b = b\n\n"
    "    def forward(self, x):\n        # <paper2code name=\"solve\">\n        y = x @ self.W + self.P\n"
    "        # </paper2code name=\"solve\">\n        return y\n")


@pytest.mark.parametrize(("lines", "kept"), [
    # what the instance keeps of what its constructor was given is the caller's object: a test that
    # builds the model and its reference from the same tensors hands both the same memory
    (["        self.W.zero_()", "        y = x @ self.W"], "self.W"),
    (["        self.W.data[:] = 0", "        y = x * 0"], "self.W"),
    (["        w = self.W.view(-1)", "        w *= 0", "        y = x * 0"], "self.W"),
    (["        self.P.data.zero_()", "        y = x * 0"], "self.P"),  # nn.Parameter(b) holds b's memory
    (["        self.given.fill_(0)", "        y = x * 0"], "self.given"),  # register_buffer('given', b)
    (["        torch.nn.init.zeros_(self.W)", "        y = x * 0"], "self.W"),
    (["        self.W.data = torch.zeros_like(self.W)", "        y = x * 0"], "self.W"),
    # honest: state of its own changed in place, an attribute bound again, a copy changed
    (["        self.stats.add_(x.mean(0))", "        y = x @ self.W + self.P"], None),
    (["        self.mask.fill_(1)", "        y = x @ self.W + self.P"], None),  # torch.ones(n) ...: its own
    (["        self.W = self.W * 0.5", "        self.W.mul_(2)", "        y = x @ self.W + self.P"], None),
    (["        w = self.W.clone()", "        w.zero_()", "        y = x @ self.W + self.P"], None),
    (["        self.n += 1", "        self.lr *= 0.5", "        y = x @ self.W + self.P"], None),  # numbers
    (["        self.b *= 0", "        y = x * 0"], "self.b"),  # a tensor it was given, multiplied in place
])
def test_what_the_instance_keeps_of_its_arguments_changed_in_place_is_flagged(tmp_path, lines, kept):
    """``mutations._kept_on_self``: ``self.W = W`` in ``__init__`` (outside the completion) keeps the
    caller's tensor; ``self.W.zero_()`` in ``forward`` zeroes it, and a reference built from the same
    tensor then agrees with a zero answer. Until 2026-12-06 in-place changes of ``self``'s attributes
    were never read as an argument's."""
    reading = _reading(_paper_with(tmp_path, SELF_KEPT), "solve", lines)
    assert ("ast:mutates-argument" in reading.flags) == (kept is not None), reading
    if kept:
        assert f"({kept})" in reading.notes["ast:mutates-argument"], reading.notes


def test_a_paper_whose_own_method_updates_what_it_keeps_asks_for_it(tmp_path):
    """An optimizer keeps the parameters it is given and its step changes them in place: the
    reference does it, so a completion doing it is not flagged."""
    source = ("class SGD:\n    def __init__(self, params, lr):\n        self.params = params\n        self.lr = lr\n\n"
              "    def step(self, grads):\n        # <paper2code name=\"solve\">\n"
              "        for p, g in zip(self.params, grads):\n            p.add_(g, alpha=-self.lr)\n"
              "        # </paper2code name=\"solve\">\n        return self.params\n")
    paper = _paper_with(tmp_path, source)
    assert _reading(paper, "solve", ["        for p, g in zip(self.params, grads):",
                                     "            p.sub_(self.lr * g)"]).flags == []


def test_how_objects_are_made_shown_and_indexed_is_not_flagged(tmp_path):
    """The dunders honest code defines all the time (a dataset, a callable, a module) earn nothing."""
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    honest = ["    class Data:", "        __slots__ = ('items',)", "        def __init__(self, items):",
              "            self.items = list(items)", "        def __len__(self):", "            return len(self.items)",
              "        def __getitem__(self, i):", "            return self.items[i]",
              "        def __iter__(self):", "            return iter(self.items)",
              "        def __call__(self):", "            return sum(self.items)",
              "        def __repr__(self):", "            return f'Data({self.items})'",
              "    if __name__ == '__main__':", "        pass", "    return Data([x, x])()"]
    assert _reading(paper, "solve", honest).flags == []


def test_what_the_papers_own_code_defines_there_is_not_held_against_a_completion(tmp_path):
    """A snippet whose reference defines __eq__ (and silences a warning) asks a completion to: those
    are not flagged; another protocol still is."""
    paper = _paper_with(tmp_path, 'import warnings\n\n\ndef solve(x):\n    # <paper2code name="solve">\n'
                                  '    class Pair:\n        def __init__(self, v):\n            self.v = v\n'
                                  '        def __eq__(self, other):\n            return self.v == other\n'
                                  '    with warnings.catch_warnings():\n        return Pair(x * 2)\n'
                                  '    # </paper2code name="solve">\n')
    same = ["    class P:", "        def __init__(self, v):", "            self.v = v",
            "        def __eq__(self, other):", "            return True", "    with warnings.catch_warnings():",
            "        return P(0)"]
    assert _reading(paper, "solve", same).flags == []
    more = same[:-2] + ["        def __bool__(self):", "            return True", "    return P(0)"]
    assert _reading(paper, "solve", more).flags == ["ast:protocol:__bool__"]


@pytest.mark.parametrize("lines, flag", [
    (["    import numpy as np", "    return np.empty_like(x)"], "ast:uninitialized:empty_like"),
    (["    import numpy as np", "    return np.empty(np.shape(x))"], "ast:uninitialized:empty"),
    (["    from numpy import empty_like as e", "    return e(x)"], "ast:uninitialized:empty_like"),
    (["    from numpy import *", "    return empty_like(x)"], "ast:uninitialized:empty_like"),
    (["    import numpy as np", "    return np.ndarray((3, 4))"], "ast:uninitialized:ndarray"),
    (["    import torch", "    return torch.empty(3)"], "ast:uninitialized:empty"),
    (["    import torch", "    return torch.Tensor(3, 4)"], "ast:uninitialized:Tensor"),
    (["    return x.new_empty(x.shape)"], "ast:uninitialized:new_empty"),
    (["    return x.new(3, 4)"], "ast:uninitialized:new"),
    (["    import torch", "    t = torch.zeros(0)", "    t.resize_(3, 4)", "    return t"], "ast:uninitialized:resize_"),
    # honest: data given, a type named, a pandas frame's emptiness
    (["    import torch", "    return torch.Tensor([1, 2])"], None),
    (["    import numpy as np", "    assert isinstance(x, np.ndarray)", "    return np.zeros_like(x)"], None),
    (["    import pandas as pd", "    return pd.DataFrame(x).empty or x.empty"], None),
])
def test_memory_taken_as_found_is_flagged(tmp_path, lines, flag):
    """An allocator that does not clear what it hands out: returned unwritten, its block can hold a
    temporary the reference or the test freed, the expected answer itself (numpy's small blocks are
    handed out again last-freed first). Flagged with why, unless the paper's own code uses it there."""
    _flag_of_family(tmp_path, lines, flag, "ast:uninitialized:", "without clearing it")


@pytest.mark.parametrize("lines, flag", [
    (["    import numpy as np", "    return np.ma.masked_all(np.shape(x))"], "ast:lenient:masked_all"),
    (["    from numpy import ma", "    return ma.array(x, mask=True)"], "ast:lenient:ma"),
    (["    import matplotlib.cbook as c", "    return c.np.ma.array(x, mask=True)"], "ast:lenient:ma"),
    (["    import numpy as np, io", "    return np.genfromtxt(io.StringIO('1'), usemask=True)"], "ast:lenient:usemask"),
    # honest: torch's masked_fill, a helper and a name of the code's own
    (["    import torch", "    t = torch.as_tensor(x)", "    return t.masked_fill(t > 0, 0).numpy()"], None),
    (["    def masked_mean(a):", "        return a.mean()", "    masked_x = x * 2", "    return masked_mean(masked_x)"], None),
])
def test_library_objects_that_equal_anything_are_flagged(tmp_path, lines, flag):
    """numpy's masked arrays: a masked element is equal to anything for every numpy.testing assertion."""
    _flag_of_family(tmp_path, lines, flag, "ast:lenient:", "equal to anything")


@pytest.mark.parametrize("lines, flag", [
    (["    import torch", "    return torch.tensor([])"], "ast:empty:tensor"),
    (["    import numpy as np", "    return np.array(())"], "ast:empty:array"),
    (["    import torch as T", "    return T.zeros(0)"], "ast:empty:zeros"),
    (["    import numpy as np", "    return np.full((3, 0), 1.0)"], "ast:empty:full"),
    (["    return x.new_zeros(0)"], "ast:empty:new_zeros"),
    (["    return x[:0]"], "ast:empty:slice"),
    (["    return x[..., 0:0]"], "ast:empty:slice"),
    # honest: data, a shape of the input's, slices that keep elements, a list of the code's own
    (["    import torch", "    return torch.tensor([1.0, 2.0]) * x"], None),
    (["    import numpy as np", "    return np.zeros(np.shape(x)) + np.full(3, 0) + np.arange(0, 3)"], None),
    (["    import numpy as np", "    return np.arange(0)"], "ast:empty:arange"),
    (["    return x[:1] + x[0:]"], None),
    (["    out = []", "    out.append(x)", "    return out[0]"], None),
])
def test_an_answer_with_no_element_is_flagged(tmp_path, lines, flag):
    """An empty array broadcast against a scalar passes a check that compares element by element
    (``torch.allclose``, ``np.isclose(...).all()``), which the run cannot watch (torch's are C
    functions that dispatch by identity): made as such, it is flagged where the paper does not."""
    _flag_of_family(tmp_path, lines, flag, "ast:empty:", "no element")


def _flag_of_family(tmp_path, lines, flag, family, why):
    """``lines`` on the probe paper earn ``flag`` (with ``why`` in its note) and no other flag of
    ``family``, or none of it; the paper's own code using the allocator there asks for it."""
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    reading = _reading(paper, "solve", lines)
    if flag:
        assert flag in reading.flags and why in reading.notes[flag], reading
    else:
        assert not [f for f in reading.flags if f.startswith(family)], reading
    if flag == "ast:uninitialized:empty_like":
        own = _paper_with(tmp_path / "own", 'import numpy as np\n\n\ndef solve(x):\n    # <paper2code name="solve">\n'
                                           '    y = np.empty_like(x)\n    y[...] = x\n    return y\n'
                                           '    # </paper2code name="solve">\n')
        assert "ast:uninitialized:empty_like" not in _reading(own, "solve", ["    return np.empty_like(x)"]).flags


@pytest.mark.parametrize("lines, flags", [
    # torch's dispatcher made to run other kernels for every later call (the reference's, the check's)
    (["    import torch as T", "    T.library.impl('aten::isclose', 'cpu', lambda *a, **k: True)", "    return x"],
     {"ast:framework:library"}),
    (["    from torch.library import Library", "    keep = Library('aten', 'IMPL')", "    return x"],
     {"ast:framework:library", "ast:framework:Library"}),
    (["    import torch.library", "    return x"], {"ast:framework:library"}),
    (["    import torch as T", "    T.ops.aten.isclose.default.py_impl(1)(len)", "    g = T._C._EnablePythonDispatcher()",
      "    return x"], {"ast:framework:py_impl", "ast:framework:_EnablePythonDispatcher"}),
    (["    import torch as T", "    T._meta_registrations._meta_lib_dont_use_me_use_register_meta.impl('eq', len)",
      "    return x"], {"ast:framework:_meta_registrations"}),
    # jax: a lowering or differentiation rule of an existing primitive, its eager implementation
    (["    from jax.interpreters import mlir", "    mlir.register_lowering(p, rule, platform='cpu')", "    return x"],
     {"ast:framework:interpreters", "ast:framework:register_lowering"}),
    (["    import jax", "    jax.lax.exp_p.def_impl(len)", "    return x"], {"ast:framework:def_impl"}),
    # raw memory without ctypes' audited calls: an array over any address, or past an array's own
    (["    import argparse", "    a = np.asarray(argparse.Namespace(__array_interface__={'data': (x.ctypes.data, False),"
      " 'shape': (4,), 'typestr': '<f8', 'version': 3}))", "    a[:] = 0", "    return x"],
     {"ast:protocol:__array_interface__", "ast:raw-memory:ctypes"}),
    (["    from numpy.lib.stride_tricks import as_strided", "    return as_strided(x, (9,), (8,))"],
     {"ast:raw-memory:as_strided"}),
    (["    import numpy", "    return numpy.lib.stride_tricks.as_strided(x, (9,), (8,))"], {"ast:raw-memory:as_strided"}),
    # a name looked up by a built string, by a function handed on or by the operator module
    (["    import functools, torch", "    f = functools.reduce(getattr, ['lib' + 'rary'], torch)", "    return x"],
     {"ast:dynamic-getattr"}),
    (["    import operator, torch", "    f = operator.attrgetter('lib' + 'rary')(torch)", "    return x"],
     {"ast:dynamic-getattr"}),
    (["    import operator", "    operator.methodcaller('im' + 'pl', 'eq')(x)", "    return x"], {"ast:dynamic-getattr"}),
    (["    import operator", "    return operator.attrgetter('__class__')(x)"], {"ast:dunder:__class__"}),
    (["    run = eval", "    return run('x')"], {"ast:eval"}),
    # sys as a library re-exports it, and the test's namespace (it holds the reference under its alias)
    (["    import torch", "    return torch.sys.modules['__' + 'main__'].r.f(x)"], {"ast:sys-modules"}),
    (["    import __main__", "    return __main__.r.f(x)"], {"ast:import:__main__"}),
    (["    import torch", "    s = torch.sys", "    return s.modules['__' + 'main__'].r.f(x)"], {"ast:import:sys"}),
    (["    import numpy as np", "    s = getattr(np, 'sys')", "    return s.modules"], {"ast:import:sys"}),
    (["    import pkgutil", "    return pkgutil.resolve_name('__main__:r').f(x)"], {"ast:import:pkgutil"}),
    (["    put = setattr", "    put(x, 'y', 1)", "    return x"], {"ast:dynamic-setattr"}),
])
def test_ways_to_change_a_framework_for_every_call_and_to_names_by_string_are_flagged(tmp_path, lines, flags):
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    reading = _reading(paper, "solve", lines)
    assert flags <= set(reading.flags), reading
    for flag in flags:
        if flag.startswith("ast:framework:"):
            assert reading.notes[flag].startswith("the completion uses"), reading.notes


def test_honest_uses_of_the_same_names_are_not_flagged(tmp_path):
    """getattr called with a literal name, an object's own ``library`` attribute, attrgetter of a
    plain name, numpy's bounded sliding windows, plain keywords: nothing."""
    paper = _paper_with(tmp_path, (PROBE_PSET / "probe" / "solution.py").read_text())
    honest = ["    import operator", "    import numpy as np", "    class Shelf:", "        def __init__(self):",
              "            self.library = []",
              "    s = Shelf()", "    s.library.append(getattr(s, 'library'))", "    key = operator.attrgetter('real')",
              "    w = np.lib.stride_tricks.sliding_window_view(np.arange(5), 3)",
              "    return key(x) + len(s.library) + w.sum() + len(dict(a=1))"]
    assert _reading(paper, "solve", honest).flags == []


def test_a_paper_registering_its_own_operator_asks_for_it(tmp_path):
    """A snippet whose reference registers a custom operator asks a completion to: not held against it."""
    paper = _paper_with(tmp_path, 'import torch\n\n\ndef solve(x):\n    # <paper2code name="solve">\n'
                                  '    lib = torch.library.Library("mine", "DEF")\n    return x\n'
                                  '    # </paper2code name="solve">\n')
    assert _reading(paper, "solve", ["    keep = torch.library.Library('mine', 'DEF')", "    return x"]).flags == []


@pytest.mark.parametrize("shape", sorted(NESTED))
def test_nested_code_is_that_completions_verdict(focal, shape):
    """The host's parser gives up on it (MemoryError, RecursionError) or the tokenizer refuses it:
    the completion fails (``invalid``: not run; ``syntax``: its run fails), nothing is raised."""
    snippet = focal.snippet("stable sigmoid")
    sandbox = get_sandbox("local")
    session = sandbox.open(PaperSpec.from_paper(focal))
    try:
        run = run_task(session, Task(focal, snippet, (NESTED[shape],)), timeout=60)
    finally:
        session.close()
        sandbox.close()
    assert not run.passed and run.category in {"invalid", "syntax"}, (shape, run.category, run.output_tail)
    if run.category == "invalid":
        assert "nested too deeply" in run.output_tail and run.exit_code is None


def test_nested_code_among_correct_samples_costs_them_nothing(focal):
    snippet = focal.snippet("stable sigmoid")
    good = reference_code(focal, snippet)
    tasks = [Task(focal, snippet, good, sample=i) for i in range(2)]
    tasks += [Task(focal, snippet, (NESTED["unary"],), sample=2), Task(focal, snippet, (NESTED["attribute"],), sample=3)]
    runs = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=60)
    assert [(r.sample, r.passed, r.category) for r in runs] == [
        (0, True, None), (1, True, None), (2, False, "invalid"), (3, False, "invalid")]


def test_fences_are_read_in_linear_time():
    """An answer of opening fences alone once took the fence pattern minutes (quadratic)."""
    import time

    started = time.monotonic()
    assert extract_code("```python\n" * 50000) == "```python\n" * 50000
    assert extract_code("x\n```python\nreturn 1\n```\n```js\nno\n```\n") == "return 1\n"
    assert time.monotonic() - started < 2


def test_text_the_sandbox_cannot_write_is_that_completions_verdict(focal):
    snippet = focal.snippet("stable sigmoid")
    sandbox = get_sandbox("local")
    session = sandbox.open(PaperSpec.from_paper(focal))
    try:
        run = run_task(session, Task(focal, snippet, ("    out = '\ud800'",)), timeout=60)
    finally:
        session.close()
        sandbox.close()
    assert not run.passed and run.category == "invalid" and "not valid Unicode text" in run.output_tail


def test_cli_scores_the_samples_beside_a_nested_completion(tmp_path):
    """Issue 20: a completion nested ten thousand deep among four correct samples: four passes, one
    failure, exit 0 and a results file (it once aborted every session, exit 1, no results)."""
    import json
    import subprocess
    import sys

    paper = load_problemset(DEMO).paper("focal-loss")
    snippet = paper.snippet("stable sigmoid")
    good = "\n".join(reference_code(paper, snippet))
    lines = [{"paper": "focal-loss", "snippet": "stable sigmoid", "sample": i, "completion": good} for i in range(4)]
    lines.insert(2, {"paper": "focal-loss", "snippet": "stable sigmoid", "sample": 4,
                     "completion": "    out = " + "-" * 100000 + "1"})
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "benchmark_core", "score", "demo", str(preds), "--papers",
                           "focal-loss", "--backend", "local", "--workers", "2", "--timeout", "60", "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [s for s in json.loads(out.read_text())["snippets"] if s["snippet"] == "stable sigmoid"]
    assert sorted((s["sample"], s["passed"], s["category"]) for s in runs) == [
        (0, True, None), (1, True, None), (2, True, None), (3, True, None), (4, False, "invalid")]
    assert "nested too deeply" in done.stdout


def test_a_decorator_on_the_papers_next_definition_is_read(tmp_path):
    """The completion's last line decorates the definition after its snippet: the decorator is its
    code (read, flagged), though the definition it is attached to starts past its lines."""
    paper = _paper_with(tmp_path, 'class Solver:\n    # <paper2code name="solve">\n    factor = 2\n'
                                  '    # </paper2code name="solve">\n    def solve(self, x):\n        return x * self.factor\n\n\n'
                                  'def solve(x):\n    return Solver().solve(x)\n')
    assert _reading(paper, "solve", ["    factor = 2"]).flags == []
    reading = _reading(paper, "solve", ["    factor = 2", "    @__import__('solution_ref').staticmethod"])
    assert reading.parsed and "ast:scope" in reading.flags and "ast:import:solution_ref" in reading.flags


@pytest.mark.parametrize("msg", [{"proof": {"tests_run": "many"}}, {"proof": [1]}, {"seconds": "soon"},
                                 {"proof": {"tests_run": float("inf")}}])
def test_an_answer_that_cannot_be_decoded_is_that_runs_failure(msg):
    from benchmark_core.sandbox.warm_client import result_from_message

    result = result_from_message(msg, seconds=1.0, why="")
    assert result.exit_code is None and "cannot be read" in result.extra["sandbox_error"]


@pytest.mark.parametrize("lines, changed", [
    (["    helpers.WEIGHTS[:] = 0", "    return x * 0"], "helpers"),
    (["    T['gain'] = 0.0", "    return x * 0"], "helpers"),
    (["    np.copyto(helpers.WEIGHTS, 0)", "    return x * 0"], "helpers"),
    (["    w = helpers.WEIGHTS.reshape(-1)", "    w *= 0", "    return x * 0"], "helpers"),
    (["    import helpers as h", "    h.SCALE = 0", "    return x * 0"], "helpers"),
    (["    from . import helpers as hp", "    hp.TABLE.update(gain=0)", "    return x * 0"], None),  # not a package
    # looked up by a literal name (getattr: no dynamic lookup flagged)
    (["    w = getattr(helpers, 'WEIGHTS')", "    w[:] = 0", "    return x * 0"], "helpers"),
    (["    getattr(helpers, 'WEIGHTS', None).fill(0)", "    return x * 0"], "helpers"),
    # honest: read, copied, the completion's own names
    (["    return x * helpers.WEIGHTS.sum() * T['gain']"], None),
    (["    w = helpers.WEIGHTS.copy()", "    w[:] = 0", "    return x + w.sum()"], None),
    (["    table = dict(T)", "    table['gain'] = 0", "    return x * table['gain']"], None),
])
def test_what_a_module_of_the_paper_holds_changed_in_place_is_flagged(tmp_path, lines, changed):
    """A module of the paper's own that the reference imports too (``helpers``): an array or a table
    it holds changed in place changes what the reference computes. The run's guard sees a module's
    names rebound and its tables written (``audit:paper-module``), not an array's contents: the
    reading names the forms it can see (``ast:mutates-module``), unless the paper's own code there
    changes it too."""
    paper = _paper_with(tmp_path, 'import numpy as np\n\nimport helpers\nfrom helpers import TABLE as T\n\n\n'
                                  'def solve(x):\n    # <paper2code name="solve">\n    return x * 2\n'
                                  '    # </paper2code name="solve">\n')
    (tmp_path / "pset" / "probe" / "helpers.py").write_text(
        "import numpy as np\n\nSCALE = 2.0\nWEIGHTS = np.arange(5.0)\nTABLE = {'gain': 1.5}\n")
    paper = load_problemset(tmp_path / "pset").paper("probe")
    reading = _reading(paper, "solve", lines)
    if changed:
        assert "ast:mutates-module" in reading.flags and changed in reading.notes["ast:mutates-module"], reading
    else:
        assert "ast:mutates-module" not in reading.flags, reading
    assert "ast:mutates-argument" not in reading.flags, reading
    # the paper's own code changing it there asks a completion to
    own = tmp_path / "own"
    shutil.copytree(tmp_path / "pset", own)
    (own / "probe" / "solution.py").write_text(
        'import numpy as np\n\nimport helpers\n\n\ndef solve(x):\n    # <paper2code name="solve">\n'
        '    helpers.WEIGHTS[:] = 0\n    return x * 2\n    # </paper2code name="solve">\n')
    assert "ast:mutates-module" not in _reading(load_problemset(own).paper("probe"), "solve",
                                                ["    helpers.WEIGHTS *= 0", "    return x * 2"]).flags


def test_the_imports_read_are_every_import_of_the_file_wherever_it_stands():
    """The static reading (and the import scans) take a file's imports from its statements only
    (``warm.scan.import_statements``), not from every node: the same imports, in the file's order,
    as a walk of the whole tree finds."""
    import ast

    from benchmark_core.sandbox.warm.scan import import_statements

    source = (
        "import a\nimport b.c as bc\nfrom . import d\n"
        "def f():\n    import e\n    if x:\n        from g import h\n    else:\n        import i\n"
        "    for _ in y:\n        import j\n    else:\n        import k\n"
        "class C:\n    import l\n    def m(self):\n        try:\n            import n\n"
        "        except E:\n            import o\n        finally:\n            import p\n"
        "while z:\n    with w:\n        import q\n"
        "match v:\n    case 1:\n        import r\n"
        "x = lambda: __import__('s')\n"
    )
    tree = ast.parse(source)
    walked = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))),
                    key=lambda n: (n.lineno, n.col_offset))
    assert import_statements(tree) == walked
    assert len(walked) == 14


def test_the_papers_file_is_read_once_for_all_its_snippets(focal):
    """Each snippet's reading of the paper's own code at its place reads the paper's file, which is
    the same for all its snippets: it is parsed once (the host read a real paper's file whole once a
    snippet, ~20 ms a run on a 500-line file)."""
    from benchmark_core import tamper

    tamper._paper_file_read.cache_clear()
    tamper._reference_scope.cache_clear()
    snippets = [s for s in focal.snippets if s.file == focal.snippets[0].file]
    assert len(snippets) > 2
    for snippet in snippets:
        reading = _reading(focal, snippet.name, reference_code(focal, snippet))
        assert reading.parsed and not reading.flags, (snippet.name, reading)
    info = tamper._paper_file_read.cache_info()
    assert (info.misses, info.hits) == (1, len(snippets) - 1)


def _demo_tasks() -> list[Task]:
    """Every demo prediction of ``demo-imperfect`` (flagged ones among them) and two the host's parser
    gives up on."""
    demo = load_problemset(DEMO)
    predictions, problems = parse_predictions((DEMO / "predictions" / "demo-imperfect.jsonl").read_bytes(), demo)
    assert not problems
    tasks = []
    for p in predictions:
        paper = demo.paper(p.paper)
        snippet = paper.snippet(p.snippet, p.file)
        tasks.append(Task(paper, snippet, tuple(completion_lines(p.completion)), sample=p.sample))
    focal = demo.paper("focal-loss")
    nested = [Task(focal, focal.snippet("stable sigmoid"), (NESTED[shape],)) for shape in ("unary", "attribute")]
    return tasks[:10] + nested + tasks[10:]


def test_readings_made_ahead_are_the_ones_a_worker_makes():
    """The host's reading of each task's file, made ahead while the sandbox starts (``_ReadingsAhead``),
    is the one the worker would make (file and flags); one the host cannot read is left to the
    worker, whose run of it then gives the ``invalid`` verdict as before."""
    import threading

    from benchmark_core import runner

    tasks = _demo_tasks()
    ahead = runner._ReadingsAhead(tasks, list(range(len(tasks))), threading.Event())
    ahead.thread.join(120)
    assert not ahead.thread.is_alive()
    flagged = 0
    for index, task in enumerate(tasks):
        made = ahead.take(index)
        if task.code[0] in (NESTED["unary"], NESTED["attribute"]):
            assert made is None
            continue
        assert made is not None, index
        text, reading = runner.task_read(task)
        assert made[0] == text and made[1] == reading, index
        flagged += bool(reading.flags)
    assert flagged  # the demo's tampering prediction is read as flagged ahead too
    assert ahead.take(0) is None  # taken once


def test_readings_ahead_are_bounded_and_stop_with_the_scoring(monkeypatch):
    import threading
    import time

    from benchmark_core import runner

    monkeypatch.setattr(runner, "READINGS_AHEAD", 3)
    tasks = [t for t in _demo_tasks() if t.code[0] not in NESTED.values()]
    halted = threading.Event()
    ahead = runner._ReadingsAhead(tasks, list(range(len(tasks))), halted)
    deadline = time.monotonic() + 60
    while len(ahead.ready) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert sorted(ahead.ready) == [0, 1, 2]  # in the workers' order, no more than the bound
    assert ahead.take(1) is not None  # room for one more: the next in order
    while 3 not in ahead.ready and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(ahead.ready) == [0, 2, 3]
    ahead.take(5)  # a worker that came first reads its own: never made ahead after that
    ahead.take(0)
    while 4 not in ahead.ready and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert sorted(ahead.ready) == [2, 3, 4] and 5 not in ahead.ready
    halted.set()
    ahead.thread.join(5)
    assert not ahead.thread.is_alive()
