"""The warm runner (benchmark_core/sandbox/warm.py) through its JSON-lines protocol, no sandbox around it."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmark_core.sandbox import warm
from benchmark_core.sandbox.process import child_env
from benchmark_core.sandbox.warm_client import WARM_SCRIPT, WarmClient

ROOT = Path(__file__).resolve().parent.parent
ROPE = ROOT / "demo" / "rope"
PROBE = ROOT / "tests" / "probes" / "pset" / "probe"


def solution(body: str) -> dict[str, str]:
    lines = "\n".join("    " + ln for ln in body.strip("\n").splitlines())
    return {"solution.py": f"def solve(x):\n{lines}\n"}


@pytest.fixture
def server(tmp_path):
    clients = []

    def start(paper: Path = PROBE, *extra: str) -> WarmClient:
        work = tmp_path / f"work{len(clients)}"
        argv = [sys.executable, str(WARM_SCRIPT), "--paper", str(paper), "--work", str(work), *extra]
        client = WarmClient.spawn(argv, env=child_env(str(tmp_path)), ready_timeout=120)
        client.work = work
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.close()


def ask(client: WarmClient, files: dict, timeout: float = 30, **extra) -> dict:
    msg = client.request({"files": files, "timeout": timeout, "memory_mb": 2048, "output_bytes": 8192, **extra},
                         wait=timeout + 30)
    assert msg is not None, client.stderr_tail.decode(errors="replace")
    return msg


def test_scan_imports_finds_third_party_only(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import scipy\n")
    (tmp_path / "helpers.py").write_text("import numpy as np\n")
    (tmp_path / "paper2code_test.py").write_text(
        "import os, json\nimport helpers\nfrom pkg import thing\nfrom . import rel\n"
        "try:\n    import torch.nn as nn\nexcept ImportError:\n    import jax\n"
        "if True:\n    import pandas\n\ndef f():\n    import sklearn\n"
    )
    found = warm.scan_imports(str(tmp_path))
    assert set(found) == {"numpy", "scipy", "torch", "jax", "pandas"}


def test_parent_names_are_third_party_imports_and_the_submodules_of_them_named(tmp_path):
    """What a warm parent may import ahead for a paper: its third-party modules and the submodules of
    those it names, never the standard library's, the paper's own or a fork-unsafe framework's."""
    (tmp_path / "helpers.py").write_text("import numpy as np\nfrom numpy import linalg\n")
    (tmp_path / "paper2code_test.py").write_text(
        "import os.path\nimport helpers\nfrom scipy import stats, special\nimport matplotlib.pyplot as plt\n"
        "from helpers import np\nimport jax.numpy\n\ndef f():\n    import scipy.optimize\n")
    names = warm.parent_names(str(tmp_path))
    assert set(names) == {"numpy", "scipy", "matplotlib", "jax", "numpy.linalg", "scipy.stats", "scipy.special",
                          "matplotlib.pyplot"}
    assert names.index("scipy") < names.index("scipy.stats")  # a package before its submodules


def test_parent_pick_serves_a_paper_from_a_parent_holding_only_what_it_imports():
    """Both backends pick an environment's warm parent so: one whose preloads the paper all imports, of
    those the one holding the most; none when every parent holds something the paper does not import."""
    from types import SimpleNamespace

    from benchmark_core.sandbox.warm_client import parent_pick

    torch = SimpleNamespace(preloads={"torch"})
    torch_numpy = SimpleNamespace(preloads={"torch", "numpy"})
    scientific = SimpleNamespace(preloads={"numpy", "scipy", "scipy.stats"})
    refused = SimpleNamespace(preloads=None)
    parents = [refused, torch, torch_numpy, scientific]
    assert parent_pick(parents, {"torch", "numpy", "einops"}) is torch_numpy
    assert parent_pick(parents, {"torch"}) is torch
    assert parent_pick(parents, {"numpy", "scipy", "scipy.stats", "pandas"}) is scientific
    assert parent_pick(parents, {"numpy", "scipy"}) is None  # scipy.stats is not the paper's
    assert parent_pick([refused], set()) is None


def core(proof: dict) -> dict:
    """The proof's verdict part (the audit trail beside it is compared by tamper.audit_verdict)."""
    return {"completed": proof["completed"], "tests_run": proof["tests_run"]}


def test_ready_line_preloads_numpy_not_the_paper(server):
    client = server(ROPE)
    assert client.ready["preloaded"] == ["numpy"]
    assert client.ready["protocol"] == warm.PROTOCOL
    msg = ask(client, {})
    assert msg["exit_code"] == 0 and core(msg["proof"]) == {"completed": True, "tests_run": 8}
    assert msg["proof"]["authentic"] is True and msg["proof"]["forged"] == 0
    assert set(msg) >= {"id", "exit_code", "signal", "timed_out", "stdout", "stderr", "seconds", "truncated", "oom"}
    saved = json.loads((client.work / msg["id"] / "result.json").read_text())
    assert saved == msg
    assert not (client.work / msg["id"] / "paper").exists(), "the run's copy of the paper must be removed"


