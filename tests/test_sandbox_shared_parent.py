"""One warm parent per environment (bwrap): two papers of one environment are served by one parent
(torch imported once), with verdicts equal to standalone runners', and a run of one paper can neither
read nor write the other paper's files or run folders."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, reference_code, run_tasks
from benchmark_core.sandbox.base import PaperSpec, get_sandbox
from benchmark_core.sandbox.bwrap import BwrapSession, ParentedSession

ROOT = Path(__file__).resolve().parent.parent
TORCH_PSET = ROOT / "tests" / "data" / "torch_pset"

pytestmark = pytest.mark.bwrap


def _runs(sandbox, pset):
    tasks = [Task(p, s, reference_code(p, s)) for p, s in pset.snippets]
    tasks += [Task(p, s, ("    return undefined_name",)) for p, s in pset.snippets]
    return [(r.paper, r.snippet, r.passed, r.category, r.extra.get("tests_run")) for r in
            run_tasks(tasks, sandbox=sandbox, workers=2, timeout=120)]


def test_two_papers_share_one_parent_and_keep_their_verdicts():
    pset = load_problemset(TORCH_PSET)
    shared = get_sandbox("bwrap")
    alone = get_sandbox("bwrap", shared_parent=False)
    try:
        sessions = [shared.open(PaperSpec.from_paper(p)) for p in pset.papers]
        assert all(isinstance(s, ParentedSession) for s in sessions)
        assert len({s.server_pid for s in sessions}) == 1  # one bwrap sandbox holds both papers' servers
        assert all("torch" in s.ready["preloaded"] for s in sessions)
        for s in sessions:
            s.close()
        assert isinstance(alone.open(PaperSpec.from_paper(pset.papers[0])), BwrapSession)
        assert _runs(shared, pset) == _runs(alone, pset)
    finally:
        shared.close()
        alone.close()


def test_papers_in_folders_of_their_own_share_one_parent_under_papers_root(tmp_path):
    """The site's paper cache keeps each paper in a folder named by its content hash: with the cache as
    ``papers_root`` they still share their environment's parent, and a run of one sees nothing of the other."""
    for name in ("hash-a", "hash-b"):
        shutil.copytree(TORCH_PSET, tmp_path / "cache" / name)
    first = load_problemset(tmp_path / "cache" / "hash-a").papers[0]
    second = load_problemset(tmp_path / "cache" / "hash-b").papers[1]
    per_folder = get_sandbox("bwrap")
    shared = get_sandbox("bwrap", papers_root=str(tmp_path / "cache"))
    try:
        a, b = (per_folder.open(PaperSpec.from_paper(p)) for p in (first, second))
        assert a.server_pid != b.server_pid  # one parent per folder holding papers: torch imported twice
        a.close(), b.close()
        a, b = (shared.open(PaperSpec.from_paper(p)) for p in (first, second))
        assert a.server_pid == b.server_pid
        look = ("import glob, os\n"
                "print('LOOK', sorted(glob.glob('/rcb/papers/all/*')), os.access('/rcb/papers/all', os.R_OK))\n")
        test_a = (first.folder / "paper2code_test.py").read_text()
        result = a.run({"paper2code_test.py": look + test_a}, timeout=60)
        line = next(ln for ln in result.stdout.splitlines() if ln.startswith("LOOK"))
        if os.geteuid() == 0:  # runs have uids of their own: the papers' folder is closed to them
            assert line == "LOOK [] False", line
        a.close(), b.close()
        tasks = [Task(p, s, reference_code(p, s)) for p in (first, second) for s in p.snippets]
        tasks += [Task(p, s, ("    return undefined_name",)) for p in (first, second) for s in p.snippets]
        verdicts = [[(r.paper, r.snippet, r.passed, r.category) for r in run_tasks(tasks, sandbox=box, workers=2,
                                                                               timeout=120)]
                    for box in (shared, per_folder)]
        assert verdicts[0] == verdicts[1]
        assert sum(passed for _, _, passed, _ in verdicts[0]) == len(tasks) // 2
    finally:
        shared.close()
        per_folder.close()


