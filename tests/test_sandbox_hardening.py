"""The warm runner's own defences, without a sandbox: cleanup that cannot recurse, the reading of
the proof pipe (MAC'd lines only), and the seccomp program bwrap loads."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from benchmark_core.sandbox import warm
from benchmark_core.sandbox.bwrap import seccomp_program


def test_remove_tree_survives_a_deep_unreadable_chain_and_keeps_link_targets(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    root = tmp_path / "run"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        os.symlink(str(outside), "link", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    os.chmod(root / "d", 0)  # unreadable on the way down
    warm.remove_tree(str(root))
    assert not root.exists()
    assert outside.read_text() == "keep me"
    warm.remove_tree(str(outside))  # a plain file goes too
    assert not outside.exists()


def _line(key: bytes, body: str) -> bytes:
    data = body.encode()
    return data + b"\t" + warm.proof_mac(key, data) + b"\n"


def test_proof_read_keeps_only_authenticated_lines():
    key = os.urandom(32)
    paper = "/rcb/runs/r1/paper"
    data = (b"K " + key.hex().encode() + b"\n" + _line(key, "T\tstart") + _line(key, "T\tstart")
            + b"T\tstart\tdeadbeef\n"  # a completion's try: no valid MAC
            + _line(key, f"E\tgc.get_objects\t\t{paper}/solution.py\tP")
            + _line(key, "F\t1\t0\t99")  # a forked copy's final line
            + _line(key, "F\t1\t0\t42"))
    out = warm.proof_read(data, paper_dir=paper, test_script="paper2code_test.py", runner="/rcb/warm.py", pid=42)
    assert out["tests_run"] == 2 and out["completed"] is True and out["authentic"] is True
    assert out["forged"] == 2
    assert out["events"] == [{"event": "gc.get_objects", "detail": "", "caller": "paper", "paper": True,
                              "importing": False, "count": 1}]
    # no key first: nothing counts
    assert warm.proof_read(_line(key, "F\t1\t0\t42"), paper_dir=paper, test_script="t.py", runner="r",
                           pid=42)["authentic"] is False


def test_seccomp_program_refuses_new_user_namespaces():
    program = seccomp_program("x86_64")
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    assert (0x15, 5, 0, 272) in insns  # unshare -> the flags check
    assert (0x45, 1, 0, 0x10000000) in insns  # CLONE_NEWUSER -> EPERM
    assert insns[-1] == (0x06, 0, 0, 0x00050000 | 38)  # clone3 -> ENOSYS
    assert seccomp_program("sparc") is None


def test_seccomp_program_refuses_memfd_only_when_asked():
    def insns(program):
        return [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]

    assert (0x15, 4, 0, 319) in insns(seccomp_program("x86_64", refuse_memfd=True))
    assert not any(k == 319 for *_, k in insns(seccomp_program("x86_64")))


@pytest.mark.bwrap
@pytest.mark.parametrize("refuse", [True, False])
def test_bwrap_with_the_filter_refuses_memfd_create_without_cgroups(refuse):
    """The fallback where no memory cgroup bounds a run: memory in a memfd is outside RLIMIT_AS."""
    import os
    import subprocess
    import sys

    from benchmark_core.sandbox.bwrap import bwrap_available, seccomp_filter_fd

    if bwrap_available():
        pytest.fail(bwrap_available())
    fd = seccomp_filter_fd(refuse_memfd=refuse)
    if fd is None:
        pytest.skip("no seccomp program for this architecture")
    try:
        proc = subprocess.run(
            ["bwrap", "--seccomp", str(fd), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--unshare-pid", "--", sys.executable, "-c", "import os; os.memfd_create('x'); print('made')"],
            pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    if refuse:
        assert proc.returncode != 0 and "Operation not permitted" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0 and "made" in proc.stdout, proc.stderr


_GUARD_SCRIPT = """
import os, sys
sys.path.insert(0, {folder!r})
import warm
import torch, torch.testing, numpy, numpy.testing, unittest
warm.import_testing()
r, w = os.pipe()
checkpoint, _name, _window = warm._install_audit(w, b"k" * 32, "/nowhere/paper2code_test.py", warm.snapshot_prepare())
checkpoint("start")
import torch.testing._comparison as cmp
cmp._DTYPE_PRECISIONS[torch.float32] = (1e9, 1e9)  # a tolerance table of a protected module
torch.testing.assert_close.__kwdefaults__["atol"] = 1e9  # keyword defaults, changed in place
vars(numpy._core.numeric)["isclose"] = lambda *a, **k: True  # an unprotected library module
orig = numpy._core.numeric.allclose
vars(numpy._core.numeric)["allclose"] = None
vars(numpy._core.numeric)["allclose"] = orig  # written and put back
vars(unittest.case)["len"] = lambda x: 0  # a builtin shadowed in a library module
import json  # a module bound to its package's namespace is not a patch
sys.audit("rcb.checkpoint", "test-start")  # takes in new modules only
sys.audit("rcb.checkpoint", "test")  # namespaces are compared at the end only (version tags keep every write)
sys.audit("rcb.checkpoint", "end")
os.close(w)
data = os.read(r, 1 << 20).decode()
print("\\n".join(sorted(line.split("\\t")[1] + " " + line.split("\\t")[2] for line in data.splitlines()
                         if line.startswith("E"))))