def test_runs_are_concurrent(server):
    client = server()
    body = "import time\nprint('span', time.time())\ntime.sleep(1.0)\nprint('span', time.time())\nreturn x * 2"
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        msgs = list(pool.map(lambda _: ask(client, solution(body)), range(4)))
    spans = []
    for msg in msgs:
        assert msg["exit_code"] == 0, msg["stderr"]
        stamps = [float(line.split()[1]) for line in msg["stdout"].splitlines() if line.startswith("span")]
        spans.append((min(stamps), max(stamps)))
    # at least two runs were inside their test at the same moment
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])


def test_bad_requests_get_an_answer_and_the_server_goes_on(server):
    client = server()
    bad = ask(client, {"../../escape.py": "x"})
    assert bad["exit_code"] is None and "outside the paper folder" in bad["error"]
    # a raw line with a bad id
    client.transport.write(b'{"id": "../x", "files": {}}\nnot json\n')
    good = ask(client, solution("return x * 2"))
    assert good["exit_code"] == 0


@pytest.mark.parametrize("body, completed, tests_run, exit_code", [
    ("return x * 2", True, 2, 0),
    ("return x + 1", True, 2, 1),  # a failing test still ran to completion
    # os._exit: the launcher never gets to write its final line (the first case had started)
    ("import os\nprint('OK')\nos._exit(0)", False, 1, 0),
    ("import sys\nsys.stderr.write('Ran 2 tests\\n\\nOK\\n')\nsys.stderr.flush()\nimport os\nos._exit(0)", False, 1, 0),
    ("import unittest\nunittest.TestCase.run = lambda self, result=None: None\nreturn x * 2", True, 1, 0),
    ("import atexit, os\natexit.register(os._exit, 0)\nreturn None", False, 2, 0),
])
def test_proof(server, body, completed, tests_run, exit_code):
    msg = ask(server(), solution(body))
    assert msg["exit_code"] == exit_code, msg["stderr"]
    assert core(msg["proof"]) == {"completed": completed, "tests_run": tests_run}
    assert msg["proof"]["authentic"] is completed  # the final line carries the run's MAC


def test_sys_exit_from_the_completion_is_not_completion(server, tmp_path):
    # the snippet's code calls sys.exit(0) at import time of the solution: the script never reaches unittest
    paper = tmp_path / "paper"
    shutil.copytree(PROBE, paper)
    msg = ask(server(paper), {"solution.py": "import sys\nsys.exit(0)\n"})
    assert msg["exit_code"] == 0
    assert msg["proof"]["completed"] is False


def test_timeout_kills_the_whole_tree(server):
    marker = f"{os.getpid()}{time.time_ns() % 10_000}.25"
    body = (f"import subprocess\nsubprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
            "import time\ntime.sleep(600)")
    msg = ask(server(), solution(body), timeout=2)
    assert msg["timed_out"] is True and msg["seconds"] < 10
    time.sleep(0.3)
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert left == []


def test_fresh_mode_gives_the_same_verdicts(server):
    warm_client, fresh_client = server(ROPE), server(ROPE, "--fresh")
    assert fresh_client.ready["fresh"] is True and fresh_client.ready["preloaded"] == []
    rope = (ROPE / "rope.py").read_text()
    broken = rope.replace("np.cos", "np.sin", 1)
    for files in ({}, {"rope.py": broken}, {"rope.py": rope + "\nraise SystemExit(0)\n"}):
        a, b = ask(warm_client, files), ask(fresh_client, files)
        assert (a["exit_code"], core(a["proof"])) == (b["exit_code"], core(b["proof"]))


def test_output_is_bounded(server):
    msg = ask(server(), solution("import sys\nsys.stdout.write('y' * 5_000_000)\nreturn x * 2"))
    assert msg["truncated"] is True
    assert len(msg["stdout"]) < 9000


