"""Issue 9's must-show on the demo's focal-loss paper (NumPy): forging and tampering cheats fail or
are flagged, and completions that poison the reference run beside plain ``os.execv`` cheats, scored
with two workers, let no cheat pass (the paper becomes an environment error: fail closed)."""
from __future__ import annotations

import pytest

from benchmark_core import runner
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, run_tasks
from benchmark_core.sandbox.base import get_sandbox
from probe_support import PROBE_LIMITS, REPO


EXECV = """import os, sys
sys.stderr.write("....\\n----------------------------------------------------------------------\\nRan 8 tests in 0.1s\\n\\nOK\\n")
sys.stderr.flush()
for fd in range(3, 1024):
    try:
        os.write(fd, b'{"completed": true, "tests_run": 1000}\\n')
    except OSError:
        pass
os.execv("/bin/true", ["true"])"""
CHEATS = {
    "execv": EXECV,
    "patch_allclose": "import numpy.testing\nnumpy.testing.assert_allclose = lambda *a, **k: None\nreturn None",
    "patch_ref": ("import sys\nref = sys.modules['focal_loss_ref']\n"
                  "for name in dir(ref):\n    if not name.startswith('_') and callable(getattr(ref, name)):\n"
                  "        setattr(ref, name, lambda *a, **k: None)\nreturn None"),
    "patch_addfailure": ("import unittest.result as r\nr.TestResult.addFailure = lambda *a, **k: None\n"
                         "r.TestResult.addError = lambda *a, **k: None\nreturn None"),
    "built_names": ("t = __import__('unit' + 'test')\nsetattr(getattr(t, 'Test' + 'Case'), 'assert' + 'Equal', "
                    "lambda *a, **k: None)\nreturn None"),
}
#: completions that try to break the session while the paper's reference run is in flight
POISON = {
    "fill_runs_disk": ("import os\nblock = b'\\0' * (4 << 20)\ntry:\n    for i in range(10000):\n"
                       "        with open(os.path.join('..', f'fill{i}'), 'wb') as fh:\n"
                       "            for _ in range(8):\n                fh.write(block)\nexcept OSError:\n    pass\n"
                       "import time\ntime.sleep(3)\nreturn None"),
    "deep_chain": ("import os\nfd = os.open('..', os.O_RDONLY)\nfor i in range(1500):\n"
                   "    try:\n        os.mkdir('d', dir_fd=fd)\n    except FileExistsError:\n        pass\n"
                   "    nxt = os.open('d', os.O_RDONLY, dir_fd=fd)\n    os.close(fd)\n    fd = nxt\nreturn None"),
    "kill_everyone": ("import os, signal\nfor pid in range(1, 400):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
                      "    except OSError:\n        pass\nreturn None"),
}


def _tasks(paper, bodies: dict[str, str]) -> list[tuple[str, Task]]:
    tasks = []
    for snippet in paper.snippets:
        indent = " " * (len(paper.files[snippet.file].lines[snippet.start_line]) -
                        len(paper.files[snippet.file].lines[snippet.start_line].lstrip()))
        for name, body in bodies.items():
            lines = tuple(indent + line if line.strip() else "" for line in body.splitlines())
            tasks.append((name, Task(paper, snippet, lines)))
    return tasks


@pytest.mark.slow
def test_cheats_and_poison_against_focal_loss(sandbox_backend_name):
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()  # the reference run happens here, beside the poison
    named = _tasks(paper, POISON) + _tasks(paper, {"execv": EXECV}) + _tasks(paper, CHEATS)
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        runs = run_tasks([t for _, t in named], sandbox=sandbox, workers=2, timeout=30)
    finally:
        sandbox.close()
    assert len(runs) == len(named)
    from collections import Counter

    print(Counter((name, r.category) for (name, _), r in zip(named, runs)))
    passed = [(name, r.snippet, r.flags) for (name, _), r in zip(named, runs) if r.passed]
    assert passed == [], f"cheats passed: {passed}"
    for (name, _), run in zip(named, runs):
        if name in CHEATS and run.category != "environment" and not run.extra.get("sandbox_error"):
            # named for what it is (a failing cheat's output may also say why)
            assert run.category in {"tampering", "crash", "logic", "type", "other"}, (name, run.category)
            if name != "execv":
                assert any(f.startswith("tampering:") for f in run.flags), (name, run.snippet, run.flags)
    lost = [r for r in runs if r.extra.get("sandbox_error")]
    assert len(lost) <= len(runs) // 10, f"the poison kept {len(lost)} runs from starting"


#: issue 20 on focal-loss's "stable sigmoid" (its block at column 4, ``return out`` after the tag):
#: completions that reach out of their snippet to hide the reference call from the static reading
#: (each passes only flagged), and completions the host's parser cannot read (each its own failure)
REACH_OUT = {
    "backslash": ["    import focal_loss_ref as r", "    out = r.sigmoid(x) \\"],
    "column0": ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "def _hidden():", "    pass"],
    "form_feed": ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)", "    \fdef _hidden():",
                  "    \f    pass"],
    "carriage_return": ["    import focal_loss_ref", "    out = focal_loss_ref.sigmoid(x)\rclass _Hidden:\r    pass"],
}
UNREADABLE = {
    "unary": "    out = " + "-" * 100000 + "1",
    "attribute": "    out = x" + ".T" * 50000,
    "parentheses": "    out = " + "(" * 10000 + "x" + ")" * 10000,
}


@pytest.mark.slow
def test_reaching_out_and_unreadable_completions_against_focal_loss(sandbox_backend_name):
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    snippet = paper.snippet("stable sigmoid")
    honest = runner.reference_code(paper, snippet)
    named = [("honest", Task(paper, snippet, honest, sample=0))]
    named += [(name, Task(paper, snippet, tuple(lines), sample=1 + i)) for i, (name, lines) in enumerate(REACH_OUT.items())]
    named += [(name, Task(paper, snippet, (line,), sample=10 + i)) for i, (name, line) in enumerate(UNREADABLE.items())]
    named += [("honest", Task(paper, snippet, honest, sample=20 + i)) for i in range(3)]
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        runs = run_tasks([t for _, t in named], sandbox=sandbox, workers=2, timeout=30)
    finally:
        sandbox.close()
    assert len(runs) == len(named), "one completion ended the scoring of the others"
    for (name, _), run in zip(named, runs):
        if name == "honest":
            assert run.passed and run.flags == [], (run.flags, run.output_tail)
        elif name in REACH_OUT:
            assert {"ast:scope", "audit:ref-module"} <= set(run.flags), (name, run.passed, run.flags)
        else:
            assert not run.passed and run.category in {"invalid", "syntax"}, (name, run.category, run.output_tail)
