"""The watch of the paper's functions around the snippets (``benchmark_core/sandbox/warm/watch.py``),
in this process: a watched function behaves as it was written (its lines, names, locals, docstring,
tracebacks, ``super()``), what a call changed of what it was handed is reported with the function and
the path, a nested call is left to the outermost, and a call of the watch from anywhere but the
places it compiled is reported. The runs' side is in ``tests/probes/test_watched_calls.py``."""
from __future__ import annotations

import builtins
import traceback

import numpy as np
import pytest

from benchmark_core.annotation import TAG_RE
from benchmark_core.sandbox.warm import watch

SOURCE = '''import numpy as np


class Base:
    def scale(self):
        return 2.0


class Model(Base):
    def __init__(self, W):
        self.W = W

    def __call__(self, x, *rest, k=1.0, **more):
        """Apply the model."""
        # <paper2code name="call">
        seen = sorted(locals())
        y = x @ self.W * super().scale() * k
        # </paper2code name="call">
        return y, seen


def fails(x):
    # <paper2code name="fails">
    return x[10]
    # </paper2code name="fails">


def outer(x):
    # <paper2code name="outer">
    def inner(v):
        v[...] = 0.0
        return v
    return inner(x)
    # </paper2code name="outer">


def gen(x):
    # <paper2code name="gen">
    yield x
    # </paper2code name="gen">


def deferred(x):
    # <paper2code name="deferred">
    import weakref

    class Holder:
        pass

    held = Holder()
    weakref.finalize(held, x.fill, 0.0)  # runs as the call's frame goes, after its finally
    return float(x.sum())
    # </paper2code name="deferred">


def unknown(f):
    return f


@unknown
def decorated(x):
    # <paper2code name="decorated">
    return x
    # </paper2code name="decorated">


def untouched(x):
    return x
'''


@pytest.fixture
def watched():
    """(namespace of SOURCE run watched, namespace run plainly, the events reported, finish, late)."""
    yield from _watched_source(SOURCE)


def _watched_source(source: str):
    events: list = []
    watch_fn, compile_for, finish, late = watch.watcher(lambda event, detail: events.append((event, detail)), [0])
    builtins.__dict__[watch.HOOK] = watch_fn

    class Loader:
        def get_data(self, path):
            return source.encode()

    try:
        import types

        module = types.ModuleType("model_w")
        module.__file__ = "/paper/model_w.py"
        compile_for(lambda m: pytest.fail("the module was not watched"), Loader(), "/paper/model_w.py")(module)
        plain: dict = {"__name__": "model_p"}
        exec(compile(source, "/paper/model_w.py", "exec"), plain)  # noqa: S102 - the test's own source
        yield module.__dict__, plain, events, finish, late
    finally:
        builtins.__dict__.pop(watch.HOOK, None)


def test_the_snippet_tag_is_the_hosts():
    assert watch.SNIPPET_TAG.pattern == TAG_RE.pattern


def test_a_completions_own_tags_do_not_narrow_its_snippet():
    text = ('def f(x):\n    # <paper2code name="a">\n    # </paper2code name="a">\n    x[0] = 1\n'
            '    # <paper2code name="a">\n    # </paper2code name="a">\n    return x\n')
    assert watch.snippet_regions(text) == [(2, 6)]


def test_a_watched_function_behaves_as_written(watched):
    mine, plain, events, _finish, _late = watched
    W, x = np.eye(3), np.ones((2, 3))
    got, seen = mine["Model"](W)(x, 5, k=3.0)
    want, seen_plain = plain["Model"](W)(x, 5, k=3.0)
    np.testing.assert_array_equal(got, want)
    assert seen == seen_plain  # no local of the watch's: locals() is the function's own
    call, call_plain = mine["Model"].__call__, plain["Model"].__call__
    assert call.__doc__ == call_plain.__doc__ == "Apply the model."
    for name in ("co_firstlineno", "co_varnames", "co_argcount", "co_kwonlyargcount", "co_freevars"):
        assert getattr(call.__code__, name) == getattr(call_plain.__code__, name), name
    lines = []
    for space in (mine, plain):
        try:
            space["fails"](np.ones(2))
        except IndexError as error:
            lines.append([(f.lineno, f.line) for f in traceback.extract_tb(error.__traceback__)][-1])
    assert lines[0] == lines[1] and lines[0][0] == SOURCE.splitlines().index("    return x[10]") + 1
    # not watched: a generator, a function under a decorator that may read its bytecode, one outside
    for name in ("gen", "decorated", "untouched"):
        assert mine[name].__code__.co_code == plain[name].__code__.co_code, name
    assert events == []


