"""Issue 20's bounds per run, in bwrap and docker with two workers on the demo's focal-loss paper:
memory a run keeps outside its address space (a memfd, children) is bounded by its own memory
cgroup and kills that run only (``crash``), and nothing a run leaves in the IPC namespace (SysV
shared memory, message queues, semaphores, POSIX queues) is there for a later run."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from benchmark_core import runner
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, run_tasks
from benchmark_core.sandbox.base import PaperSpec, get_sandbox
from probe_support import PROBE_LIMITS, REPO

LIMITS = dataclasses.replace(PROBE_LIMITS, memory_mb=300)

#: keeps 1.3 GB in memfds (outside RLIMIT_AS; each under RLIMIT_FSIZE), then answers like the reference
MEMFD = """import os as _os
_block = b"x" * (1 << 20)
_fds = [_os.memfd_create("hoard") for _ in range(26)]
for _fd in _fds:
    for _ in range(50):
        _os.write(_fd, _block)
"""
#: forks four children that each take 250 MB (each under RLIMIT_AS) and wait
CHILDREN = """import os as _os, time as _t
for _ in range(4):
    if _os.fork() == 0:
        _b = bytearray(250 << 20)
        _t.sleep(5)
        _os._exit(0)
_t.sleep(1)
"""
#: leaves a 96 MB SysV segment, a SysV queue and semaphores, and a POSIX queue behind
IPC_MAKE = """import ctypes as _c, ctypes.util as _u
_libc = _c.CDLL(_u.find_library("c") or "libc.so.6", use_errno=True)
_libc.msgget(0x52434231, 0o1666)
_libc.semget(0x52434232, 4, 0o1666)
_libc.mq_open.restype = _c.c_int
_libc.mq_open(b"/rcb-left", 0o100 | 0o2, 0o666, None)
_libc.shmat.restype = _c.c_void_p
_id = _libc.shmget(0x52434230, 96 << 20, 0o1666)
if _id >= 0:
    _p = _libc.shmat(_id, None, 0)
    if _p not in (None, _c.c_void_p(-1).value):
        _c.memset(_p, 1, 96 << 20)
"""
#: what the run itself sees of what it made (its test fails with the counts in its output)
IPC_COUNT = """import os as _o
_n = [len(open("/proc/sysvipc/" + _t).read().splitlines()) - 1 for _t in ("shm", "msg", "sem")]
raise RuntimeError("IPC-MADE %s %s" % (_n, len(_o.listdir("/dev/mqueue"))))
"""
#: prints what of the IPC namespace it can see (the test reads it back from the output)
IPC_LOOK = """import os as _os, sys as _s
for _t in ("shm", "msg", "sem"):
    with open("/proc/sysvipc/" + _t) as _fh:
        _rows = _fh.read().splitlines()[1:]
    print("IPC-SEEN", _t, len(_rows), file=_s.stderr)