def test_import_time_output_is_replayed_like_a_fresh_run(tmp_path):
    """A preloaded module that prints (or warns) at import: warm runs show it like fresh ones do."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "noisymod.py").write_text(
        "import warnings\nprint('banner from noisymod')\nwarnings.warn('noisymod setup failed softly')\n")
    paper = tmp_path / "paper"
    shutil.copytree(PROBE, paper)
    test = paper / "paper2code_test.py"
    test.write_text("import noisymod\n" + test.read_text())
    env = child_env(str(tmp_path), {"PYTHONPATH": str(site)})
    answers = []
    for extra in ([], ["--fresh"]):
        argv = [sys.executable, str(WARM_SCRIPT), "--paper", str(paper), "--work", str(tmp_path / f"w{len(extra)}"),
                *extra]
        client = WarmClient.spawn(argv, env=env, ready_timeout=120)
        try:
            if not extra:
                assert client.ready["preloaded"] == ["noisymod"]
            answers.append(ask(client, {}))
        finally:
            client.close()
    warm_run, fresh_run = answers
    for msg in answers:
        assert "banner from noisymod" in msg["stdout"]
        assert "noisymod setup failed softly" in msg["stderr"]
    assert warm_run["exit_code"] == fresh_run["exit_code"] == 0


_SNAPSHOT_SCRIPT = """
import os, sys
sys.path.insert(0, {folder!r})
import warm
import numpy, unittest
warm.import_testing()
mode = {mode!r}
# a parent's snapshot (a warm parent's, a server's before it learned imports), brought up to date
early = warm.snapshot_prepare() if mode == "updated" else None
import numpy.testing, unittest.result, json.decoder
class Late:  # a class a library module gained after the early snapshot
    value = 1
    def method(self):
        return 1
Late.__module__ = "numpy"
numpy.Late = Late
json.decoder.__dict__["scanstring"] = json.decoder.scanstring  # a library dict that moved
prepared = {{"none": None, "fresh": "fresh", "updated": early}}[mode]
if prepared is not None:
    prepared = warm.snapshot_prepare(None if prepared == "fresh" else prepared)
r, w = os.pipe()
checkpoint, _name_script, _window = warm._install_audit(w, b"k" * 32, "/nowhere/paper2code_test.py", prepared)
# what the launcher changes between the hook and its first checkpoint: not reported
start = unittest.result.TestResult.startTest
unittest.result.TestResult.startTest = lambda self, test: start(self, test)
checkpoint("start")
unittest.TestCase.assertEqual = lambda *a, **k: None
numpy.testing.assert_allclose = lambda *a, **k: None
unittest.result.TestResult.addFailure = lambda *a: None
numpy.Late.value = 2
numpy.Late.method = lambda self: 2
json.decoder.__dict__["py_scanstring"] = None
sys.audit("rcb.checkpoint", "test")
sys.audit("rcb.checkpoint", "end")  # the library namespaces are compared at the run's end
os.close(w)
data = b""
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    data += chunk
print("\\n".join(sorted(line.rsplit("\\t", 1)[0] for line in data.decode().splitlines() if line.startswith("E"))))
"""


def test_the_prepared_snapshot_reports_what_one_built_in_the_run_does():
    # a warm server builds the protected modules' snapshot once, before forking (snapshot_prepare),
    # or brings up to date one its warm parent took before the paper's imports: a run that starts
    # from either reports the same patches, and nothing more, as one that builds its own
    import subprocess

    out = {}
    for mode in ("none", "fresh", "updated"):
        code = _SNAPSHOT_SCRIPT.format(folder=str(WARM_SCRIPT.parent), mode=mode)
        out[mode] = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   timeout=120).stdout
    assert out["fresh"] == out["none"]
    assert out["updated"] == out["none"]
    for patch in ("unittest.case.TestCase.assertEqual changed", "numpy.testing.assert_allclose changed",
                  "unittest.result.TestResult.addFailure changed", "numpy.Late.method changed",
                  "json.decoder.py_scanstring changed"):
        assert "rcb.attr\t" + patch in out["none"]
    # a plain value of a class changed for another of its type is state (a library's own counter), as
    # a module's is: reported, not a patch
    assert "rcb.state\tnumpy.Late.value" in out["none"]
    assert "startTest" not in out["none"]


def test_a_start_checkpoint_raised_by_the_completion_absorbs_nothing(server):
    # only the launcher's own first checkpoint takes in changes unreported; one the paper's code raises
    # itself after patching is compared like any other
    body = ("import sys, unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
            "sys.audit('rcb.checkpoint', 'start')\nreturn x * 2")
    msg = ask(server(), solution(body))
    details = {e["detail"] for e in msg["proof"]["events"]}
    assert "unittest.case.TestCase.assertEqual changed" in details


def _spares(client: WarmClient) -> list[psutil.Process]:
    """The server's children waiting for a request (no run is going on when this is called)."""
    return [c for c in psutil.Process(client.pid).children() if c.status() != psutil.STATUS_ZOMBIE]


