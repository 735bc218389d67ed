"""Per-run memory and process bounds by cgroup, made on the host for one sandbox.

RLIMIT_AS does not count what a run keeps outside its address space (``memfd_create`` and
``write``, SysV shared memory, tmpfs files), and a run may fork children that each take up to the
limit. A memory cgroup counts all of it. The host makes one folder per sandbox (``rcb-<token>``
under its own cgroup, in the memory and pids hierarchies of cgroup v1, or in the unified v2
hierarchy with both controllers) and binds it into the sandbox at ``INSIDE_ROOT``; the warm runner
(root in the sandbox) makes ``run-<uid>`` below it for each run's uid, writes the run's limits
there, and the run's child joins it before it drops to its uid. The run's uid cannot write any of
those files. An OOM kill then hits that run only (``memory.oom_control``/``memory.events``
tell the runner it happened: the run is a ``crash``).

Where neither hierarchy can be used (no root, no memory controller, a v2 cgroup that holds
processes) ``run_cgroups_create`` says why, once per process, and returns None: the backends then
keep their other bounds (bwrap refuses ``memfd_create`` by seccomp, docker has its container's
limit) and ``Sandbox.memory_bound`` names what bounds a run.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["INSIDE_ROOT", "RunCgroups", "run_cgroups_create", "cgroups_problem"]

log = logging.getLogger(__name__)

#: where a sandbox sees its cgroup folder: ``memory`` and ``pids`` (v1) or ``unified`` (v2) below it
INSIDE_ROOT = "/rcb-cgroup"

_warned: set[str] = set()
_warn_lock = threading.Lock()


@dataclass
class RunCgroups:
    """One sandbox's cgroup folder: ``version`` "v1" or "v2", ``dirs`` by name inside the sandbox."""

    version: str
    dirs: dict[str, Path] = field(default_factory=dict)
    #: a cpu cgroup (v1) the whole sandbox runs in, weighted like a docker container (not bound inside)
    cpu: Path | None = None

    @property
    def spec(self) -> str:
        """The runner's ``--cgroups`` argument."""
        return f"{self.version}:{INSIDE_ROOT}"

    def binds(self) -> list[tuple[str, str]]:
        """(host folder, folder inside the sandbox) pairs to bind read-write."""
        return [(str(path), f"{INSIDE_ROOT}/{name}") for name, path in self.dirs.items()]

    def remove(self, *, at_exit: bool = False) -> None:
        """Remove the runs' folders, then the sandbox's. What is still in them is this sandbox's
        own (its runner, a run left behind) and is killed first; ``at_exit`` (the interpreter is
        ending: no logging) makes one quick attempt."""
        for path in [*self.dirs.values(), *([self.cpu] if self.cpu else [])]:
            _remove_tree(path, rounds=10 if at_exit else 50, quiet=at_exit)

    def cpu_prefix(self) -> list[str]:
        """A prefix for the sandbox's command line that starts it in the cpu cgroup (every process
        of the sandbox inherits it); empty without one. A write that fails leaves it where it was."""
        if self.cpu is None:
            return []
        return ["/bin/sh", "-c", '{ echo $$ > "$0"; } 2>/dev/null; exec "$@"', str(self.cpu / "cgroup.procs")]