"""


_MODULES_SCRIPT = """
import os, sys, types
sys.path.insert(0, {folder!r})
sys.path.insert(0, {papers!r})
import warm
import numpy, unittest
warm.import_testing()
prepared = warm.snapshot_prepare()
import paper_ref  # imported after the server's snapshot, before the run's first checkpoint
r, w = os.pipe()
checkpoint, _name, _window = warm._install_audit(w, b"k" * 32, "/nowhere/paper2code_test.py", prepared)
checkpoint("start")
vars(paper_ref)["solve"] = lambda x: x  # a *_ref module the snapshot never listed
import numpy.polynomial.hermite as hermite  # a library module first imported by the test
sys.audit("rcb.checkpoint", "test-start")
vars(hermite)["hermval"] = None
{replace}  # a watched module replaced
{extra}
sys.audit("rcb.checkpoint", "test")
sys.audit("rcb.checkpoint", "end")
os.close(w)
data = os.read(r, 1 << 20).decode()
print("\\n".join(sorted(" ".join(line.split("\\t")[:3]) for line in data.splitlines()
                         if line.startswith(("E", "S")))))
"""


_REPLACED = {"in place": 'sys.modules["numpy.linalg"] = types.ModuleType("numpy.linalg")',
             "removed, then added again": 'del sys.modules["numpy.linalg"]; '
                                          'sys.modules["numpy.linalg"] = types.ModuleType("numpy.linalg")',
             # the removal seen at one checkpoint, the name added again (at the end) by the next one
             "removed, then added again after a checkpoint": 'del sys.modules["numpy.linalg"]; '
                                                             'sys.audit("rcb.checkpoint", "test-start"); '
                                                             'sys.modules["numpy.linalg"] = types.ModuleType("numpy.linalg")'}


@pytest.mark.parametrize("extra", ["", "sys.modules[1] = sys"])
@pytest.mark.parametrize("how", sorted(_REPLACED))
def test_the_checkpoints_see_modules_met_after_the_snapshot(extra, how, tmp_path):
    """A warm server's snapshot lists the *_ref modules and the library modules as they were; the
    run's checkpoints still meet those imported since (read from sys.modules' memory where only
    names were added, the launcher's own removed and ``__main__`` given the test script; the full
    way otherwise) and report what is done to them, a watched module replaced in place or removed
    and added again."""
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    (tmp_path / "paper_ref.py").write_text("def solve(x):\n    return 2 * x\n")
    code = _MODULES_SCRIPT.format(folder=str(WARM_SCRIPT.parent), papers=str(tmp_path), extra=extra,
                                  replace=_REPLACED[how])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("S paper_ref ") for line in lines), lines
    assert "E rcb.attr paper_ref.solve changed" in lines, lines
    assert "E rcb.attr numpy.polynomial.hermite.hermval changed" in lines, lines
    if extra:  # nothing of sys.modules is looked into then, but that is reported
        assert "E rcb.modules sys.modules given a key that is not a string" in lines, lines
    else:
        assert "E rcb.modules numpy.linalg replaced" in lines, lines


_FRESH_SCRIPT = """
import sys, types
sys.path.insert(0, {folder!r})
import warm
from warm import guard
import numpy.linalg
assert guard._dict_entries_reader() is not None, "no reader of sys.modules' memory on CPython 3.11-3.12"
st = {{"modules_base": [None, 0, b"", 0], "watched_keys": {{id(k) for k in sys.modules if k == "numpy.linalg"}},
       "busy": [0]}}