def test_what_a_call_changed_is_reported_with_its_path(watched):
    """Looked at where the next outermost call starts, as a test case stops (``late``) and at the
    test's end; the test's own change between calls is reported too (the reference run's watch
    reports it as well, and the host compares the two)."""
    mine, _plain, events, finish, late = watched
    W = np.eye(3)
    model = mine["Model"](W)
    model(np.ones((2, 3)))
    mine["outer"](np.ones(3))  # inner (watched too) changed it: once, for the outermost call
    assert events == []
    late()
    assert events == [("rcb.changed", "outer:x")]
    events.clear()
    model(np.ones((2, 3)))
    W[0, 0] = 5.0  # the test's own change
    model(np.ones((2, 3)))
    assert events == [("rcb.changed", "Model.__call__:self.W")]
    finish()
    assert events == [("rcb.changed", "Model.__call__:self.W")]


def test_a_call_of_the_watch_from_elsewhere_is_reported(watched):
    mine, _plain, events, finish, _late = watched
    hook = builtins.__dict__[watch.HOOK]
    hook()  # an exit no watched function made
    hook("outer", (), ())
    assert events == [("rcb.watch", "forged")]
    mine[watch.HOOK] = hook  # a watched module defining the builtin's name shadows it
    finish()
    assert ("rcb.watch", "shadowed") in events


def test_what_changes_after_the_call_returned_is_seen_at_the_next_look(watched):
    """A finalizer of an object of the call's runs as its frame goes, after the watch's ``finally``:
    what the call was handed is looked at later, at the next outermost call, each test case's end
    (``late``) or the run's end."""
    mine, _plain, events, _finish, late = watched
    x = np.ones(4)
    assert mine["deferred"](x) == 4.0 and not x.any()  # changed once the call returned
    assert events == []
    late()
    assert events == [("rcb.changed", "deferred:x")]


def test_the_next_outermost_call_looks_at_the_last_ones_inputs(watched):
    mine, _plain, events, _finish, _late = watched
    mine["deferred"](np.ones(4))
    assert events == []
    mine["Model"](np.eye(3))(np.ones((2, 3)))
    assert events == [("rcb.changed", "deferred:x")]


def test_the_calls_are_found_in_the_bytes_as_dis_finds_them(monkeypatch):
    nested = ('try:\n    import numpy\nexcept ImportError:\n    pass\nelse:\n    if True:\n        def f(x):\n'
              '            # <paper2code name="f">\n            return x\n            # </paper2code name="f">\n')
    for source in (SOURCE, nested):
        code, genuine = watch.instrument(source.encode(), "/paper/m.py")
        assert genuine, source[:40]  # functions under try/else/if are found too
        fast = {c.co_name: watch._hook_calls(c) for c in genuine}
        monkeypatch.setattr(watch, "_opcode_module", object())  # the layout unknown: through dis
        assert {c.co_name: watch._hook_calls(c) for c in genuine} == fast
        monkeypatch.undo()
        assert all(len(calls) == 3 for calls in fast.values())  # one entry, the finally's two exits


def test_the_plain_values_of_what_a_call_was_handed_are_watched_by_their_places(watched):
    """A configuration's number changed (``cfg.scale = 0``, ``steps[0] = 0``) bends a reference that
    reads it; a value added (a history appended to, a new attribute) does not, and is not reported."""
    import types

    mine, _plain, events, _finish, late = watched
    cfg = types.SimpleNamespace(W=np.eye(3), scale=2.0, steps=[1.0, 2.0])
    model = mine["Model"](cfg.W)
    model(np.ones((2, 3)), cfg)
    cfg.seen = True
    cfg.steps.append(3.0)
    late()
    assert events == []
    model(np.ones((2, 3)), cfg)
    cfg.scale = 0.0
    cfg.steps[0] = 0.0
    late()
    assert sorted(events) == [("rcb.changed", "Model.__call__:rest[0]"), ("rcb.changed", "Model.__call__:rest[0].steps")]


