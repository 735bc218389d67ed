"""Warm sessions kept between scorings: a bounded pool in front of any backend.

``SandboxPool(inner)`` is itself a ``Sandbox``: ``open(PaperSpec)`` hands out a lease on a warm
session of ``inner`` for that (environment, paper version) — the paper's content hash, so an edited
paper never meets a runner that imported its old files — and the lease's ``close()`` gives it back
instead of stopping it. The N-th scoring of a paper in the same process then pays none of its imports.
A session is shared by the leases that hold it at once (sessions are thread-safe); idle sessions
are closed after ``idle_seconds``, the least recently used first when more than ``max_sessions``
are open or their processes hold more than ``memory_mb`` together. What they hold is measured
when a session opens and, as sessions are given back, at most every ``memory_check_seconds``: the
measure reads each process's ``smaps_rollup``, which costs the kernel a walk of every mapping (tens
of milliseconds for a process holding torch), far too much to pay at every give-back.

It must live where it survives between jobs: in a long-lived process (an RQ ``SimpleWorker``, whose
jobs run in the worker process itself, or a sandbox service), not in RQ's default work-horse that is
forked per job and exits with it.
"""
from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping

from .base import PaperSpec, RunResult, Sandbox, SandboxSession

__all__ = ["SandboxPool", "session_memory_bytes", "sessions_memory_bytes"]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields start after the last ')'
        fields = stat[stat.rfind(")") + 2 :].split()
        tree[int(fields[1])].append(int(entry))
    return tree


def _process_bytes(pid: int, page: int) -> int:
    """What one process holds: its proportional set size (a page shared by n processes counts 1/n:
    forked warm runners share their parent's imports), else its resident size."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page


def _tree_rss(*pids: int) -> int:
    """Bytes held by ``pids`` and their descendants, each process counted once (what warm runners
    and their runs hold; sessions served by one warm parent report the same parent)."""
    tree, total, todo, seen, page = _children(), 0, list(pids), set(), os.sysconf("SC_PAGE_SIZE")
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            total += _process_bytes(current, page)
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(tree.get(current, ()))
    return total


def _container_memory(container_id: str) -> int | None:
    for path in (f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current",
                 f"/sys/fs/cgroup/docker/{container_id}/memory.current"):
        try:
            return int(Path(path).read_text())
        except (OSError, ValueError):
            continue
    return None


def session_memory_bytes(session: SandboxSession) -> int:
    """What a session's processes hold in memory (0 when the backend does not say)."""
    return sessions_memory_bytes([session])


def sessions_memory_bytes(sessions: list[SandboxSession]) -> int:
    """What the sessions' processes hold together, a process or container they share counted once."""
    pids: set[int] = set()
    containers: set[str] = set()
    for session in sessions:
        pid = getattr(session, "server_pid", None)
        container = getattr(session, "container_id", None)
        if pid:
            pids.add(int(pid))
        elif container:
            containers.add(str(container))
    total = _tree_rss(*pids) if pids else 0
    return total + sum(_container_memory(c) or 0 for c in containers)


class _Entry:
    def __init__(self, key: tuple, session: SandboxSession, now: float):
        self.key = key
        self.session = session
        self.users = 0
        self.last_used = now