rebase, fresh = guard._modules_delta(st)
rebase()
print("nothing", fresh())
sys.modules["rcb_new_a"] = types.ModuleType("rcb_new_a")
sys.modules["rcb_new_b"] = types.ModuleType("rcb_new_b")
del sys.modules["rcb_new_a"]
print("added", fresh())
rebase()
del sys.modules["warm"]  # an unwatched name removed (the launcher's own)
sys.modules["__main__"] = types.ModuleType("__main__")  # runpy's, for the test script
print("main", fresh())
rebase()
sys.modules["json"] = types.ModuleType("json")  # an unwatched name given another module
print("unwatched", fresh())
rebase()
del sys.modules["numpy.linalg"]
print("watched removed", fresh())
rebase()
sys.modules["numpy.linalg"] = numpy.linalg  # added again: a new name at the end
st["watched_keys"].add(id(next(k for k in reversed(sys.modules) if k == "numpy.linalg")))
rebase()
sys.modules["numpy.linalg"] = types.ModuleType("numpy.linalg")
print("watched replaced", fresh())
rebase()
sys.modules[1] = sys
print("not a str", fresh())
"""


def test_the_guard_reads_what_was_added_to_sys_modules_from_its_memory(tmp_path):
    """What a run's checkpoint reads from sys.modules' memory (touching none of its names and modules,
    each a page a forked run would copy): the names added since, in order, a name added and removed
    again not among them; an unwatched name removed and ``__main__`` given the test script change
    nothing; any other module replaced, a watched name removed, or a key that is not a str leave it
    to the full comparison (None)."""
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    out = subprocess.run([sys.executable, "-c", _FRESH_SCRIPT.format(folder=str(WARM_SCRIPT.parent))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "nothing []", "added ['rcb_new_b']", "main []", "unwatched None", "watched removed None",
        "watched replaced None", "not a str None"], out.stdout


_NAMED_SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
from warm import guard
assert "colorsys" not in sys.modules and "wave" not in sys.modules
take, check, _busy, _paper = guard._library_guard(guard._library_roots(), "/nowhere/runner")
seen = []
emit = lambda *fields: seen.append(" ".join(fields[1:]))
import colorsys, wave
take(["wave"], False)  # a module of the paper's at its import's end: that one only
wave.open = None                     # written after it was taken: reported
check(emit)                          # colorsys, added before the named take, is taken in now
colorsys.rgb_to_hsv = None           # written after that: reported at the next check
check(emit)
print(sorted(seen))
"""