def test_the_host_compares_the_watchs_events_with_the_reference_runs_by_what_they_say():
    """Where a change was found (the next call, a test case's end: the event's caller) is the
    look's, not the change's: the same function and path in the reference run's trail is the paper's
    own doing. A change it did not make is a review flag; the watch called from elsewhere fails."""
    from benchmark_core.tamper import audit_verdict

    def event(name, detail, caller="paper"):
        return {"event": name, "detail": detail, "caller": caller, "paper": caller == "paper"}

    reference = {"events": [event("rcb.changed", "step:p", "std:case.py"), event("rcb.watch", "spent:bytes")]}
    same = {"events": [event("rcb.changed", "step:p"), event("rcb.watch", "spent:bytes", "std:case.py")]}
    assert audit_verdict(same, reference)[:2] == ([], [])
    other = {"events": [event("rcb.changed", "step:g"), event("rcb.watch", "spent:step")]}
    assert audit_verdict(other, reference)[:2] == ([], ["audit:input-changed", "audit:watch-spent"])
    assert audit_verdict({"events": [event("rcb.watch", "forged")]}, reference)[0] == ["tampering:watch"]


TRACED = '''import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x):
        # <paper2code name="forward">
        return torch.relu(self.a(x))
        # </paper2code name="forward">
'''


def test_a_call_torch_traces_is_not_read(watched):  # (the fixture puts the builtin back)
    """``torch.jit.trace`` records every tensor op: the watch reading a tensor's bytes in the call
    it traces made torch warn ("Converting a tensor to a NumPy array might cause the trace to be
    incorrect", dozens of times), which a fresh interpreter does not print."""
    import types
    import warnings

    torch = pytest.importorskip("torch")
    events: list = []
    watched_calls = watch.watcher(lambda event, detail: events.append((event, detail)), [0])
    builtins.__dict__[watch.HOOK] = watched_calls[0]

    class Loader:
        def get_data(self, path):
            return TRACED.encode()

    module = types.ModuleType("net_w")
    watched_calls[1](lambda m: None, Loader(), "/paper/net_w.py")(module)
    net = module.Net()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.jit.trace(net, torch.randn(2, 4))
    assert not [w for w in seen if "might cause the trace" in str(w.message)], [str(w.message)[:80] for w in seen]
    net(torch.randn(2, 4))  # outside the trace it is watched as any call
    watched_calls[3]()
    assert events == []


# -- a file its server compiled ahead: a run parses only what its completion changed (``prepare``)

PAPER_FILE = '''"""A paper's model."""
from __future__ import annotations
import numpy as np


def helper(a):
    return a * 2


class Layer:
    """A layer."""

    scale = 2

    def __init__(self, w):
        self.__w = w
        # <paper2code name="init">
        self.w = np.asarray(w)
        # </paper2code name="init">

    @staticmethod
    def const():
        return 1

    def forward(self, x: np.ndarray) -> np.ndarray:
        # <paper2code name="forward">
        y = x @ self.w
        # <paper2code name="act">
        y = np.maximum(y, 0)
        # </paper2code name="act">
        return y + helper(0) + (lambda q: q)(0)
        # </paper2code name="forward">

    def gen(self):
        yield 1

    class Inner:
        def deep(self, v):
            # <paper2code name="deep">
            return super().__init__ or v
            # </paper2code name="deep">


@staticmethod
def loss(a, b):
    # <paper2code name="loss">
    d = a - b
    return (d * d).mean()
    # </paper2code name="loss">


def untouched(z):
    return z
'''

#: what a completion may be (at the snippet's indentation); the last two do not parse as the file
ANSWERS = (
    ["pass"], [], ["x = 1", "x = 2", "return x"], ["y = [i for i in range(3)]", "z = lambda: y", "return z()"],
    ["def inner(q):", "    return q", "return inner(1)"], ["yield 5"], ["return __secret"],
    ["<<def newtop(a):", "<<    return a"], ['# <paper2code name="loss">', "return 3"], ["'''", "return 1"], ["return ("],
)


