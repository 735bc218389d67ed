import os
import time

import pytest

from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, published_verdict, run_tasks
from benchmark_core.sandbox import Limits, get_sandbox


def make_pset(tmp_path, body: str, test: str = "import m\nm.f()\nprint('done')\n"):
    root = tmp_path / "pset"
    (root / "p").mkdir(parents=True)
    (root / "papers.yaml").write_text("- id: p\n  title: P\n  annotated_file_paths: m.py\n")
    (root / "p" / "m.py").write_text(f'def f():\n    # <paper2code name="s">\n{body}\n    # </paper2code name="s">\n')
    (root / "p" / "paper2code_test.py").write_text(test)
    return load_problemset(root)


def run_one(pset, code: list[str], **kw):
    paper = pset.papers[0]
    sandbox = get_sandbox("local", limits=kw.pop("limits", Limits()))
    return run_tasks([Task(paper, paper.snippets[0], tuple(code))], sandbox=sandbox, workers=1, **kw)[0]


def test_published_verdict_rule():
    assert published_verdict(0, "all good\n", "")
    assert not published_verdict(1, "", "")
    for marker in ("Error:", "Exception:", "Traceback", "failed"):
        assert not published_verdict(0, f"x {marker} y", "")
    assert published_verdict(0, "", "Ran 3 tests\n\nOK\n")


def test_pass_and_fail_keep_exit_code_output_and_seconds(tmp_path):
    pset = make_pset(tmp_path, "    return 1")
    ok = run_one(pset, ["    return 1"])
    assert ok.passed and ok.exit_code == 0 and ok.category is None and ok.seconds > 0
    bad = run_one(pset, ["    return undefined_name"])
    assert not bad.passed and bad.exit_code == 1 and bad.category == "name"
    assert "NameError" in bad.output_tail


def test_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "child.pid"
    code = [
        "    import subprocess, time",
        f"    p = subprocess.Popen(['sleep', '300'])",
        f"    open({str(marker)!r}, 'w').write(str(p.pid))",
        "    while True: time.sleep(0.1)",
    ]
    run = run_one(make_pset(tmp_path, "    return 1"), code, timeout=2)
    assert run.timed_out and run.category == "timeout" and not run.passed
    child = int(marker.read_text())
    assert wait_gone(child), "the test's child process outlived the timeout"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """True once the process no longer exists or is a zombie waiting for its new parent to reap it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_output_is_bounded(tmp_path):
    limits = Limits(output_bytes=8192)
    run = run_one(make_pset(tmp_path, "    return 1"), ["    print('x' * 10_000_000)"], limits=limits)
    assert run.passed
    assert len(run.stdout) < 9000 and "bytes omitted" in run.stdout


def test_memory_limit_makes_a_crash_not_a_hang(tmp_path):
    limits = Limits(memory_mb=512)
    run = run_one(make_pset(tmp_path, "    return 1"), ["    x = bytearray(2 * 1024 ** 3)"], limits=limits, timeout=20)
    assert not run.passed and run.category == "crash"


def test_runs_in_a_copy_and_leaves_the_paper_untouched(tmp_path):
    pset = make_pset(tmp_path, "    return 1")
    before = (pset.papers[0].folder / "m.py").read_text()
    run_one(pset, ["    open('paper2code_test.py', 'w').write('')", "    return 1"])
    assert (pset.papers[0].folder / "m.py").read_text() == before
    assert (pset.papers[0].folder / "paper2code_test.py").read_text().startswith("import m")


def test_each_papers_last_queued_run_is_marked_last_and_no_other(tmp_path):
    # issue 24: the scheduler tells a session which run is the last one queued for its paper
    # (SandboxSession.run's ``last``: the warm runner then makes no child ahead for nobody); a
    # missing completion makes no run and is not counted; reference runs are never marked
    from benchmark_core.sandbox.base import Sandbox, SandboxSession
    from benchmark_core.sandbox.local import LocalSandbox

    pset = make_pset(tmp_path, "    return 1")
    paper = pset.papers[0]
    snip = paper.snippets[0]
    asked: list[tuple[bool, bool]] = []  # (files replaced, last), in the order the runs were asked for

    class Recording(LocalSandbox):
        def open(self, spec):
            inner = super().open(spec)

            class Session(SandboxSession):
                def run(self, files, *, timeout, last=False):
                    asked.append((bool(files), last))
                    return inner.run(files, timeout=timeout, last=last)

            return Session(self, spec)

    tasks = [Task(paper, snip, ("    return 1",), sample=i) for i in range(5)] + [Task(paper, snip, None, sample=5)]
    runs = run_tasks(tasks, sandbox=Recording(), workers=2)
    assert [r.passed for r in runs[:5]] == [True] * 5 and runs[5].category == "missing"
    completions = [last for replaced, last in asked if replaced]
    assert len(completions) == 5 and completions.count(True) == 1 and completions[-1] is True, asked
    assert not any(last for replaced, last in asked if not replaced)


def test_the_readings_of_the_tasks_wait_for_the_sandboxs_head_start(tmp_path, monkeypatch):
    """The host reads each task's file ahead (``_ReadingsAhead``) only once the backend's head start
    is under way (the event ``prepare`` returns): a reading holds the interpreter lock for a whole
    parse, and the start's own steps on the host waited behind them. Without an event the readings
    begin at once; verdicts are the same either way."""
    import threading

    from benchmark_core import runner
    from benchmark_core.sandbox.local import LocalSandbox

    # each run takes 0.5 s: the runs left when the head start is under way are read ahead
    pset = make_pset(tmp_path, "    return 1", test="import time\nimport m\ntime.sleep(0.5)\nm.f()\nprint('done')\n")
    paper = pset.papers[0]
    snip = paper.snippets[0]
    tasks = [Task(paper, snip, ("    return 1",), sample=i) for i in range(8)]
    ahead: list[float] = []  # when the readings thread made each reading
    real_read = runner.task_read

    def read(task):
        if threading.current_thread().name == "readings-ahead":
            ahead.append(time.monotonic())
        return real_read(task)

    monkeypatch.setattr(runner, "task_read", read)

    class HeadStart(LocalSandbox):
        """A backend whose head start's processes run 1.5 s after ``prepare`` (its sessions open at once)."""

        def __init__(self, event: bool):
            super().__init__()
            self.event, self.begun_at = event, None

        def prepare(self, papers):
            if not self.event:
                return None
            begun = threading.Event()

            def later():
                time.sleep(1.5)
                self.begun_at = time.monotonic()
                begun.set()

            threading.Thread(target=later, daemon=True).start()
            return begun

    verdicts = {}
    for event in (True, False):
        ahead.clear()
        sandbox = HeadStart(event)
        started = time.monotonic()
        runs = run_tasks(tasks, sandbox=sandbox, workers=1)
        verdicts[event] = [(r.passed, r.category) for r in runs]
        assert ahead, "no reading was made ahead"
        if event:
            assert sandbox.begun_at is not None and min(ahead) >= sandbox.begun_at
        else:
            assert min(ahead) - started < 1.0
    assert verdicts[True] == verdicts[False]
    assert all(passed for passed, _ in verdicts[True])
