"""Helpers of the probe suite: host health checks and running a hostile completion."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import psutil

from benchmark_core.runner import Task, run_task
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


def _leftovers(rows: list[tuple[int, int, str]]) -> list[str]:
    """Processes below the warm server, given (pid, ppid, cmdline) rows of one sandbox."""
    warm = {pid for pid, _pp, cmd in rows if "warm.py" in cmd and not cmd.split()[0].endswith("bwrap")}
    servers = {pid for pid, pp, cmd in rows if pid in warm and pp not in warm}
    children: dict[int, list[int]] = {}
    for pid, pp, _cmd in rows:
        children.setdefault(pp, []).append(pid)
    found, stack = [], list(servers)
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    by_pid = {pid: cmd for pid, _pp, cmd in rows}
    return [f"{pid} {by_pid[pid][:60]} {by_pid[pid][-30:]}" for pid in found]


def sandbox_leftovers(session) -> list[str]:
    """Processes still alive inside the session's sandbox besides its warm runner."""
    client = getattr(session, "client", None)
    if client is not None and hasattr(client, "proc"):  # bwrap: the host sees the sandbox's processes
        try:
            procs = [psutil.Process(client.proc.pid)] + psutil.Process(client.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        rows = []
        for proc in procs:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    rows.append((proc.pid, proc.ppid(),
                                 f"{' '.join(proc.cmdline())} [uid {proc.uids().real}, {proc.status()}]"))
            except psutil.NoSuchProcess:
                continue
        return _leftovers(rows)
    container = getattr(session, "container", None)
    if container is not None:  # docker: ask the engine
        top = container.top(ps_args="-eo pid,ppid,stat,args")
        titles = top.get("Titles", [])
        rows = []
        for proc in top.get("Processes") or []:
            data = dict(zip(titles, proc))
            if "Z" in data.get("STAT", ""):
                continue
            rows.append((int(data["PID"]), int(data["PPID"]), data.get("COMMAND") or data.get("ARGS") or ""))
        return _leftovers(rows)
    raise AssertionError(f"do not know how to list the processes of {type(session).__name__}")


def namespace_strays(session) -> list[str]:
    """Processes in the session's pid namespace that are not in the runner's own tree (bwrap only)."""
    client = getattr(session, "client", None)
    if client is None or not hasattr(client, "proc"):
        return []
    try:
        tree = [psutil.Process(client.proc.pid)] + psutil.Process(client.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    namespaces = set()
    for proc in tree[1:]:
        try:
            namespaces.add(os.readlink(f"/proc/{proc.pid}/ns/pid"))
        except OSError:
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
    lines = tuple("    " + line if line.strip() else "" for line in text.strip("\n").splitlines())
    return Task(paper, snippet, lines)


def run_probe(session, paper, body: str, *, timeout: float):
    return run_task(session, probe_task(paper, body), timeout=timeout)


CANARY = Path(os.environ.get("TMPDIR", "/tmp")) / f"rcb-probe-canary-{os.getpid()}.txt"