def _answered(text: str, name: str, answer: list[str], newline: str = "\n") -> bytes:
    lines = text.split("\n")
    opening = next(i for i, line in enumerate(lines) if f'<paper2code name="{name}">' in line and "</" not in line)
    closing = next(i for i, line in enumerate(lines) if f'</paper2code name="{name}">' in line)
    indent = lines[opening][:len(lines[opening]) - len(lines[opening].lstrip())]
    body = [line[2:] if line.startswith("<<") else indent + line for line in answer]
    return newline.join(lines[:opening + 1] + body + lines[closing:]).encode()


def _same_code(a, b, path: str = "module") -> None:
    assert a == b, path
    assert (a.co_qualname, a.co_filename) == (b.co_qualname, b.co_filename), path
    inner = [c for c in a.co_consts if isinstance(c, type(a))]
    assert len(inner) == len([c for c in b.co_consts if isinstance(c, type(a))]), path
    for x, y in zip(inner, [c for c in b.co_consts if isinstance(c, type(a))]):
        _same_code(x, y, path + "/" + x.co_qualname)


def _offsets(genuine: dict) -> list:
    return sorted((c.co_qualname, c.co_firstlineno, sorted(e), sorted(l)) for c, (e, l) in genuine.items())


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_run_compiles_what_its_completion_changed_as_the_whole_file_would_be(tmp_path, monkeypatch, newline):
    """Every snippet of a file with classes, nested classes, decorators, a future import, lambdas
    and a generator, answered in many ways: the code a run makes from its server's compiled file
    and the completion's statements alone is the code the whole file's parse makes, to the
    qualified names, file names and the watch's places; what cannot be told so is parsed whole."""
    original = PAPER_FILE.replace("\n", newline)
    (tmp_path / "model.py").write_bytes(original.encode())
    monkeypatch.setattr(watch, "PREPARED", {})
    watch.prepare(str(tmp_path), ["model.py", "paper2code_test.py"])
    assert list(watch.PREPARED) == ["model.py"]
    run_file = "/runs/r1/paper/model.py"
    cases, parsed_anew = 0, 0
    for name in ("init", "forward", "act", "deep", "loss"):
        for answer in ANSWERS:
            source = _answered(PAPER_FILE, name, answer, newline)
            text = source.decode()
            try:
                compile(source, run_file, "exec", dont_inherit=True)
            except SyntaxError:
                assert watch._instrument_changed(source, watch.snippet_regions(text), run_file,
                                                 watch.PREPARED["model.py"]) is None
                continue
            whole = watch._instrument_whole(source, text, watch.snippet_regions(text), run_file)
            fast = watch._instrument_changed(source, watch.snippet_regions(text), run_file, watch.PREPARED["model.py"])
            cases += 1
            if fast is None:  # (a completion that moves the file's structure, or widens a snippet)
                continue
            parsed_anew += 1
            _same_code(fast[0], whole[0])
            assert _offsets(fast[1]) == _offsets(whole[1]), (name, answer)
            assert instrument_used(monkeypatch, source, run_file) == "changed"
    assert (cases, parsed_anew) == (38, 33), (cases, parsed_anew)  # (five widen a snippet or move the file)
    same = watch._instrument_changed(original.encode(), watch.snippet_regions(original), run_file,
                                     watch.PREPARED["model.py"])  # the reference run: all the server's
    _same_code(same[0], watch._instrument_whole(original.encode(), original, watch.snippet_regions(original),
                                                run_file)[0])


def instrument_used(monkeypatch, source: bytes, filename: str) -> str:
    """Which way ``instrument`` made the code: "changed" (the server's file) or "whole"."""
    used = []
    whole = watch._instrument_whole

    def counted(*args):
        used.append("whole")
        return whole(*args)

    monkeypatch.setattr(watch, "_instrument_whole", counted)
    assert watch.instrument(source, filename) is not None
    monkeypatch.setattr(watch, "_instrument_whole", whole)
    return used[0] if used else "changed"


