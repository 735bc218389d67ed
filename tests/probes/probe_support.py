"""Helpers of the probe suite: host health checks and running a hostile completion."""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmark_core.runner import Task, run_task
from benchmark_core.sandbox import warm
from benchmark_core.sandbox.base import Limits

PSET = Path(__file__).resolve().parent / "pset"
REPO = Path(__file__).resolve().parents[2]
SECRET = "rcb-probe-secret-" + hashlib.sha256(str(os.getpid()).encode()).hexdigest()[:12]
PROBE_LIMITS = Limits(memory_mb=1024, pids=64, cpus=1.0, file_size_mb=64, tmpfs_mb=256, output_bytes=32 * 1024)


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@dataclass
class Proc:
    pid: int
    ppid: int
    rss_kb: int
    zombie: bool
    cmd: str
    name: str = ""
    uid: int = -1


def _runner_pid(session) -> int | None:
    """The host pid of the session's warm runner (the paper's server under a warm parent), if known."""
    client = getattr(session, "client", None)
    return getattr(client, "pid", None) if client is not None else None


def sandbox_processes(session) -> list[Proc]:
    """Every process of the session's sandbox, as the host (bwrap) or the engine (docker) sees it."""
    pid = _runner_pid(session)
    if pid is not None:  # the host sees the runner's processes (bwrap; docker on this host's engine)
        try:
            procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        rows = []
        for proc in procs:
            try:
                with proc.oneshot():
                    rows.append(Proc(proc.pid, proc.ppid(), proc.memory_info().rss // 1024,
                                     proc.status() == psutil.STATUS_ZOMBIE,
                                     f"{' '.join(proc.cmdline())} [uid {proc.uids().real}]",
                                     proc.name(), proc.uids().real))
            except psutil.NoSuchProcess:
                continue
        return rows
    container = getattr(session, "container", None)
    if container is not None:  # docker on another host: ask the engine
        top = container.top(ps_args="-eo pid,ppid,rss,stat,uid -o comm=NAME -o args")
        titles = top.get("Titles", [])
        rows = []
        for proc in top.get("Processes") or []:
            data = dict(zip(titles, proc))
            rows.append(Proc(int(data["PID"]), int(data["PPID"]), int(data.get("RSS") or 0),
                             "Z" in data.get("STAT", ""), data.get("COMMAND") or data.get("ARGS") or "",
                             data.get("NAME", ""), int(data.get("UID") or -1)))
        return rows
    raise AssertionError(f"do not know how to list the processes of {type(session).__name__}")


def warm_server(rows: list[Proc]) -> Proc | None:
    """The warm runner: a warm.py process whose parent is not one (its forked runs are)."""
    warm = {p.pid for p in rows if "warm.py" in p.cmd and not p.cmd.split()[0].endswith("bwrap")}
    servers = [p for p in rows if p.pid in warm and p.ppid not in warm]
    return servers[0] if servers else None


def descendants(rows: list[Proc], root: int) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for p in rows:
        children.setdefault(p.ppid, []).append(p)
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child.pid)
    return found


def server_spare(rows: list[Proc], server: Proc) -> Proc | None:
    """The server's spare: the next run's child, forked ahead (warm.py ``Server.spare_fork``). One
    direct child of the server, named ``rcb-spare``, with the server's own uid (a run's processes
    have the run's uid, never the server's: a run cannot pass for the spare)."""
    spares = [p for p in rows if p.ppid == server.pid and p.name == warm.SPARE_NAME.decode()
              and p.uid == server.uid and not p.zombie]
    return spares[0] if len(spares) == 1 else None


def sandbox_leftovers(session) -> list[str]:
    """Processes still alive inside the session's sandbox besides its warm runner and its spare."""
    rows = sandbox_processes(session)
    server = warm_server(rows)
    if server is None:
        return []
    spare = server_spare(rows, server)
    return [f"{p.pid} {p.cmd[:60]} {p.cmd[-30:]}" for p in descendants(rows, server.pid)
            if not p.zombie and p is not spare]


def namespace_strays(session) -> list[str]:
    """Processes in the session's pid namespace that are not in the runner's own tree (bwrap only)."""
    pid = _runner_pid(session)
    if pid is None:
        return []
    try:
        tree = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    namespaces = set()
    for proc in tree[1:]:
        try:
            if (proc.ppid() == pid and proc.name() == warm.SPARE_NAME.decode()
                    and proc.uids().real == tree[0].uids().real):
                continue  # the server's spare (server_spare): in the sandbox's namespace, like the server
            namespaces.add(os.readlink(f"/proc/{proc.pid}/ns/pid"))
        except (OSError, psutil.Error):
            continue
    known = {proc.pid for proc in tree}
    strays = []
    for pid in psutil.pids():
        try:
            if pid not in known and os.readlink(f"/proc/{pid}/ns/pid") in namespaces:
                strays.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:80]}")
        except (OSError, psutil.NoSuchProcess):
            continue
    return strays


def wait_until_clean(session, seconds: float = 5.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while True:
        left = sandbox_leftovers(session) + namespace_strays(session)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def probe_task(paper, body: str) -> Task:
    snippet = paper.snippet("solve")
    text = (body.replace("__REPO__", str(REPO)).replace("__SECRET__", SECRET)
            .replace("__CANARY__", str(CANARY)))
    # a line starting with COL0 goes in unindented (a probe leaving the function's block); lines are
    # split at newlines only, so a form feed or a carriage return stays where the probe put it
    lines = tuple(line[len(COL0):] if line.startswith(COL0) else "    " + line if line.strip() else ""
                  for line in text.strip("\n").split("\n"))
    return Task(paper, snippet, lines)


#: the mark of a probe line that goes in at column 0 (``probe_task``)
COL0 = "__COL0__"


def run_probe(session, paper, body: str, *, timeout: float):
    return run_task(session, probe_task(paper, body), timeout=timeout)


CANARY = Path(os.environ.get("TMPDIR", "/tmp")) / f"rcb-probe-canary-{os.getpid()}.txt"