_mq = sorted(_os.listdir("/dev/mqueue")) if _os.path.isdir("/dev/mqueue") else []
print("IPC-SEEN mq", len(_mq), file=_s.stderr)
"""


def _with_reference(paper, prefix: str) -> list[Task]:
    """Every snippet's reference code, after ``prefix`` at the snippet's indentation."""
    tasks = []
    for snippet in paper.snippets:
        ref = runner.reference_code(paper, snippet)
        first = next(line for line in ref if line.strip())
        indent = first[:len(first) - len(first.lstrip())]
        lines = tuple(indent + line if line.strip() else "" for line in prefix.splitlines())
        tasks.append(Task(paper, snippet, lines + tuple(ref)))
    return tasks


@pytest.mark.slow
def test_memory_outside_the_address_space_is_bounded_per_run(sandbox_backend_name):
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    hoard = _with_reference(paper, MEMFD)[:3] + _with_reference(paper, CHILDREN)[:3]
    honest = _with_reference(paper, "pass")
    sandbox = get_sandbox(sandbox_backend_name, limits=LIMITS)
    try:
        runs = run_tasks(hoard + honest, sandbox=sandbox, workers=2, timeout=60)
        bound = getattr(sandbox, "memory_bound", "")
    finally:
        sandbox.close()
    assert "cgroup" in bound, f"this host has memory cgroups: the runs must be bounded by one ({bound})"
    for run in runs[:3]:  # the memfd: killed past its limit, as a crash of its own
        assert not run.passed and run.category == "crash", (run.snippet, run.category, run.output_tail[-400:])
    for run in runs[3:6]:  # four children of 250 MB in one 300 MB cgroup: some child is killed
        assert run.category != "environment", run.output_tail[-400:]
    # nobody else paid for it: every honest run beside them passed, unflagged
    assert all(r.passed and not r.flags for r in runs[6:]), [(r.snippet, r.category) for r in runs[6:]]


@pytest.mark.slow
def test_nothing_a_run_leaves_in_ipc_is_seen_by_a_later_run(sandbox_backend_name):
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    make = _with_reference(paper, IPC_MAKE)
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        made = run_tasks(make[:3] + _with_reference(paper, IPC_MAKE + IPC_COUNT)[3:4], sandbox=sandbox,
                         workers=2, timeout=60)
        looked = run_tasks(_with_reference(paper, IPC_LOOK)[:2], sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()
    assert all(not r.passed for r in made)  # ctypes: tampering, whatever it did
    counts = re.findall(r"IPC-MADE \[(\d+), (\d+), (\d+)\] (\d+)", made[3].output_tail)
    # what it made was there while it ran: a segment, a queue, a semaphore set and a POSIX queue
    assert counts and all(int(n) >= 1 for n in counts[-1]), made[3].output_tail[-800:]
    assert all("tampering:ctypes" in r.flags for r in made), [r.flags for r in made]
    for run in looked:
        seen = [line.split() for line in run.output_tail.splitlines() if line.startswith("IPC-SEEN")]
        assert seen and all(count == "0" for _, _, count in seen), (run.snippet, seen, run.output_tail[-600:])


#: what a run sees of the folder its server keeps the next run's copy of the paper in (warm
#: ``Server.copy_ahead``: ``<work>/+ahead``, next to the run's own folder): it may learn the folder is
#: there (the work folder can be passed), never list it, read from it or write into it
AHEAD_LOOK = """import os as _os, sys as _s, time as _t
_ahead = _os.path.join(_os.getcwd(), "..", "..", "+ahead")
_t0 = _t.monotonic()
_done = []
while True:
    while not _os.path.isdir(_ahead) and _t.monotonic() - _t0 < 5:
        _t.sleep(0.05)
    _seen = ["there" if _os.path.isdir(_ahead) else "missing"]
    for _how, _try in (("list", lambda: _os.listdir(_ahead)),
                       ("read", lambda: open(_os.path.join(_ahead, "paper", "paper2code_test.py")).read()),
                       ("write", lambda: open(_os.path.join(_ahead, "paper", "solution_ref.py"), "a").write("x = 1\\n")),
                       ("add", lambda: open(_os.path.join(_ahead, "paper", "sitecustomize.py"), "w").write("x = 1\\n"))):
        try:
            _try()
            _seen.append(_how + ":done")
            _done.append(_how + ":done")
        except PermissionError:
            _seen.append(_how + ":refused")
        except OSError as _e:
            _seen.append(_how + ":" + type(_e).__name__)
    # the copy moved into the other run's folder meanwhile (its request came): look at the next one
    if not any(_x.endswith(":FileNotFoundError") for _x in _seen) or _t.monotonic() - _t0 > 10:
        break
    _t.sleep(0.02)
print("AHEAD-SEEN", " ".join(_seen + [_x for _x in _done if _x not in _seen]), file=_s.stderr)
"""


@pytest.mark.slow
def test_the_next_runs_copy_of_the_paper_is_out_of_a_runs_reach(sandbox_backend_name):
    """A server copies the paper for its next run while a run goes on (the copy is then only moved
    into the next run's folder): a run can neither read nor change that copy, and every run after
    one that tried gets the paper as it is."""
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        tried = run_tasks(_with_reference(paper, AHEAD_LOOK), sandbox=sandbox, workers=2, timeout=60)
        after = run_tasks(_with_reference(paper, "pass"), sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()
    for run in tried:
        seen = {tuple(line.split()[1:]) for line in run.output_tail.splitlines() if line.startswith("AHEAD-SEEN")}
        assert seen == {("there", "list:refused", "read:refused", "write:refused", "add:refused")}, (
            run.snippet, run.output_tail[-600:])
    assert all(r.passed and not r.flags for r in after), [(r.snippet, r.category, r.flags) for r in after]


#: prints the name of the run's own memory cgroup (v1 ``memory``, v2 ``unified``), as the run sees it
CGROUP_NAME = """import sys as _s
with open("/proc/self/cgroup") as _fh:
    _lines = _fh.read().splitlines()
for _line in _lines:
    _id, _ctl, _path = _line.split(":", 2)
    _name = _path.rstrip("/").rsplit("/", 1)[-1]
    if _ctl in ("memory", "") and _name.startswith("run-"):
        print("RUN-CGROUP", _ctl or "unified", _name, file=_s.stderr)
"""


@pytest.mark.slow
def test_a_run_gets_its_own_memory_limit_when_the_limits_change(sandbox_backend_name):
    """A server writes a run cgroup's limits only when they change (the next run of the same slot
    keeps them): a run asking for other limits than the run before (or than the spare waiting in
    its cgroup) runs under its own."""
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    sandbox = get_sandbox(sandbox_backend_name, limits=dataclasses.replace(PROBE_LIMITS, memory_mb=700))
    task = _with_reference(paper, CGROUP_NAME)[0]
    files = {"memory": "memory.limit_in_bytes", "unified": "memory.max"}
    seen = []
    try:
        made = sandbox.cgroups.get()
        assert made is not None, f"this host has memory cgroups: the runs must be bounded by one ({sandbox.memory_bound})"
        with sandbox.open(PaperSpec.from_paper(paper)) as session:  # one server: its slots' cgroups reused
            for memory_mb in (700, 600, 600, 700, 700):
                sandbox.limits = dataclasses.replace(PROBE_LIMITS, memory_mb=memory_mb)
                run = runner.run_task(session, task, timeout=60)
                groups = {tuple(line.split()[1:3]) for line in run.output_tail.splitlines()
                          if line.startswith("RUN-CGROUP")}
                assert len(groups) == 1, (groups, run.output_tail[-600:], session.client.stderr_text(2000))
                kind, name = groups.pop()
                # the run's cgroup is written again only when a run or a spare of its slot comes
                seen.append((made.dirs[kind] / name / files[kind]).read_text().strip())
    finally:
        sandbox.close()
    assert seen == [str(mb << 20) for mb in (700, 600, 600, 700, 700)], seen


#: a host process that joins the memory cgroup whose ``cgroup.procs`` is argv[1], keeps argv[2] MB
#: it cannot give back (no swap is needed: the pages are locked where the kernel lets it), says so
#: on stdout and waits for its stdin to close
HOLDER = """import ctypes, mmap, sys
with open(sys.argv[1], "w") as fh:
    fh.write("0")