def test_what_the_server_compiled_is_not_trusted_where_the_file_says_otherwise(tmp_path, monkeypatch):
    """A completion that puts a future import at the top changes how every later function
    compiles: the server's code is not used for them. A file in another encoding, or of another
    name, is parsed whole."""
    (tmp_path / "model.py").write_text(PAPER_FILE)
    monkeypatch.setattr(watch, "PREPARED", {})
    watch.prepare(str(tmp_path), ["model.py"])
    plain = PAPER_FILE.replace("from __future__ import annotations\n", "")
    (tmp_path / "plain.py").write_text(plain)
    watch.prepare(str(tmp_path), ["plain.py"])
    run_file = "/runs/r2/paper/plain.py"
    changed = ("from __future__ import annotations\n" + plain.replace('"""A paper\'s model."""\n', "", 1)).encode()
    assert instrument_used(monkeypatch, changed, run_file) == "whole"
    whole = watch.instrument(changed, run_file)
    annotated = next(c for c in whole[0].co_consts if getattr(c, "co_name", "") == "Layer")
    assert "np.ndarray" in annotated.co_consts  # (annotations as text: the future import applied)
    coded = ("# -*- coding: latin-1 -*-\n" + plain).encode("latin-1")
    assert instrument_used(monkeypatch, coded, run_file) == "whole"
    assert instrument_used(monkeypatch, plain.encode(), "/runs/r2/paper/other.py") == "whole"


#: a completion that keeps what its first call was handed and changes it in its next call, which
#: is handed something else: the test compares the first answer with the reference afterwards
STASHING = '''import numpy as np

_kept = []


def step(x, cfg):
    # <paper2code name="step">
    if _kept:
        old, old_cfg = _kept.pop()
        old[...] = 0.0
        old_cfg["gain"] = 0.0
    else:
        _kept.append((x, cfg))
    return float(x.sum())
    # </paper2code name="step">


def honest(x, cfg):
    # <paper2code name="honest">
    return float(x.sum()) * cfg["gain"]
    # </paper2code name="honest">
'''


@pytest.fixture
def stashing():
    yield from _watched_source(STASHING)


def test_a_change_to_an_earlier_calls_inputs_made_in_a_later_call_is_seen(stashing):
    """The next call looks at the last one's inputs as it starts; what the last call was handed
    and the next was not is watched until the test case ends, so a change the next call makes to
    it is seen there (``late``), or where a later call is handed it again."""
    mine, _plain, events, _finish, late = stashing
    x1, x2, c1, c2 = np.ones(3), np.ones(3), {"gain": 1.0}, {"gain": 1.0}
    mine["step"](x1, c1)
    mine["step"](x2, c2)  # zeroes x1 and c1's gain, after x1 was looked at
    assert not x1.any() and c1["gain"] == 0.0
    mine["honest"](x2, c2)
    assert events == []
    late()
    assert sorted(events) == [("rcb.changed", "step:cfg"), ("rcb.changed", "step:x")]


def test_an_earlier_calls_input_handed_again_is_compared_there(stashing):
    mine, _plain, events, _finish, _late = stashing
    y1, y2 = np.ones(3), np.ones(3)
    mine["step"](y1, {"gain": 1.0})
    mine["step"](y2, {"gain": 1.0})
    mine["honest"](y1, {"gain": 1.0})  # handed again, before the test case's end: compared there
    assert events == [("rcb.changed", "step:x")]


def test_honest_calls_over_many_inputs_are_not_reported_and_let_go_as_the_case_ends(stashing, monkeypatch):
    """What earlier calls were handed is held until the test case ends (a test's locals are gone
    when it stops: ``KEEP_MAX`` bytes of them), then let go; past that, only while the test holds it."""
    import gc
    import weakref

    mine, _plain, events, finish, late = stashing
    inputs = [np.full(3, float(i)) for i in range(5)]
    config = {"gain": 2.0}
    for x in inputs:
        mine["honest"](x, config)
    config["more"] = 1.0  # a value added is not a change
    held = weakref.ref(inputs[0])
    del inputs[0], x
    gc.collect()
    assert held() is not None  # the test let it go: the watch holds it until the case ends
    late()
    gc.collect()
    assert held() is None
    monkeypatch.setattr(watch, "KEEP_MAX", 0)
    for x in inputs:
        mine["honest"](x, config)
    gone = weakref.ref(inputs[0])
    del inputs[0], x
    gc.collect()
    assert gone() is None  # past KEEP_MAX: weakly
    late()
    finish()
    assert events == []