def _remove_tree(path: Path, *, rounds: int = 50, quiet: bool = False) -> None:
    # a cgroup folder is removed with rmdir, children first, once no process is in it
    for n in range(rounds):
        try:
            children = [p for p in path.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return
        except OSError:
            children = []
        for child in children:
            _remove_tree(child, rounds=rounds, quiet=quiet)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if n >= 2:
                _kill_members(path)
            time.sleep(0.05)
    if not quiet:
        log.warning("cgroup folder %s could not be removed (processes still in it?)", path)


def _kill_members(path: Path) -> None:
    """SIGKILL the processes still in a sandbox's cgroup folder (only that sandbox's own are there)."""
    try:
        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount of this process."""
    found = []
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            paths[name] = parts[2]
    return paths


def _v1_base(controller: str, mounts, own) -> Path | None:
    for point, kind, options in mounts:
        if kind == "cgroup" and controller in options and controller in own:
            base = Path(point) / own[controller].lstrip("/")
            if base.is_dir():
                return base
    return None


def _make(base: Path, token: str) -> Path:
    path = base / f"rcb-{token}"
    path.mkdir()
    return path


def cgroups_problem() -> str | None:
    """Why per-run cgroups cannot be made here, or None when they can (nothing is left behind)."""
    made = _create(probe=True)
    if isinstance(made, RunCgroups):
        made.remove()
        return None
    return made


def _create(*, memory_mb: int | None = None, pids: int | None = None, cpu_shares: int | None = None,
            probe: bool = False) -> "RunCgroups | str":
    if os.geteuid() != 0:
        return "the runner is not root: it cannot make cgroups"
    mounts, own = _mounts(), _own_paths()
    token = uuid.uuid4().hex[:12]
    memory, pids_base = _v1_base("memory", mounts, own), _v1_base("pids", mounts, own)
    if memory is not None:
        made: dict[str, Path] = {}
        try:
            made["memory"] = _make(memory, token)
            if pids_base is not None:
                made["pids"] = _make(pids_base, token)
            if memory_mb:
                # every run of the sandbox together: the container's or the sandbox's whole budget
                (made["memory"] / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
            if pids and "pids" in made:
                (made["pids"] / "pids.max").write_text(str(pids))
        except OSError as exc:
            RunCgroups("v1", made).remove()
            return f"cgroup v1 folders cannot be made under {memory}: {exc}"
        made_cgroups = RunCgroups("v1", made)
        cpu_base = _v1_base("cpu", mounts, own) if cpu_shares else None
        if cpu_base is not None:
            try:
                made_cgroups.cpu = _make(cpu_base, token)
                (made_cgroups.cpu / "cpu.shares").write_text(str(cpu_shares))
            except OSError as exc:  # the memory bound stands; the CPU weight is only fairness
                log.warning("no cpu cgroup for the sandbox: %s", exc)
                if made_cgroups.cpu is not None:
                    _remove_tree(made_cgroups.cpu)
                made_cgroups.cpu = None
        return made_cgroups
    for point, kind, _options in mounts:
        if kind != "cgroup2" or "" not in own:
            continue
        base = Path(point) / own[""].lstrip("/")
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "memory" not in available:
            return f"the cgroup v2 hierarchy at {point} offers no memory controller here"
        path: Path | None = None
        try:
            # the sandbox's folder holds no process, so its runs' folders may have controllers
            (base / "cgroup.subtree_control").write_text("+memory +pids" if "pids" in available else "+memory")
            path = _make(base, token)
            (path / "cgroup.subtree_control").write_text("+memory +pids" if "pids" in available else "+memory")
            if memory_mb:
                (path / "memory.max").write_text(str(memory_mb << 20))
            if pids and "pids" in available:
                (path / "pids.max").write_text(str(pids))
        except OSError as exc:
            if path is not None:
                _remove_tree(path)
            return f"cgroup v2 controllers cannot be delegated under {base}: {exc}"
        return RunCgroups("v2", {"unified": path})
    return "no cgroup hierarchy with a memory controller is mounted"


def run_cgroups_create(*, memory_mb: int | None = None, pids: int | None = None,
                       cpu_shares: int | None = None) -> RunCgroups | None:
    """A new cgroup folder for one sandbox (``memory_mb``, ``pids``: the bound of all its runs
    together, if any; ``cpu_shares``: a cpu cgroup of that weight for the whole sandbox, v1), or
    None, said once per reason, when this host cannot make one."""
    made = _create(memory_mb=memory_mb, pids=pids, cpu_shares=cpu_shares)
    if isinstance(made, RunCgroups):
        atexit.register(made.remove, at_exit=True)  # a sandbox never closed leaves no folder behind either
        return made
    with _warn_lock:
        if made not in _warned:
            _warned.add(made)
            log.warning("no per-run memory cgroup: %s; runs are bounded by rlimits%s", made,
                        " and memfd_create is refused" if shutil.which("bwrap") else "")
    return None


class SandboxCgroups:
    """One sandbox's cgroup folder, made at its first runner (when ``enabled``: a root runner that
    gives runs uids of their own) and removed when the sandbox closes."""

    def __init__(self, *, enabled: bool, memory_mb: int | None = None, pids: int | None = None,
                 cpu_shares: int | None = None):
        self.enabled, self.memory_mb, self.pids, self.cpu_shares = enabled, memory_mb, pids, cpu_shares
        self._made: RunCgroups | None | bool = None
        self._version = ""  # the version of the folder made (kept once it is removed)
        self._tried = False
        self._lock = threading.Lock()

    def get(self) -> RunCgroups | None:
        with self._lock:
            if self._made is None:
                self._tried = True
                self._made = (run_cgroups_create(memory_mb=self.memory_mb, pids=self.pids,
                                                 cpu_shares=self.cpu_shares)
                              if self.enabled else None) or False
                self._version = self._made.version if self._made else ""
            return self._made or None

    def cpu_prefix(self) -> list[str]:
        """The command-line prefix that starts a sandbox in the cpu cgroup (RunCgroups.cpu_prefix)."""
        made = self.get()
        return made.cpu_prefix() if made is not None else []

    def bound(self, otherwise: str) -> str:
        """What bounds a run's memory: its cgroup, or ``otherwise``."""
        if not self._tried:
            self.get()
        return f"a memory and pids cgroup ({self._version}) per run" if self._version else otherwise

    def close(self) -> None:
        """Remove the folder; a session opened later makes another (sandboxes may be reused)."""
        with self._lock:
            made, self._made = self._made, None
        if made:
            made.remove()