SPY = '''import glob, os
found = {}
for pattern in ("/rcb/papers/all/*/*.py", "/rcb/runs/*/*/paper/*.py", "/rcb/runs/*"):
    found[pattern] = glob.glob(pattern)
others = [p for p in found["/rcb/runs/*"] if not os.getcwd().startswith(p + "/")]
wrote = []
for folder in others:
    try:
        open(os.path.join(folder, "x"), "w").write("x")
        wrote.append(folder)
    except OSError:
        pass
    try:
        os.listdir(folder)
        wrote.append("listed " + folder)
    except OSError:
        pass
print("SPY", len(found["/rcb/runs/*"]), found["/rcb/papers/all/*/*.py"], found["/rcb/runs/*/*/paper/*.py"], wrote)
'''


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="runs get uids of their own only when the worker is root")
def test_a_run_of_one_paper_cannot_reach_the_other_papers_files(tmp_path):
    shutil.copytree(TORCH_PSET, tmp_path / "pset")
    pset = load_problemset(tmp_path / "pset")
    sandbox = get_sandbox("bwrap")
    try:
        a, b = (sandbox.open(PaperSpec.from_paper(p)) for p in pset.papers)
        assert a.server_pid == b.server_pid
        # paper B's run is going on (it sleeps) while paper A's run looks around
        import threading

        test_b = (pset.papers[1].folder / "paper2code_test.py").read_text()
        slow = threading.Thread(target=b.run, args=({"paper2code_test.py": "import time\ntime.sleep(4)\n" + test_b},),
                                kwargs={"timeout": 30})
        slow.start()
        import time

        time.sleep(1.5)
        test_a = (pset.papers[0].folder / "paper2code_test.py").read_text()
        result = a.run({"paper2code_test.py": SPY + test_a}, timeout=60)
        slow.join()
        line = next(ln for ln in result.stdout.splitlines() if ln.startswith("SPY"))
        # it sees both papers' work folders exist, and can open neither the other's nor any paper's files
        assert line == "SPY 2 [] [] []", line
        a.close()
        b.close()
    finally:
        sandbox.close()


#: what a test sees at its first line: the lazily loaded scipy submodules that are in sys.modules
LOOK_MODULES = ("import sys\nprint('MODS', sorted(m for m in ('scipy.special', 'scipy.linalg') if m in sys.modules))\n")
TEST_TAIL = "\nimport unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertTrue(True)\n\n\n" \
    "if __name__ == '__main__':\n    unittest.main()\n"


def test_papers_of_one_interpreter_get_parents_of_their_own_imports(tmp_path):
    """A paper is served by a parent that imported nothing the paper does not import, the one that
    imported the most of it; a paper that no parent fits gets a parent of its own imports (not a
    runner of its own, which would import everything again). Submodules a paper names (``from scipy
    import special``) are imported by its parent, and a paper that does not name them never has them."""
    imports = {
        "a_special": "import numpy\nimport scipy\nfrom scipy import special\n",
        "b_numpy": "import numpy\n",
        "c_linalg": "import numpy\nimport scipy\nfrom scipy import linalg\n",
        "d_both": "import json\nimport numpy\nimport scipy\nfrom scipy import linalg, special\n",
    }
    for name, head in imports.items():
        folder = tmp_path / "papers" / name
        folder.mkdir(parents=True)
        (folder / "paper2code_test.py").write_text(LOOK_MODULES + head + TEST_TAIL)
    sandbox = get_sandbox("bwrap")
    try:
        specs = {name: PaperSpec(id=name, folder=tmp_path / "papers" / name) for name in imports}
        sessions = {name: sandbox.open(spec) for name, spec in specs.items()}  # in this order
        assert all(isinstance(s, ParentedSession) for s in sessions.values())
        parents = {name: sandbox.parent_for(spec) for name, spec in specs.items()}
        assert parents["a_special"].preloads == {"numpy", "scipy", "scipy.special"}
        assert parents["b_numpy"].preloads == {"numpy"}
        assert parents["c_linalg"] is parents["b_numpy"]  # a's parent holds scipy.special, which c does not import
        assert parents["d_both"] is parents["a_special"]  # both fit d: the one that imported more of it
        assert sessions["d_both"].server_pid == sessions["a_special"].server_pid != sessions["b_numpy"].server_pid
        seen = {}
        for name, session in sessions.items():
            result = session.run({}, timeout=60)
            assert result.exit_code == 0, result.stderr
            seen[name] = next(ln for ln in result.stdout.splitlines() if ln.startswith("MODS"))
        # what each run holds at its first line: its own named imports at most, never another paper's
        assert seen == {"a_special": "MODS ['scipy.special']", "b_numpy": "MODS []",
                        "c_linalg": "MODS ['scipy.linalg']", "d_both": "MODS ['scipy.linalg', 'scipy.special']"}
        for session in sessions.values():
            session.close()
    finally:
        sandbox.close()