def test_runs_are_forked_ahead_and_a_lost_spare_costs_only_time(server):
    client = server()
    first = ask(client, solution("return x * 2"))
    assert first["exit_code"] == 0 and first["proof"]["tests_run"] == 2, first["stderr"]
    assert first["forked_ahead"], "the first run's child was forked before its request"
    spares = _spares(client)
    assert len(spares) == 1, spares
    spares[0].kill()
    spares[0].wait(10)
    # the spare is gone before its request: the run forks its own child, with the same verdict
    second = ask(client, solution("return x * 2"))
    assert second["exit_code"] == 0 and second["proof"]["tests_run"] == 2, second["stderr"]
    assert second["proof"]["authentic"] and not second["forked_ahead"]
    failing = ask(client, solution("return x * 3"))
    assert failing["exit_code"] == 1 and failing["forked_ahead"], failing


def test_a_spare_takes_its_run_from_the_request(server, tmp_path):
    """What depends on the run (its folder, home, memory limit) is the request's, not the spare's
    fork time's; nothing of the spare's request pipe is left open to the run."""
    client = server()
    probe = "\n".join([
        "import os, resource",
        "try:",
        "    os.fstat(199)",
        "    control = 'open'",
        "except OSError:",
        "    control = 'closed'",
        "print('RUN', os.getcwd(), os.environ['HOME'], resource.getrlimit(resource.RLIMIT_AS)[0], control, flush=True)",
        "return x * 2",
    ])
    seen = []
    for memory in (1024, 3072):
        msg = client.request({"files": solution(probe), "timeout": 30, "memory_mb": memory, "output_bytes": 8192},
                             wait=60)
        assert msg is not None and msg["exit_code"] == 0, (msg or {}).get("stderr")
        assert msg["forked_ahead"]
        cwd, home, limit, control = msg["stdout"].split("RUN ", 1)[1].split("\n", 1)[0].split()
        folder = Path(client.work) / msg["id"]
        assert cwd == str(folder / "paper") and home == str(folder / "home")
        assert int(limit) == memory * 1024 * 1024 and control == "closed"
        seen.append(cwd)
    assert seen[0] != seen[1]


def test_the_import_scans_read_each_file_once_until_it_changes(tmp_path):
    """A paper's scans (its third-party modules, their submodules, every root it names) parse each
    of its files once while it is unchanged; a file written again is read again."""
    import importlib

    scan = importlib.import_module("benchmark_core.sandbox.warm.scan")
    (tmp_path / "helpers.py").write_text("import numpy as np\n\ndef f():\n    import sklearn\n")
    test = tmp_path / "paper2code_test.py"
    test.write_text("from scipy import stats\nimport helpers\n")
    scan._file_read.cache_clear()
    first = (warm.parent_names(str(tmp_path)), scan.named_roots(str(tmp_path)))
    assert first == (["numpy", "scipy", "scipy.stats"], {"numpy", "sklearn", "scipy", "helpers"})
    for _ in range(3):
        assert (warm.parent_names(str(tmp_path)), scan.named_roots(str(tmp_path))) == first
    assert scan._file_read.cache_info().misses == 2  # (two files, each parsed once)
    test.write_text("from scipy import stats\nimport helpers\nimport pandas\n")
    assert "pandas" in warm.parent_names(str(tmp_path)) and "pandas" in scan.named_roots(str(tmp_path))
    assert scan._file_read.cache_info().misses == 3


def test_the_submodules_a_paper_names_are_preloaded_not_its_own(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "paper2code_test.py").write_text(
        "import matplotlib.pyplot as plt\nfrom scipy import stats, special\nfrom mine import helpers\n"
        "from tkinter import ttk\nfrom jax import numpy as jnp\ntry:\n    import os.path\nexcept ImportError:\n    pass\n"
        "def later():\n    import pandas.testing\n")
    assert warm.scan_submodules(str(tmp_path)) == ["matplotlib.pyplot", "scipy.stats", "scipy.special", "os.path"]


_ROOMS_TEST = '''
import os, sys, unittest
import audit, common, server, warm

class T(unittest.TestCase):
    def test_own_modules(self):
        for module in (audit, common, server, warm):
            self.assertTrue(getattr(module, "PAPER_OWN", False), module)
        runner = {runner!r}
        ours = sorted(name for name, module in list(sys.modules.items())
                      if str(getattr(module, "__file__", "") or "").startswith(runner + os.sep))
        self.assertEqual(ours, [])
        self.assertNotIn("_rcb_warm", sys.modules)

if __name__ == "__main__":
    unittest.main()
'''


@pytest.mark.parametrize("fresh", [False, True])
def test_a_paper_never_meets_the_runners_rooms(server, tmp_path, fresh):
    # the runner is a package of rooms (audit, common, server...): a paper's own modules of the same
    # names are the paper's, and none of the runner's modules is in sys.modules while its test runs
    paper = tmp_path / f"paper{int(fresh)}"
    paper.mkdir()
    for name in ("audit", "common", "server", "warm"):
        (paper / f"{name}.py").write_text("PAPER_OWN = True\n")
    (paper / "paper2code_test.py").write_text(_ROOMS_TEST.format(runner=str(WARM_SCRIPT.resolve())))
    client = server(paper, *(["--fresh"] if fresh else []))
    msg = ask(client, {})
    assert msg["exit_code"] == 0, msg["stderr"]
    assert core(msg["proof"]) == {"completed": True, "tests_run": 1}