size = int(sys.argv[2]) << 20
block = mmap.mmap(-1, size)
for at in range(0, size, mmap.PAGESIZE):
    block[at] = 1
ctypes.CDLL(None, use_errno=True).mlockall(1)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_spare_is_not_used_when_its_cgroup_cannot_be_set_for_the_run(sandbox_backend_name):
    """The next run's child waits in its slot's cgroups with the last run's limits. When the run that
    comes asks for other limits and its memory cgroup refuses them (here: it holds more than the new
    limit that cannot be reclaimed), the spare is not used, since it sits in a cgroup with the old
    limit. The run gets a child of its own, outside that cgroup, and answers as the reference does.
    Once the cgroup can be set again, runs are in it again, under their own limit."""
    paper = load_problemset(REPO / "demo").paper("focal-loss")
    runner._REFERENCE.clear()
    sandbox = get_sandbox(sandbox_backend_name, limits=dataclasses.replace(PROBE_LIMITS, memory_mb=700))
    task = _with_reference(paper, CGROUP_NAME)[0]
    holders: list[subprocess.Popen] = []

    def memory_groups(run) -> set[str]:
        return {line.split()[2] for line in run.output_tail.splitlines()
                if line.startswith("RUN-CGROUP") and line.split()[1] == "memory"}

    try:
        made = sandbox.cgroups.get()
        assert made is not None, f"this host has memory cgroups: the runs must be bounded by one ({sandbox.memory_bound})"
        if made.version != "v1":
            pytest.skip("cgroup v2 enforces a lower memory.max by reclaim and OOM kills: the write is never refused")
        with sandbox.open(PaperSpec.from_paper(paper)) as session:
            first = runner.run_task(session, task, timeout=60)
            assert first.passed and len(memory_groups(first)) == 1, first.output_tail[-600:]
            # the spare for the next run waits in its slot's cgroups by now (forked while the first
            # ran): every slot's memory cgroup gets a holder of 650 MB, under the 700 MB it has
            folders = sorted(p for p in made.dirs["memory"].iterdir() if p.is_dir() and p.name.startswith("run-"))
            assert len(folders) >= 2, folders  # the first run's slot and the spare's
            for folder in folders:
                holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder / "cgroup.procs"), "650"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                holders.append(holder)
                assert holder.stdout.readline().strip() == "held", f"the holder could not take {folder}"
            # a limit of 600 MB cannot be written into a cgroup that holds 650 MB it cannot reclaim
            sandbox.limits = dataclasses.replace(PROBE_LIMITS, memory_mb=600)
            second = runner.run_task(session, task, timeout=60)
            stderr = session.client.stderr_text(4000)
            assert "not usable" in stderr, stderr
            # (its flags are the probe's own import of sys, as in every run of this test)
            assert second.passed, (second.category, second.output_tail[-600:])
            # not the spare: in no run memory cgroup at all (not the one with the old 700 MB limit)
            assert memory_groups(second) == set(), second.output_tail[-600:]
            for holder in holders:
                holder.stdin.close()
                holder.wait(timeout=30)
            holders.clear()
            # the cgroup can be set again: the runs are bounded by it again, with their own limit
            sandbox.limits = dataclasses.replace(PROBE_LIMITS, memory_mb=700)
            third = runner.run_task(session, task, timeout=60)
            names = memory_groups(third)
            assert third.passed and len(names) == 1, third.output_tail[-600:]
            assert (made.dirs["memory"] / names.pop() / "memory.limit_in_bytes").read_text().strip() == str(700 << 20)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        sandbox.close()