def test_a_module_taken_by_name_leaves_the_others_to_the_next_check(tmp_path):
    """``guard`` ``take(names, settle=False)`` (a module of the paper's taken at its import's end):
    only that module is watched from then on, ``sys.modules`` is not taken as read, so a module added
    before it (not watched yet) is still found and taken in at the next check, and what is written to
    either afterwards is reported."""
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    out = subprocess.run([sys.executable, "-c", _NAMED_SCRIPT.format(folder=str(WARM_SCRIPT.parent))],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['rcb.attr colorsys.rgb_to_hsv changed', 'rcb.attr wave.open changed']", out.stdout

@pytest.mark.parametrize("prefix", ["as installed", "through a symlink"])
def test_the_library_guard_sees_writes_by_every_path(prefix, tmp_path):
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    python = sys.executable
    if prefix == "through a symlink":
        # a venv reached through a symlink: modules' __file__ spell the link, not the resolved path
        link = tmp_path / "env"
        link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
        python = str(link / "bin" / Path(sys.executable).name)
    code = _GUARD_SCRIPT.format(folder=str(WARM_SCRIPT.parent))
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "rcb.state torch.testing._comparison._DTYPE_PRECISIONS changed" in lines, lines
    assert "rcb.attr torch.testing.assert_close.__kwdefaults__ changed" in lines or any(
        "assert_close.__kwdefaults__ changed" in line for line in lines), lines
    assert "rcb.attr numpy._core.numeric.isclose changed" in lines, lines
    assert "rcb.attr unittest.case.len added" in lines, lines
    # the value written and put back is no lasting change of its own (the dict moved for isclose)
    assert not any("allclose" in line for line in lines if line.startswith("rcb.attr")), lines
    assert not any(line.startswith(("rcb.attr json", "rcb.modules")) for line in lines), lines


_MEMORY_SCRIPT = """
import os, resource, sys
sys.path.insert(0, {folder!r})
import warm
r, w = os.pipe()
checkpoint, _name, _window = warm._install_audit(w, b"k" * 32, "/nowhere/paper2code_test.py", warm.snapshot_prepare())
checkpoint("start")
used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
hold = []  # the run's memory spent, as a test's runaway allocation spends it
for size in (1 << 20, 1 << 16, 1 << 12):
    while True:
        try:
            hold.append(bytearray(size))
        except MemoryError:
            break
{event}  # an audited event the hook reports, with the stack that raised it
os.write(1, b"went on\\n")
"""


@pytest.mark.parametrize("event", ["sys._getframe()", "open('/proc/self/mem', 'rb')"])
def test_a_report_the_runs_spent_memory_cannot_make_ends_it_as_out_of_memory(event):
    # CI saw a deep recursion under the memory limit flagged tampering:proof-channel: the report of
    # an event met a MemoryError and the hook ended the run with the lost channel's exit code. A
    # fresh interpreter ends such a run with exit 1 and "MemoryError" (a crash); so does the hook
    # now, still at once (the run never goes on unreported, and writes no proof's last line)
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    code = _MEMORY_SCRIPT.format(folder=str(WARM_SCRIPT.parent), event=event)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert out.returncode != warm.PROOF_EXIT
    assert "MemoryError" in out.stderr and "went on" not in out.stdout


_WINDOW_SCRIPT = """
import os, sys, types
sys.path.insert(0, {folder!r})
import warm
import numpy, numpy.testing, unittest
warm.import_testing()
r, w = os.pipe()
# this script is the test script (python -c: "<string>"), the harness's own code
checkpoint, _name, window = warm._install_audit(w, b"k" * 32, "<string>", warm.snapshot_prepare())
checkpoint("start")


def code_at(path, source):
    # a function whose code lies at ``path``: under the interpreter's prefix, a library's; else the paper's
    namespace = {{"numpy": numpy, "vars": vars}}
    exec(compile(source, path, "exec"), namespace)
    return namespace["f"]


library = sys.prefix + "/lib/python3/site-packages/fake/__init__.py"
paper = "/nowhere/paper/solution.py"
# a library's import-time code rebinding another library's function (torch._dynamo wrapping
# torch.manual_seed), and one that calls back into code of the paper's which patches
rebind = code_at(library, "def f(module):\\n    numpy.testing.assert_allclose = numpy.testing.assert_allclose\\n"
                          "    numpy.testing.assert_equal = lambda *a, **k: None\\n")
helper = code_at(paper, "def f():\\n    vars(numpy.testing)['assert_array_equal'] = lambda *a, **k: None\\n")
calls_back = code_at(library, "def f(module):\\n    helper()\\n")
calls_back.__globals__["helper"] = helper
# the paper's code asks for each import (its frame on the stack)
ask = code_at(paper, "def f(window, exec_module):\\n    window(exec_module, None)\\n")
{case}
sys.audit("rcb.checkpoint", "end")
os.close(w)
data = os.read(r, 1 << 20).decode()
print("\\n".join(sorted(line.split("\\t")[1] + " " + line.split("\\t")[2] for line in data.splitlines()
                         if line.startswith("E"))))
"""

_WINDOW_CASES = {
    # the library's own writes, in a window the paper's code opened: the library's
    "clean": ("ask(window, rebind)", set()),
    # code of the paper's ran within the window: what it wrote is reported
    "called back": ("ask(window, calls_back)", {"rcb.attr numpy.testing.assert_array_equal changed"}),
    # an import no paper code asked for (the test's own) is no window: judged as before
    "not asked": ("window(rebind, None)", {"rcb.attr numpy.testing.assert_equal changed"}),
    # what the paper wrote before the window is reported at its start
    "written before": ("vars(numpy.testing)['assert_string_equal'] = None\nask(window, rebind)",
                       {"rcb.attr numpy.testing.assert_string_equal changed"}),
    # the hook's events open or close nothing: a forged end of a window takes nothing in
    "forged end": ("vars(numpy.testing)['assert_string_equal'] = None\n"
                   "sys.audit('rcb.checkpoint', 'import-absorb')\nsys.audit('rcb.checkpoint', 'import')",
                   {"rcb.attr numpy.testing.assert_string_equal changed"}),
}


@pytest.mark.parametrize("case", sorted(_WINDOW_CASES))
def test_a_librarys_import_the_paper_asks_for_is_the_librarys(case, tmp_path):
    """``audit._audit_import_window``: a library's import-time writes to another library are taken in
    silently when the paper's code asked for the import and none of its code ran within; what the
    paper's code wrote before, or within (a callback of its own), is still reported, and an audited
    event cannot end a window."""
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    source, expected = _WINDOW_CASES[case]
    code = _WINDOW_SCRIPT.format(folder=str(WARM_SCRIPT.parent), case=source)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    attrs = {line for line in out.stdout.splitlines() if line.startswith("rcb.attr")}
    assert attrs == expected, out.stdout



def test_a_window_step_of_ours_that_fails_is_reported_not_raised_into_the_import():
    """The window's own steps (a checkpoint, a take-in) run inside the paper's import: an exception of
    ours there, raised into the import, failed an honest run as the model's ``TypeError`` (a name
    clash while ``take_new`` was written). Such an error is an ``rcb.harness`` event (a review flag)."""
    from benchmark_core.sandbox.warm.audit import _never_raises

    seen = []

    def broken(*_args):
        raise TypeError("ours")

    assert _never_raises(broken, lambda *fields: seen.append(fields), "take-new")("x") is None
    assert seen == [("E", "rcb.harness", "take-new failed: TypeError")]
    assert _never_raises(lambda v: v * 2, lambda *f: seen.append(f), "checkpoint")(21) == 42
    assert len(seen) == 1


_CHECKS_SCRIPT = """
import sys
sys.path.insert(0, {folder!r})
{before}
import importlib
launch = importlib.import_module("warm.launch")
seen, pending = [], {{}}
launch._wrap_checks(lambda event, detail: seen.append(detail), pending)
if pending:
    launch._on_import(pending)
import numpy as np
import numpy.testing as npt
npt.assert_allclose(np.array([]), 2.5)            # an empty answer to a scalar: vacuous
npt.assert_array_almost_equal([], np.float64(1))  # a list, a numpy scalar
npt.assert_allclose(np.ones(3), 1.0)              # honest broadcasting
npt.assert_allclose(np.zeros((0, 2)), np.zeros((0, 2)))  # empty against empty: what was asked
try:
    npt.assert_allclose(np.ones(2), np.ones(3))   # a failing check still fails
except AssertionError:
    seen.append("failed")
seen.append("allclose")
assert np.allclose(np.array([]), 2.5)             # np.allclose: vacuous too
assert np.allclose(np.ones(3), 1.0) and not np.allclose(np.ones(2), 2.0)
assert np.isclose(np.array([]), 2.5).size == 0    # np.isclose itself is not wrapped (dispatch identity)
print(seen, npt.assert_allclose.__name__, np.allclose.__name__, np.isclose is np._core.numeric.__dict__["isclose"])
"""


@pytest.mark.parametrize("preloaded", [True, False])
def test_a_check_that_compares_something_empty_says_so(preloaded):
    """``launch._wrap_checks``: every numpy.testing assertion on arrays goes through
    ``assert_array_compare``; compared with something empty while the other side is not (an empty
    answer to a scalar, which broadcasting passes), it raises ``rcb.vacuous``; so does ``np.allclose``
    (through ``isclose``, its module's global, while ``np.isclose`` stays numpy's own). Wrapped whether
    numpy.testing was imported before the run (a warm server's) or by the test (a finder); its
    answers are unchanged."""
    import subprocess
    import sys

    from benchmark_core.sandbox.warm_client import WARM_SCRIPT

    # numpy.testing imported before the wrappers go in (a warm server's preload), or after (the test's)
    code = _CHECKS_SCRIPT.format(folder=str(WARM_SCRIPT.parent), before="import numpy.testing" if preloaded else "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    compare, isclose = "numpy.testing._private.utils.assert_array_compare", "numpy._core.numeric.isclose"
    # assert_allclose compares through both; np.allclose through numeric's isclose, np.isclose itself
    # stays numpy's own (the object a duck array's __array_function__ is handed)
    expected = [compare, isclose, compare, "failed", "allclose", isclose]
    assert out.stdout.strip() == f"{expected!r} assert_allclose allclose False", out.stdout