_LAZY_TEST = '''
import unittest

import numpy as np

import lazy
import lazy_ref


class TestLazy(unittest.TestCase):
    def test_scale(self):
        np.testing.assert_allclose(lazy.scale(np.arange(8.0)), lazy_ref.scale(np.arange(8.0)))

    def test_kurtosis(self):
        from scipy import stats  # imported by the test case only: no scan sees it

        x = np.arange(8.0) ** 2
        self.assertAlmostEqual(float(stats.kurtosis(lazy.scale(x))), float(stats.kurtosis(lazy_ref.scale(x))))


if __name__ == "__main__":
    unittest.main()
'''


def _lazy_paper(folder: Path) -> Path:
    folder.mkdir()
    (folder / "lazy.py").write_text("import numpy as np\n\n\ndef scale(x):\n    return np.asarray(x) * 2.0\n")
    (folder / "lazy_ref.py").write_text((folder / "lazy.py").read_text())
    (folder / "paper2code_test.py").write_text(_LAZY_TEST)
    return folder


def test_the_server_learns_what_a_run_imported(server, tmp_path):
    # issue 24: scipy.stats, imported inside a test case, is paid by the reference run only (the
    # paper's own code: its files as they are); the server imports it (after a probe) before forking
    # the next spare, and the verdicts do not change
    paper = _lazy_paper(tmp_path / "lazy")
    client = server(paper)
    assert client.ready["preloaded"] == ["numpy"]
    runs = [ask(client, {"lazy.py": (paper / "lazy.py").read_text()}), ask(client, {}), ask(client, {})]
    for msg in runs:
        assert msg["exit_code"] == 0, msg["stderr"]
        assert core(msg["proof"]) == {"completed": True, "tests_run": 2}
    # a run of the paper's own code (a reference run) reports its imports to the host too, which keeps
    # them with the reference outcome (a later session that does not run it is told: runner._reference_teach)
    assert "scipy.stats" in runs[0]["proof"]["modules"]
    assert runs[0]["learned"] == []
    assert {"scipy", "scipy.stats"} <= set(runs[1]["learned"]) and runs[2]["learned"] == runs[1]["learned"]
    print(f"\nlazy scipy.stats: run 1 {runs[0]['seconds']:.3f} s, run 2 {runs[1]['seconds']:.3f} s, "
          f"run 3 {runs[2]['seconds']:.3f} s; learned {runs[1]['learned']}")


_COMPILED_TEST = '''import os
import traceback
import unittest

import helpers.ops
import model
import model_ref


class TestCompiled(unittest.TestCase):
    def test_same_answer(self):
        self.assertEqual(model.scale(3.0), model_ref.scale(3.0))
        self.assertEqual(helpers.ops.twice(2.0), 4.0)

    def test_code_is_this_runs(self):
        # the code the run took from its server names this run's files, as a compile here would
        here = os.path.dirname(os.path.abspath(__file__))
        for function in (model_ref.scale, model_ref.Inner.deep, helpers.ops.twice):
            self.assertEqual(function.__code__.co_filename, os.path.join(here, function.__module__.replace(".", "/") + ".py"))
        try:
            model_ref.broken()
        except ZeroDivisionError:
            frame = traceback.extract_tb(__import__("sys").exc_info()[2])[-1]
            self.assertEqual((os.path.basename(frame.filename), frame.lineno, frame.line), ("model_ref.py", 15, "return 1 / 0"))
        self.assertEqual(model_ref.FACTOR, 2.0)


if __name__ == "__main__":
    unittest.main()
'''

_COMPILED_MODEL = """FACTOR = 2.0


def scale(x):
    # <paper2code name="scale">
    return x * FACTOR
    # </paper2code name="scale">
"""

_COMPILED_REF = """FACTOR = 2.0


def scale(x):
    return x * FACTOR


class Inner:
    @staticmethod
    def deep():
        return FACTOR


def broken():
    return 1 / 0
"""