def test_the_compile_runs_under_the_hooks_flag_and_only_on_plain_bytes_and_names(monkeypatch):
    """Only our code runs while a module is compiled watched: its events (``compile``, the
    ``code.__new__`` of each code object moved from the server's) are not reported, as the library
    guard's own are not; a file name or source of a subclass (whose methods would run under the
    flag) is not compiled watched at all."""
    import threading
    import types

    busy, seen, plain = [0], [], []
    real = watch.instrument
    monkeypatch.setattr(watch, "instrument", lambda source, name: seen.append(busy[0]) or real(source, name))
    builtins.__dict__[watch.HOOK] = watch.watcher(lambda event, detail: None, busy)[0]
    _watch_fn, compile_for, _finish, _late = watch.watcher(lambda event, detail: None, busy)

    class Loader:
        def get_data(self, path):
            return SOURCE.encode()

    class Name(str):
        pass

    try:
        compile_for(lambda m: pytest.fail("not watched"), Loader(), "/paper/m.py")(types.ModuleType("m"))
        assert seen == [threading.get_ident()] and busy == [0]
        compile_for(lambda m: plain.append(m), Loader(), Name("/paper/m.py"))(types.ModuleType("m"))
        assert len(seen) == 1 and len(plain) == 1
    finally:
        builtins.__dict__.pop(watch.HOOK, None)


def test_a_failure_of_the_changed_parts_compile_falls_back_to_the_whole_file(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(PAPER_FILE)
    monkeypatch.setattr(watch, "PREPARED", {})
    watch.prepare(str(tmp_path), ["model.py"])

    def broken(*args):
        raise RecursionError("deep")

    monkeypatch.setattr(watch, "_instrument_changed", broken)
    made = watch.instrument(PAPER_FILE.encode(), "/runs/r3/paper/model.py")
    assert sorted(code.co_qualname for code in made[1]) == ["Layer.Inner.deep", "Layer.__init__", "Layer.forward",
                                                           "loss"]  # watched all the same


def test_the_papers_other_modules_compiled_ahead_are_taken_only_where_they_read_the_same(tmp_path, monkeypatch):
    """``prepare_plain``: the files of the modules a reference run named (``a.b``: ``a/b.py``,
    ``a/b/__init__.py``, or a file whose dotted path ends in it), never a file compiled watched or the
    test script; a run takes one's code only when its file reads the same, at its own path."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for rel in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/ops.py", "src/tools.py", "model_ref.py",
                "unused.py", "paper2code_test.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"NAME = {rel!r}\n\n\ndef f():\n    return NAME\n")
    (tmp_path / "model.py").write_text(PAPER_FILE)
    files = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.py")]
    monkeypatch.setattr(watch, "PREPARED", {})
    monkeypatch.setattr(watch, "PLAIN", ())
    watch.prepare(str(tmp_path), files)
    watch.prepare_plain(str(tmp_path), files, ["numpy", "pkg", "pkg.sub.ops", "tools", "model", "model_ref",
                                               "paper2code_test", "__main__"])
    assert [entry[0] for entry in watch.PLAIN] == ["model_ref.py", "pkg/__init__.py", "pkg/sub/ops.py", "src/tools.py"]
    run_file = "/runs/r7/paper/pkg/sub/ops.py"
    entry_of, code_of = watch._plain_taker(watch.PLAIN)
    entry = entry_of(run_file)
    source = (tmp_path / "pkg/sub/ops.py").read_bytes()
    code = code_of(entry, source, run_file)
    assert code == compile(source, run_file, "exec", dont_inherit=True)
    assert {c.co_filename for c in (code, *[k for k in code.co_consts if hasattr(k, "co_filename")])} == {run_file}
    assert code_of(entry, source.replace(b"NAME =", b"NAME="), run_file) is None
    assert entry_of("/runs/r7/paper/other.py") is None
    # what a run's set-up took is what its imports get, whatever the module's globals say later
    monkeypatch.setattr(watch, "PLAIN", ())
    monkeypatch.setattr(watch, "_moved", lambda *args: pytest.fail("looked up again"))
    assert entry_of(run_file) is entry and code_of(entry, source, run_file) == code