def _two_environments(tmp_path, roots=("first", "second")):
    """Papers whose parents differ (each under a folder of its own: a parent serves one folder)."""
    specs = []
    for root in roots:
        folder = tmp_path / root / "paper"
        folder.mkdir(parents=True)
        (folder / "paper2code_test.py").write_text("import numpy\n" + TEST_TAIL)
        specs.append(PaperSpec(id=root, folder=folder))
    return specs


def _prestarts_done(timeout: float = 120.0) -> None:
    import threading
    import time

    deadline = time.monotonic() + timeout
    while any(t.name == "warm-parent-prestart" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a parent's head start did not end"
        time.sleep(0.05)


def test_one_environments_parent_starting_holds_up_no_other(tmp_path, monkeypatch):
    """While one environment's parent imports, another environment's parent starts and serves: the
    sandbox-wide lock is not held across a parent's start (``prepare`` relies on it)."""
    import threading
    import time

    from benchmark_core.sandbox import bwrap

    slow_spec, quick_spec = _two_environments(tmp_path)
    started, real_init = threading.Event(), bwrap._Parent.__init__

    def init(self, sandbox, paper, root, modules, **how):
        if paper.id == slow_spec.id:
            started.set()
            time.sleep(4)  # as a heavy framework's import would take
        real_init(self, sandbox, paper, root, modules, **how)

    monkeypatch.setattr(bwrap._Parent, "__init__", init)
    sandbox = get_sandbox("bwrap")
    try:
        slow = {}
        thread = threading.Thread(target=lambda: slow.setdefault("parent", sandbox.parent_for(slow_spec)))
        thread.start()
        assert started.wait(30)
        quick = sandbox.parent_for(quick_spec)
        assert thread.is_alive(), "the second environment's parent waited for the first's"
        session = sandbox.open(quick_spec)
        assert session.server_pid == quick.proc.pid
        assert session.run({}, timeout=60).exit_code == 0
        session.close()
        thread.join(60)
        assert slow["parent"] is sandbox.parent_for(slow_spec) is not quick
    finally:
        sandbox.close()


def _papers_importing(tmp_path, imports: dict[str, str]) -> list[PaperSpec]:
    """Papers under one folder (one environment's parents), each test importing what ``imports`` says."""
    specs = []
    for name, head in imports.items():
        folder = tmp_path / "papers" / name
        folder.mkdir(parents=True)
        (folder / "paper2code_test.py").write_text(head + TEST_TAIL)
        specs.append(PaperSpec(id=name, folder=folder))
    return specs


def _parents_timed(monkeypatch) -> dict[str, tuple[float, float]]:
    """Each bwrap parent's start made a second longer, as a heavier import would make it, and timed:
    paper id -> (start, ready) of the parent started for it."""
    import time

    from benchmark_core.sandbox import bwrap

    spans, real_init = {}, bwrap._Parent.__init__

    def init(self, sandbox, paper, root, modules, **how):
        started = time.monotonic()
        time.sleep(1)
        real_init(self, sandbox, paper, root, modules, **how)
        spans[paper.id] = (started, time.monotonic())

    monkeypatch.setattr(bwrap._Parent, "__init__", init)
    return spans


def test_prepare_starts_each_environments_parent_once_and_the_papers_use_them(tmp_path, monkeypatch):
    specs = _two_environments(tmp_path, ("first", "second", "third"))
    spans = _parents_timed(monkeypatch)
    sandbox = get_sandbox("bwrap")
    try:
        sandbox.prepare(specs + specs)  # a paper met twice, as a scoring's order can list it
        _prestarts_done()
        # the first two environments' parents import at once (the scoring's first open waits for the
        # first: the second takes the other core), the third only once the second has imported
        assert sorted(spans) == ["first", "second", "third"]
        assert spans["second"][0] < spans["first"][1]
        assert spans["second"][1] <= spans["third"][0]
        parents = [p for group in sandbox._parents.values() for p in group]
        assert len(parents) == 3 and all(p.alive for p in parents)
        sessions = [sandbox.open(spec) for spec in specs]
        assert sorted(s.server_pid for s in sessions) == sorted(p.proc.pid for p in parents)
        assert [p for group in sandbox._parents.values() for p in group] == parents  # none started again
        for session in sessions:
            assert session.run({}, timeout=60).exit_code == 0
            session.close()
    finally:
        sandbox.close()


def test_prepare_starts_a_parent_for_each_set_of_imports_of_one_environment(tmp_path, monkeypatch):
    """Papers under one folder and interpreter that import different modules get parents of their own
    imports: ``prepare`` starts one for the first paper of each set that no earlier parent would
    serve (``parents_planned``), the first two at once, none for a paper an earlier one serves, and
    the sessions then use them without starting another."""
    from benchmark_core.sandbox.warm_client import paper_preloads, parents_planned

    imports = {"a_numpy": "import numpy\n", "b_scipy": "import scipy\n",
               "c_numpy_scipy": "import numpy\nimport scipy\n", "d_numpy": "import json\nimport numpy\n"}
    specs = _papers_importing(tmp_path, imports)
    sandbox = get_sandbox("bwrap")
    preloads_of = lambda p: paper_preloads(p, sandbox.options)  # noqa: E731
    # c imports all a's parent holds, d is a's set: both served by a's; b's set is a parent of its own
    one = lambda p: "one environment"  # noqa: E731
    assert [p.id for p in parents_planned(specs + specs, one, preloads_of)] == ["a_numpy", "b_scipy"]
    # in another order: c is served by b's parent, d by none before it
    assert [p.id for p in parents_planned(specs[1:], one, preloads_of)] == ["b_scipy", "d_numpy"]
    # each environment plans its own parents
    own = parents_planned(specs, lambda p: p.id, preloads_of)
    assert [p.id for p in own] == [p.id for p in specs]
    spans = _parents_timed(monkeypatch)
    try:
        sandbox.prepare(specs)
        _prestarts_done()
        assert sorted(spans) == ["a_numpy", "b_scipy"]
        assert spans["b_scipy"][0] < spans["a_numpy"][1]  # the two sets' parents imported at once
        parents = [p for group in sandbox._parents.values() for p in group]
        assert len(parents) == 2 and all(p.alive for p in parents)
        by_preloads = {frozenset(p.preloads or ()): p.proc.pid for p in parents}
        sessions = {spec.id: sandbox.open(spec) for spec in specs}
        assert [p for group in sandbox._parents.values() for p in group] == parents  # none started again
        assert sessions["b_scipy"].server_pid == by_preloads[frozenset({"scipy"})]
        # c is served by the parent that imported the most of what it imports (a tie: either)
        assert sessions["a_numpy"].server_pid == sessions["d_numpy"].server_pid == by_preloads[frozenset({"numpy"})]
        assert sessions["c_numpy_scipy"].server_pid in by_preloads.values()
        for session in sessions.values():
            assert session.run({}, timeout=60).exit_code == 0
            session.close()
    finally:
        sandbox.close()


def test_a_paper_waits_for_a_parent_starting_that_will_serve_it(tmp_path, monkeypatch):
    """A paper opened while a parent that would serve it is still starting under another set's lock
    (``prepare``'s head start, the scoring's next session opened ahead) waits for that parent instead
    of starting one of its own beside it: an environment imports each set once."""
    import threading
    import time

    imports = {"a_numpy": "import numpy\n", "c_numpy_scipy": "import numpy\nimport scipy\n"}
    specs = _papers_importing(tmp_path, imports)
    spans = _parents_timed(monkeypatch)
    sandbox = get_sandbox("bwrap")
    try:
        first = threading.Thread(target=sandbox.parent_for, args=(specs[0],))
        first.start()
        deadline = time.monotonic() + 30
        while not any(sandbox._parents_pending.values()):  # a's parent is starting
            assert time.monotonic() < deadline and first.is_alive(), "a's parent was not seen starting"
            time.sleep(0.01)
        parent = sandbox.parent_for(specs[1])  # a's parent is starting: c waits for it
        first.join(60)
        assert sorted(spans) == ["a_numpy"]
        assert parent.preloads == {"numpy"}
        assert [p for group in sandbox._parents.values() for p in group] == [parent]
    finally:
        sandbox.close()


def test_prepare_says_once_its_parents_processes_run_before_they_have_imported(tmp_path, monkeypatch):
    """``prepare``'s event (what the scoring's own host work waits for) is set once the two parents
    started at once have their processes spawned, while they still import, not when they are ready;
    with nothing to start it is set at once, and a sandbox that shares no parent returns none."""
    import psutil
    import time

    from benchmark_core.sandbox import bwrap

    specs = _two_environments(tmp_path)
    real_receive = bwrap._Parent._receive

    def receive(self, timeout):  # the parents' imports made 2 s longer, as a heavy framework's would
        time.sleep(2)
        return real_receive(self, timeout)

    monkeypatch.setattr(bwrap._Parent, "_receive", receive)
    sandbox = get_sandbox("bwrap")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        begun = sandbox.prepare(specs)
        assert begun.wait(30)
        assert not any(sandbox._parents.values())  # neither is ready yet...
        assert sum(len(w) for w in sandbox._parents_pending.values()) == 2
        spawned = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        # ...both run (bwrap, or the shell that puts it in the cpu cgroup and execs it)
        assert len([p for p in spawned if p.is_running()]) >= 2, [(p.name(), p.cmdline()[:2]) for p in spawned]
        _prestarts_done()
        assert len([p for group in sandbox._parents.values() for p in group if p.alive]) == 2
        again = sandbox.prepare(specs)  # both already running: nothing to wait for
        assert again.wait(5)
        assert sandbox.prepare([]).is_set()
    finally:
        sandbox.close()
    alone = get_sandbox("bwrap", shared_parent=False)
    try:
        assert alone.prepare(specs) is None
    finally:
        alone.close()


def test_a_parent_started_ahead_of_a_close_is_not_left_running(tmp_path):
    import psutil

    specs = _two_environments(tmp_path)
    sandbox = get_sandbox("bwrap")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    sandbox.prepare(specs)
    sandbox.close()  # while the parents import
    _prestarts_done()
    assert not sandbox._parents
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [p.cmdline()[:3] for p in left]


def test_a_scoring_starts_its_environments_parents_at_its_start(tmp_path, monkeypatch):
    """run_tasks tells the backend its papers first: the second environment's parent is started
    before its paper's turn, and each environment has one parent, with the verdicts of standalone runners."""
    from benchmark_core import runner

    # a first scoring: no reference run of these papers known to this process (an earlier test's
    # would put the papers known to run longest first, ``runner.longest_runs_first``)
    monkeypatch.setattr(runner, "_REFERENCE", {})
    pset = load_problemset(TORCH_PSET)
    for i in range(len(pset.papers)):  # each paper in a folder of its own: a parent each
        shutil.copytree(TORCH_PSET, tmp_path / f"root{i}")
    papers = [load_problemset(tmp_path / f"root{i}").papers[i] for i in range(len(pset.papers))]
    tasks = [Task(p, s, code) for p in papers for s in p.snippets
             for code in (reference_code(p, s), ("    return undefined_name",))]
    shared, alone = get_sandbox("bwrap"), get_sandbox("bwrap", shared_parent=False)
    try:
        seen = []
        real = shared.prepare
        shared.prepare = lambda specs: (seen.append([s.id for s in specs]), real(specs))
        verdicts = [[(r.paper, r.snippet, r.passed, r.category) for r in run_tasks(tasks, sandbox=box, workers=1,
                                                                               timeout=120)]
                    for box in (shared, alone)]
        assert seen == [[p.id for p in papers]]
        assert len([p for group in shared._parents.values() for p in group]) == len(papers)
        assert verdicts[0] == verdicts[1]
        assert sum(passed for _, _, passed, _ in verdicts[0]) == len(tasks) // 2
    finally:
        shared.close()
        alone.close()