def test_the_papers_other_modules_are_compiled_once_for_its_runs(server, tmp_path):
    # issue 24: a run compiled the paper's reference copy and helpers (unchanged from run to run) each
    # time, where `python paper2code_test.py` takes them from __pycache__; once the reference run named
    # them, the server compiles them and a run whose file reads the same takes that code, at its own
    # path (code names, tracebacks); a file that reads otherwise is compiled as it reads
    paper = tmp_path / "compiled"
    (paper / "helpers").mkdir(parents=True)
    (paper / "helpers" / "__init__.py").write_text("")
    (paper / "helpers" / "ops.py").write_text("def twice(x):\n    return 2 * x\n")
    (paper / "unused.py").write_text("raise RuntimeError('never imported')\n")
    (paper / "model.py").write_text(_COMPILED_MODEL)
    (paper / "model_ref.py").write_text(_COMPILED_REF)
    (paper / "paper2code_test.py").write_text(_COMPILED_TEST)
    client = server(paper)
    runs = [ask(client, {}), ask(client, {}), ask(client, {"model.py": _COMPILED_MODEL.replace("x * FACTOR", "x * 2.0")})]
    for msg in runs:
        assert msg["exit_code"] == 0, msg["stderr"]
        assert core(msg["proof"]) == {"completed": True, "tests_run": 2}
    assert runs[0]["compiled"] == []  # the reference run: nothing named yet
    # the annotated file is compiled watched (watch.prepare), the test is run, unused.py is never imported
    assert runs[1]["compiled"] == runs[2]["compiled"] == ["helpers/__init__.py", "helpers/ops.py", "model_ref.py"]
    # a run whose copy of the reference reads otherwise runs what it reads, as a fresh interpreter would
    changed = ask(client, {"model_ref.py": _COMPILED_REF.replace("FACTOR = 2.0", "FACTOR = 3.0")})
    assert changed["compiled"] == runs[1]["compiled"] and changed["exit_code"] != 0
    assert "AssertionError: 6.0 != 9.0" in changed["stderr"]
    # a completion that reaches the runner's globals (flagged by the static reading: builtins,
    # __globals__) and hands it other code for the reference copy's source gets nothing from it:
    # the run's set-up held the server's entries and functions before any of the paper's code ran
    bent = ("import builtins, marshal\n"
            "_evil = marshal.dumps(compile(" + repr(_COMPILED_REF.replace("FACTOR = 2.0", "FACTOR = 3.0")) +
            ", 'model_ref.py', 'exec'))\n"
            "_g = getattr(builtins, '_rcb.watch').__globals__\n"
            "_g['PLAIN'] = (('model_ref.py', " + repr(_COMPILED_REF.encode()) + ", _evil),)\n"
            "_g['_moved'] = lambda code, *rest: marshal.loads(_evil)\n") + _COMPILED_MODEL.replace("x * FACTOR", "x * 3.0")
    forged = ask(client, {"model.py": bent})
    assert forged["compiled"] == runs[1]["compiled"] and forged["exit_code"] != 0
    assert "AssertionError: 9.0 != 6.0" in forged["stderr"], forged["stderr"]


def _waiting_children(client: WarmClient) -> list[psutil.Process]:
    """The server's children forked ahead and waiting for a request (named ``rcb-spare``)."""
    return [c for c in psutil.Process(client.pid).children()
            if c.status() != psutil.STATUS_ZOMBIE and c.name() == "rcb-spare"]


def test_a_reference_run_holds_the_spare_back_until_its_lesson(server, tmp_path):
    # issue 24: a spare forked while a run of the paper's own code goes on was dropped by that run's
    # lesson and forked again (a fork, a set-up and a kill for nothing, once a paper); now the server
    # forks it once the lesson is taken, and a completion's run in between forks its own child
    paper = _lazy_paper(tmp_path / "lazy")
    gate = tmp_path / "gate"
    test = (paper / "paper2code_test.py").read_text().replace(
        "    def test_kurtosis(self):\n",
        "    def test_kurtosis(self):\n"
        "        import os, time\n"
        "        for _ in range(600):\n"
        f"            if os.path.exists({str(gate)!r}):\n"
        "                break\n"
        "            time.sleep(0.05)\n")
    (paper / "paper2code_test.py").write_text(test)
    client = server(paper)
    deadline = time.monotonic() + 30
    while not _waiting_children(client) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_waiting_children(client)) == 1  # the first run's, forked at the server's start
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        reference = pool.submit(ask, client, {"lazy.py": (paper / "lazy.py").read_text()}, 60)
        time.sleep(1.0)  # the reference run has taken the spare and waits at the gate
        assert not reference.done()
        assert _waiting_children(client) == []  # no spare for its lesson to drop
        completion = pool.submit(ask, client, {"lazy.py": (paper / "lazy.py").read_text() + "\n# a model's\n"}, 60)
        time.sleep(0.5)
        assert _waiting_children(client) == []
        gate.write_text("go")
        first, second = reference.result(), completion.result()
    assert first["exit_code"] == 0 and second["exit_code"] == 0, (first["stderr"], second["stderr"])
    assert first["forked_ahead"] and not second["forked_ahead"]  # the completion's child: forked at its request
    deadline = time.monotonic() + 30
    while not _waiting_children(client) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_waiting_children(client)) == 1  # forked after the lesson, holding it
    third = ask(client, {})
    assert third["exit_code"] == 0 and third["forked_ahead"], third["stderr"]
    assert {"scipy", "scipy.stats"} <= set(third["learned"])
    # once the lesson is taken, a run of the paper's own code (a reference run made again, or a
    # completion that is the paper's code, as in a bench set of reference code) holds nothing back
    gate.unlink()
    with ThreadPoolExecutor(1) as pool:
        again = pool.submit(ask, client, {}, 60)
        deadline = time.monotonic() + 30
        time.sleep(0.5)
        while not _waiting_children(client) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not again.done() and len(_waiting_children(client)) == 1
        gate.write_text("go")
        assert again.result()["exit_code"] == 0