class _Lease(SandboxSession):
    """A pooled session as its user sees it: ``close`` gives it back to the pool."""

    def __init__(self, pool: "SandboxPool", paper: PaperSpec, entry: _Entry):
        super().__init__(pool, paper)
        self._entry = entry
        self._released = False

    @property
    def inner(self) -> SandboxSession:
        return self._entry.session

    def run(self, files: Mapping[str, str], *, timeout: float, last: bool = False) -> RunResult:
        if self._released:
            raise RuntimeError("session is closed")
        # (``last`` is not passed on: a pooled session outlives the job, and its next job's first
        # run takes the process made ahead)
        return self._entry.session.run(files, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        # what backends' sessions show besides run (ready, server_pid, container_id, ...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._entry.session, name)

    def close(self) -> None:
        if not self._released:
            self._released = True
            self.sandbox._release(self._entry)  # type: ignore[attr-defined]

    def discard(self) -> None:
        """End the pooled session now, with whatever runs in it (a cancelled scoring's running test),
        instead of giving it back; the next ``open`` of its paper starts a new one. Other leases of
        the same session see it closed."""
        if not self._released:
            self._released = True
            self.sandbox._discard(self._entry)  # type: ignore[attr-defined]


class SandboxPool(Sandbox):
    """Warm sessions of ``inner`` kept between scorings, keyed by (environment, paper version)."""

    def __init__(self, inner: Sandbox, *, max_sessions: int = 8, idle_seconds: float = 900.0,
                 memory_mb: int | None = None, clock: Callable[[], float] = time.monotonic,
                 reaper: bool = True, memory_check_seconds: float = 5.0):
        super().__init__(python=inner.python, limits=inner.limits, **inner.options)
        self.python_given = inner.python_given
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.trusted_only = inner.trusted_only  # type: ignore[misc]
        self.max_sessions = max(1, max_sessions)
        self.idle_seconds = idle_seconds
        self.memory_mb = memory_mb
        self.memory_check_seconds = memory_check_seconds
        self.clock = clock
        self._held: tuple[float, int] | None = None  # (when, bytes) of the last measure
        self.entries: dict[tuple, _Entry] = {}
        self.lock = threading.Lock()
        self.key_locks: dict[tuple, threading.Lock] = defaultdict(threading.Lock)
        self.closed = False
        self.opened = 0  # sessions of ``inner`` opened (a pool that works opens few)
        self._stop = threading.Event()
        if reaper and idle_seconds > 0:
            threading.Thread(target=self._reap, daemon=True, name="sandbox-pool-reaper").start()

    # what decides a run's environment is the inner backend's: verdicts and references are shared
    @property
    def environment_id(self) -> str:
        return str(getattr(self.inner, "environment_id", None) or self.inner.describe())

    def environment_id_for(self, paper: PaperSpec) -> str:
        per_paper = getattr(self.inner, "environment_id_for", None)
        if per_paper is None:
            return f"{self.environment_id}:{paper.environment}"
        return str(per_paper(paper))

    def interpreter_for(self, paper: PaperSpec) -> str | None:
        return self.inner.interpreter_for(paper)

    def prepare(self, papers: list[PaperSpec]) -> "threading.Event | None":
        return None if self.closed else self.inner.prepare(papers)

    def describe(self) -> str:
        return f"{self.inner.describe()}, warm pool of up to {self.max_sessions}"

    def key_for(self, paper: PaperSpec) -> tuple:
        """(environment, paper version): the content of its folder, and what else the session depends on."""
        from ..cache import paper_content_hash  # noqa: PLC0415

        env = self.environment_id_for(paper) if paper.environment else self.environment_id
        folder = Path(paper.folder).resolve()
        return (env, str(folder), paper_content_hash(folder), paper.test_script, paper.requirements,
                paper.fresh_process, paper.environment)

    def open(self, paper: PaperSpec) -> SandboxSession:
        if self.closed:
            raise RuntimeError("the sandbox pool is closed")
        key = self.key_for(paper)
        with self.key_locks[key]:  # one paper version opens once, whoever asks at the same time
            with self.lock:
                entry = self.entries.get(key)
                if entry is not None and getattr(entry.session, "closed", False):
                    del self.entries[key]
                    entry = None
                if entry is not None:
                    entry.users += 1
                    entry.last_used = self.clock()
                    return _Lease(self, paper, entry)
            session = self.inner.open(paper)
            with self.lock:
                self.opened += 1
                entry = _Entry(key, session, self.clock())
                entry.users = 1
                self.entries[key] = entry
        self._trim(measure=True)  # a new session: new processes to count
        return _Lease(self, paper, entry)

    def _release(self, entry: _Entry) -> None:
        with self.lock:
            entry.users -= 1
            entry.last_used = self.clock()
            orphan = self.closed or self.entries.get(entry.key) is not entry
        if orphan and entry.users <= 0:
            entry.session.close()
            return
        self._trim()

    def _discard(self, entry: _Entry) -> None:
        with self.lock:
            entry.users -= 1
            if self.entries.get(entry.key) is entry:
                del self.entries[entry.key]
        entry.session.close()

    def prune(self) -> int:
        """Close the sessions idle longer than ``idle_seconds``; return how many were closed."""
        now = self.clock()
        with self.lock:
            stale = [e for e in self.entries.values() if e.users <= 0 and now - e.last_used >= self.idle_seconds]
            for entry in stale:
                del self.entries[entry.key]
        for entry in stale:
            entry.session.close()
        return len(stale) + self._trim(measure=bool(stale))

    def _held_bytes(self, *, measure: bool) -> int:
        """What the sessions hold: measured now with ``measure`` or when the last measure is older
        than ``memory_check_seconds``, else that measure."""
        now = self.clock()
        last = self._held
        if measure or last is None or now - last[0] >= self.memory_check_seconds:
            last = self._held = (now, sessions_memory_bytes([e.session for e in list(self.entries.values())]))
        return last[1]

    def _trim(self, *, measure: bool = False) -> int:
        """Close idle sessions, least recently used first, while over the count or memory bound."""
        closed = 0
        while True:
            with self.lock:
                idle = sorted((e for e in self.entries.values() if e.users <= 0), key=lambda e: e.last_used)
                if not idle:
                    return closed
                over = len(self.entries) > self.max_sessions
            if not over and self.memory_mb is not None:
                # (after a session was closed here, measured again)
                over = self._held_bytes(measure=measure or closed > 0) > self.memory_mb * 1024 * 1024
            if not over:
                return closed
            victim = idle[0]
            with self.lock:
                if self.entries.get(victim.key) is not victim or victim.users > 0:
                    continue
                del self.entries[victim.key]
            victim.session.close()
            closed += 1

    def _reap(self) -> None:
        while not self._stop.wait(max(1.0, min(30.0, self.idle_seconds / 4))):
            try:
                self.prune()
            except Exception:  # noqa: BLE001 - the next round tries again
                pass

    def __len__(self) -> int:
        with self.lock:
            return len(self.entries)

    def close(self) -> None:
        """Close every idle session and the inner backend (sessions still leased close when given back)."""
        self._stop.set()
        with self.lock:
            self.closed = True
            idle = [e for e in self.entries.values() if e.users <= 0]
            self.entries.clear()
        for entry in idle:
            entry.session.close()
        self.inner.close()