def test_a_run_marked_last_leaves_no_spare_and_a_run_after_it_still_runs(server):
    # issue 24: the host marks a paper's last queued run (runner._Sessions.take); the server makes no
    # child and no copy of the paper ahead for a run nobody will ask for
    client = server()
    first = ask(client, solution("return x * 2"))
    assert first["exit_code"] == 0 and first["forked_ahead"], first["stderr"]
    assert len(_spares(client)) == 1
    last = ask(client, solution("return x * 2"), last=True)
    assert last["exit_code"] == 0 and last["forked_ahead"], last["stderr"]  # it took the spare made for it
    assert _spares(client) == []
    # a run asked for after it all the same (a run made again) forks its own child: same verdicts
    again = ask(client, solution("return x * 3"))
    assert again["exit_code"] == 1 and not again["forked_ahead"] and again["proof"]["authentic"], again
    assert _spares(client) == []


def test_a_completion_cannot_teach_the_server(server, tmp_path):
    # the server learns from runs of the paper's own code only: a completion's imports (its own
    # module, a package the paper never names, a fake entry of sys.modules, a module the hook
    # watches) are never imported by the server, before or after the reference run taught it
    mark = tmp_path / "mark"
    evil = (f"import sys\nwith open({str(mark)!r}, 'a') as fh:\n"
            "    fh.write('server\\n' if '_rcb_warm' in sys.modules else 'run\\n')\n")
    client = server(_lazy_paper(tmp_path / "lazy"))
    completion = (tmp_path / "lazy" / "lazy.py").read_text() + (
        "\nimport sys, evil_learn, psutil, pty, scipy.stats\n"
        "sys.modules['json.evil_learn'] = sys\n"
        "sys.modules['evil_pkg.sub'] = sys\n")
    files = {"evil_learn.py": evil, "lazy.py": completion}
    runs = [ask(client, files), ask(client, {}), ask(client, files)]
    assert all(msg["exit_code"] == 0 for msg in runs), [msg["stderr"] for msg in runs]
    assert runs[1]["learned"] == []  # the completion's run taught nothing, not even scipy.stats
    assert "modules" not in runs[0]["proof"]  # nor is what it imported told to the host (kept for references)
    learned = set(runs[2]["learned"])
    assert {"scipy", "scipy.stats"} <= learned  # the reference run's imports
    assert not learned & {"evil_learn", "psutil", "pty", "json.evil_learn", "evil_pkg", "evil_pkg.sub"}, learned
    assert mark.read_text().split() == ["run", "run"]


def test_learning_takes_only_library_modules_the_paper_names(tmp_path, monkeypatch):
    # the rules a reported name meets before any import (defense in depth: the paper's own code reports)
    from benchmark_core.sandbox.warm import learn

    names = ["lazy", "lazy_ref", "evil_learn", "pty", "ctypes", "this", "jax.numpy", "_rcb_warm.audit", "a b",
             "x" * 300, "__main__", "os.path", "requests", "json.evil", "scipy.stats"]
    got = learn.learn_candidates(names, own={"lazy", "lazy_ref", "evil_learn"}, named={"scipy", "lazy"}, known=set())
    assert set(got) <= {"json.evil", "scipy.stats"} and "json.evil" in got, got
    roots, refused, uids = learn.learn_limits(str(tmp_path / "paper"), str(tmp_path / "work"), None)
    assert not learn.library_origin("json.evil", roots, refused, uids)  # no such module
    (tmp_path / "evil_lib.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not learn.library_origin("evil_lib", roots, refused, uids)  # importable, but not the library's
    assert learn.library_origin("evil_lib", (str(tmp_path) + "/",), refused, uids)  # (the root decides)
    assert learn.library_origin("email.mime.text", roots, refused, uids)


def test_a_forged_module_report_is_tampering(server, tmp_path):
    # an M line without the run's MAC counts as forged, like any line the completion writes
    body = ("import os\n"
            "for fd in range(200, 250):\n"
            "    try:\n"
            "        os.write(fd, b'M\\tevil_learn\\tdeadbeef\\n')\n"
            "    except OSError:\n"
            "        pass\n"
            "return x * 2")
    client = server()
    msg = ask(client, solution(body))
    assert msg["proof"]["forged"] >= 1


@pytest.mark.parametrize("fresh", [False, True])
def test_a_signal_handler_the_completion_installs_is_reported(server, fresh):
    # the checkpoints read every signal's handler (the C getsignal): one the completion installs is
    # reported once, by its number; the run still passes (audit:signal-handler is a flag)
    body = ("import signal\n"
            "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
            "return x * 2")
    client = server(PROBE, *(["--fresh"] if fresh else []))
    msg = ask(client, solution(body))
    assert msg["exit_code"] == 0, msg["stderr"]
    handlers = [e for e in msg["proof"]["events"] if e["event"] == "rcb.signal-handler"]
    assert [e["detail"] for e in handlers] == [str(int(__import__("signal").SIGUSR1))]
    honest = ask(client, solution("return x * 2"))
    assert not [e for e in honest["proof"]["events"] if e["event"] == "rcb.signal-handler"]


def test_runs_start_with_malloc_mapping_big_blocks_no_more(server, tmp_path):
    # a torch run multiplying 512x512 matrices in a loop: forked from a server whose malloc had never
    # freed a big block, each product's buffer was a fresh mapping (90,000-230,000 page faults, ~10 %
    # of its CPU); the server raises glibc's mmap threshold once (_malloc_settle), as a fresh run does
    # after its first big free
    pytest.importorskip("torch")
    paper = tmp_path / "matmul"
    paper.mkdir()
    (paper / "matmul.py").write_text(
        "import torch\n\n\ndef heavy(seed):\n    g = torch.Generator().manual_seed(seed)\n"
        "    a = torch.rand(512, 512, generator=g)\n    for _ in range(300):\n"
        "        a = torch.tanh(a @ a / 512.0)\n    return float(a.sum())\n")
    (paper / "paper2code_test.py").write_text(
        "import unittest\n\nimport torch\n\nimport matmul\n\n\nclass T(unittest.TestCase):\n"
        "    def test_heavy(self):\n        torch.set_num_threads(1)\n"
        "        self.assertEqual(matmul.heavy(0), matmul.heavy(0))\n\n\n"
        "if __name__ == \"__main__\":\n    unittest.main()\n")
    client = server(paper)
    runs = [ask(client, {}, timeout=120) for _ in range(3)]
    for msg in runs:
        assert msg["exit_code"] == 0, msg["stderr"]
    faults = [msg["minor_faults"] for msg in runs]
    print("minor page faults of the warm runs:", faults)
    assert max(faults) < 20_000


def test_a_run_names_the_runners_rooms_as_the_folder_holds_them():
    # the launcher removes the runner's modules from sys.modules by name (iterating sys.modules in a
    # fork would copy a page per name): the names are the folder's modules, every one of them
    folder = Path(warm.__file__).parent
    rooms = sorted(p.stem for p in folder.glob("*.py") if p.name != "__main__.py")
    assert list(launch_module().ROOMS) == rooms
    assert {"audit", "guard", "launch", "server", "child", "__init__"} <= set(rooms)


def launch_module():
    return sys.modules[warm.__name__ + ".launch"]


def test_a_runs_report_holds_the_names_its_test_added_and_no_other(monkeypatch):
    # the report (hints for import learning) reads sys.modules from its end back to the name that
    # was last when the test started: the names added since, in order, a name removed and added
    # again among them; none when that name is gone (which names are new is then unknown)
    import types

    def reported(change) -> list[str]:
        modules = dict(sys.modules)
        monkeypatch.setattr(sys, "modules", modules)
        r, w = os.pipe()
        report = launch_module()._module_reporter(w, b"k" * 32)
        last = next(reversed(modules))
        change(modules)
        report(last)
        os.close(w)
        data = os.read(r, 1 << 20).decode()
        os.close(r)
        monkeypatch.undo()
        return [name for line in data.splitlines() for name in line.split("\t")[1].split()]

    def added(modules):
        modules["rcb_new_one"] = types.ModuleType("rcb_new_one")
        modules["rcb_new_two.sub"] = types.ModuleType("rcb_new_two.sub")
        modules["not a name"] = types.ModuleType("x")  # never sent: not a module name

    assert reported(added) == ["rcb_new_one", "rcb_new_two.sub"]

    def again(modules):
        module = modules.pop("json")
        modules["rcb_new_one"] = types.ModuleType("rcb_new_one")
        modules["json"] = module

    assert reported(again) == ["rcb_new_one", "json"]
    assert reported(lambda modules: None) == []

    def gone(modules):
        modules["rcb_new_one"] = types.ModuleType("rcb_new_one")
        del modules[next(reversed([n for n in modules if n != "rcb_new_one"]))]

    assert reported(gone) == []
