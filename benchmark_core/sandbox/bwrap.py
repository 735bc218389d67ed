"""The ``bwrap`` backend: bubblewrap (Debian's ``bubblewrap``) around one warm runner per paper.

The sandbox sees a read-only /usr, a few files of /etc, the interpreter's prefixes (read-only), the
paper (read-only, at /rcb/paper), the runner script and a size-limited tmpfs for the runs
(/rcb/runs) and /tmp. No network (own, empty network namespace: the host's Redis/PostgreSQL, TCP,
UDP, IPv6, DNS and abstract Unix sockets are all out of reach; the host's /run and /tmp are not
mounted, so neither are their Unix sockets), own pid namespace, new session, dies with its parent.
Nothing of the host's home folders, the project checkout or its settings is mounted.

When the worker runs as root, bwrap keeps only the capabilities the runner needs to give every
run its own uid (so runs cannot touch each other's folders and whatever a run leaves behind is
found by uid and killed); the runs themselves have no capability and ``no_new_privs``.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from .base import Limits, PaperSpec, Sandbox, SandboxSession, SandboxUnavailable
from .bytecode import BYTECODE_FOLDER, runner_bytecode_dir
from .cgroups import RunCgroups, SandboxCgroups
from .process import child_env, interpreter_paths
from .skel import skel_for
from .warm_client import (PARENTS_PER_ENVIRONMENT, READY_TIMEOUT, WARM_SCRIPT, FileTransport, NotServed, WarmClient,
                          WarmSession, host_pid, paper_preloads, parent_pick, parents_planned, parents_prestart,
                          runner_options, run_uid_base, spawn_lasting)

__all__ = ["BwrapSandbox", "BwrapSession", "WARM_SCRIPT", "bwrap_available"]

INSIDE = "/rcb"
#: files of /etc a Python program may reasonably read; the rest of /etc stays out
ETC_FILES = (
    "passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
    "timezone", "ssl", "ca-certificates", "alternatives", "os-release", "debian_version", "mime.types",
    "matplotlibrc", "fonts",
)
#: capabilities the runner keeps (root only) to give each run its own uid and clean up after it
RUNNER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_KILL")


def _absolute(python: str) -> str:
    # the runner starts elsewhere: a relative path or a bare name must not change meaning
    return os.path.abspath(python) if os.sep in python else (shutil.which(python) or python)


# seccomp: classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: (unshare, clone, clone3, setns, memfd_create) per architecture
_SYSCALLS = {"x86_64": (272, 56, 435, 308, 319), "aarch64": (97, 220, 435, 268, 279)}
_CLONE_NEWUSER = 0x10000000


def seccomp_program(machine: str | None = None, *, refuse_memfd: bool = False) -> bytes | None:
    """A filter that refuses new user namespaces: unshare/clone with CLONE_NEWUSER and setns get
    EPERM, clone3 (whose flags it cannot read) ENOSYS so that libc falls back to clone. With
    ``refuse_memfd`` (no memory cgroup bounds the runs) memfd_create gets EPERM too: memory held
    in a memfd is outside RLIMIT_AS."""
    import errno  # noqa: PLC0415
    import platform  # noqa: PLC0415
    import struct  # noqa: PLC0415

    machine = machine or platform.machine()
    if machine not in _SYSCALLS:
        return None
    unshare, clone, clone3, setns, memfd = _SYSCALLS[machine]
    if not refuse_memfd:
        memfd = 0xFFFFFFFF  # no syscall has this number: never matches
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    prog = [
        op(ld, 0, 0, 4),  # arch
        op(jeq, 1, 0, _AUDIT_ARCH[machine]),
        op(ret, 0, 0, eperm),  # another ABI (x32, ia32): refused outright
        op(ld, 0, 0, 0),  # syscall number
        op(jeq, 5, 0, unshare),
        op(jeq, 4, 0, clone),
        op(jeq, 7, 0, clone3),
        op(jeq, 5, 0, setns),
        op(jeq, 4, 0, memfd),
        op(ret, 0, 0, allow),
        op(ld, 0, 0, 16),  # args[0], low half: the flags of unshare and clone
        op(jset, 1, 0, _CLONE_NEWUSER),
        op(ret, 0, 0, allow),
        op(ret, 0, 0, eperm),
        op(ret, 0, 0, enosys),
    ]
    return b"".join(prog)


def seccomp_filter_fd(*, refuse_memfd: bool = False) -> int | None:
    """A readable fd holding the filter for bwrap's --seccomp (None on an unknown architecture)."""
    program = seccomp_program(refuse_memfd=refuse_memfd)
    if program is None:
        return None
    fd = os.memfd_create("rcb-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bwrap_available() -> str | None:
    """Why bwrap cannot run here, or None when it can (a real sandbox is started once)."""
    binary = shutil.which("bwrap")
    if binary is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    try:
        proc = subprocess.run(
            [binary, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
             "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--unshare-all",
             "--die-with-parent", "--new-session", "--", "/usr/bin/true"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot start: {exc}"
    if proc.returncode != 0:
        return f"bwrap cannot create a sandbox here: {proc.stderr.strip() or proc.returncode}"
    return None


def _system_binds() -> list[str]:
    """The host's system folders, read-only (/usr, its /bin-style links or folders, a few /etc files)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _prefix_binds(prefixes: list[str]) -> list[str]:
    """The interpreter's prefixes (and their real paths), read-only, each once and none under /usr."""
    bound: list[str] = ["/usr"]
    args: list[str] = []
    for prefix in prefixes:
        real = os.path.realpath(prefix)
        for p in dict.fromkeys((prefix, real)):
            if not any(p == b or p.startswith(b + "/") for b in bound) and os.path.isdir(p):
                # bwrap copies the modes of the host's parents (/root is 0700): open them up,
                # but leave the sandbox's own world-writable /tmp as it is
                for parent in reversed(Path(p).parents[:-1]):
                    if str(parent) != "/tmp":
                        args += ["--perms", "0755", "--dir", str(parent)]
                args += ["--ro-bind", p, p]
                bound.append(p)
    return args


class BwrapSandbox(Sandbox):
    name = "bwrap"

    def __init__(self, *, python: str | None = None, limits: Limits | None = None, **options: Any):
        super().__init__(python=python, limits=limits, **options)
        problem = bwrap_available()
        if problem:
            raise SandboxUnavailable(problem)
        self.binary = shutil.which("bwrap") or "bwrap"
        self.python = _absolute(python or sys.executable)
        self._infos: dict[str, dict[str, Any]] = {}
        self._infos_lock = threading.Lock()
        self.info = self.interpreter_info(self.python)
        self.is_root = os.geteuid() == 0
        #: (interpreter, papers' folder) -> its warm parents (one per set of preloaded modules, see
        #: ``parent_for``); what a parent of some modules refused to serve, and why
        self._parents: dict[tuple[str, str], list[_Parent]] = {}
        self._parents_refused: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self._parents_lock = threading.Lock()
        #: one start at a time per environment, folder and set of imports (another set's parent may
        #: import meanwhile: ``prepare``'s head start); the starts going on per environment and folder
        self._parents_starting: dict[tuple, threading.Lock] = defaultdict(threading.Lock)
        self._parents_pending: dict[tuple[str, str], list[tuple[str, ...]]] = defaultdict(list)
        self._generation = 0  # bumped by ``close``: a parent started before it is not kept
        #: this sandbox's cgroup folder: each run's memory and processes bounded (root only); the
        #: sandbox in a cpu cgroup weighted as docker weighs a container of as many runs (DockerSandbox:
        #: 1024 a run and one more for the runner), so that a busy host shares its CPU with bwrap's
        #: runs as it does with docker's instead of ranking them below every process at nice 0
        self.cgroups = SandboxCgroups(enabled=self.is_root, cpu_shares=1024 * ((os.cpu_count() or 1) + 1))

    def run_cgroups(self) -> RunCgroups | None:
        """The cgroup folders that bound each run's memory and processes, or None."""
        return self.cgroups.get()

    @property
    def memory_bound(self) -> str:
        return self.cgroups.bound("RLIMIT_AS, RLIMIT_FSIZE and memfd_create refused (no memory cgroup here)")

    def interpreter_info(self, python: str) -> dict[str, Any]:
        """Where ``python`` lives and what it has installed (asked once per interpreter)."""
        with self._infos_lock:
            if python not in self._infos:
                self._infos[python] = interpreter_paths(python)
            return self._infos[python]

    def paper_python(self, paper: PaperSpec) -> str:
        """The interpreter of the paper's environment (see ``Sandbox.interpreter_for``)."""
        return _absolute(self.interpreter_for(paper) or self.python)

    def describe(self) -> str:
        extra = len({p for p in (self.options.get("pythons") or {}).values()}) if self.options.get("pythons") else 0
        more = f", {extra} environment interpreter(s)" if extra else ""
        envs = f", environments in {self.options['envs_dir']}" if self.options.get("envs_dir") else ""
        return f"bwrap (python {self.info['version']}{more}{envs})"

    @property
    def environment_id(self) -> str:
        # the installed packages are part of it: upgrading torch must not reuse cached verdicts
        return self._environment_id(self.info)

    def environment_id_for(self, paper: PaperSpec) -> str:
        return self._environment_id(self.interpreter_info(self.paper_python(paper)))

    @staticmethod
    def _environment_id(info: dict[str, Any]) -> str:
        return f"bwrap:{info['executable']}:{info['version']}:{info['packages']}"

    def command(self, paper: PaperSpec, *, parent_root: Path | None = None, modules: tuple[str, ...] = ()) -> list[str]:
        """The bwrap command line that starts the warm runner for ``paper``; with ``parent_root``, a
        warm parent of the papers under that folder that imports ``modules`` (``paper``'s
        environment), see ``warm.zygote_serve``."""
        python = self.paper_python(paper)
        limits = self.limits
        args = [self.binary, "--die-with-parent", "--new-session", *self._namespace_args(), *_system_binds()]
        args += [
            "--proc", "/proc",
            "--dev", "/dev",
            # the IPC namespace's POSIX message queues, visible so that a run's are removed with it
            "--mqueue", "/dev/mqueue",
            # POSIX semaphores and shared memory (multiprocessing) live here
            "--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/dev/shm",
            # world-writable like a host's /tmp: every run has its own uid
            "--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp",
            # the interpreter's prefixes are bound after the private /tmp, or a venv that lives under
            # /tmp (a CI clone, say) would be hidden by it
            *_prefix_binds(self.interpreter_info(python)["prefixes"]),
            "--dir", INSIDE,
            "--ro-bind", str(WARM_SCRIPT), f"{INSIDE}/warm.py",
        ]
        bytecode = runner_bytecode_dir(f"{INSIDE}/warm.py")
        if bytecode is not None:  # the runner's rooms compiled once, here (sandbox/bytecode.py)
            args += ["--ro-bind", str(bytecode), f"{INSIDE}/{BYTECODE_FOLDER}"]
        cgroups = self.run_cgroups() if self.is_root else None
        runner_extra = runner_options(self.options)
        skel = skel_for(python, self.interpreter_info(python)["packages"])
        if skel is not None:  # the environment's home skeleton: the runner's home starts as a copy
            args += ["--ro-bind", str(skel), f"{INSIDE}/skel"]
            runner_extra += ["--skel", f"{INSIDE}/skel"]
        if cgroups is not None:
            for host, inside in cgroups.binds():
                args += ["--bind", host, inside]
            runner_extra += ["--cgroups", cgroups.spec]
        if parent_root is not None:
            # the papers are read by their servers only (root there): a run copies its own paper, and
            # its uid cannot pass the 0700 folder to see another paper's files
            args += [
                "--perms", "0700", "--dir", f"{INSIDE}/papers",
                "--ro-bind", str(parent_root), f"{INSIDE}/papers/all",
                "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", f"{INSIDE}/runs",
                "--chdir", INSIDE,
                "--",
                python, f"{INSIDE}/warm.py", "--zygote", "--papers", f"{INSIDE}/papers/all",
                "--modules", ",".join(modules) or ",", "--work", f"{INSIDE}/runs", "--python", python,
                *runner_extra,
            ]
            return args + self._preload_args()
        args += [
            "--ro-bind", str(Path(paper.folder).resolve()), f"{INSIDE}/paper",
            "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", f"{INSIDE}/runs",
            "--chdir", INSIDE,
            "--",
            python, f"{INSIDE}/warm.py", "--paper", f"{INSIDE}/paper", "--work", f"{INSIDE}/runs",
        ]
        if self.is_root:
            args += ["--run-uid-base", str(run_uid_base())]
        args += runner_extra
        if paper.fresh_process:
            args += ["--fresh"]
        args += ["--python", python]
        return args + self._preload_args()

    def _namespace_args(self) -> list[str]:
        """bwrap's namespaces and capabilities: as root, no user namespace (the runner needs real uids to
        give each run its own) and the runner's capabilities only; else every namespace."""
        if not self.is_root:
            return ["--unshare-all"]
        args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--cap-drop", "ALL"]
        for cap in RUNNER_CAPS:
            args += ["--cap-add", cap]
        return args

    def _preload_args(self) -> list[str]:
        preload = self.options.get("preload")
        return ["--preload", ",".join(preload)] if preload else []

    def open(self, paper: PaperSpec) -> SandboxSession:
        """A session of ``paper``: served by its environment's warm parent when it has one (option
        ``shared_parent``, default on), else by a warm runner of its own."""
        if self.options.get("shared_parent", True) and not paper.fresh_process:
            try:
                return ParentedSession(self, paper)
            except NotServed:
                pass
        return BwrapSession(self, paper)

    def parent_for(self, paper: PaperSpec, *, generation: int | None = None,
                   launched: Callable[[], None] | None = None) -> "_Parent":
        """A warm parent of the paper's environment and folder that may serve it (``parent_pick``:
        one whose preloaded modules the paper all imports), started on first use with the paper's
        own (``warm.parent_names``), up to PARENTS_PER_ENVIRONMENT; NotServed when none may.

        The folder is the one holding the paper's folder, or the option ``papers_root`` when the paper
        lies below it: a store that keeps each paper in a folder of its own (the site's paper cache,
        by content hash) still has its parents per environment, not one per paper.

        ``generation``: the sandbox's when the caller asked (``prepare``); none is started once
        ``close`` has come since. ``launched``: called once the parent's process is spawned, while it
        imports (``parents_prestart``)."""
        root = self._parent_root(paper)
        key = (self.paper_python(paper), str(root))
        names, wanted = paper_preloads(paper, self.options)
        # a parent that would serve the paper may be starting under another set's lock (``prepare``'s
        # head start): that start is waited for, not a parent of the paper's own set started beside it
        with self._parents_lock:
            others = [self._parents_starting[key + (w,)] for w in self._parents_pending[key]
                      if w != wanted and set(w) <= names]
            starting = self._parents_starting[key + (wanted,)]
        for other in others:
            with other:
                pass
        # one start per environment, folder and set of imports at a time; another environment's or
        # set's parent may start meanwhile (``prepare``'s head start), so the sandbox-wide lock is not
        # held across it
        with starting:
            with self._parents_lock:
                if generation is not None and generation != self._generation:
                    raise NotServed("the sandbox was closed")
                parents = []
                for parent in self._parents.get(key, []):
                    if parent.alive:
                        parents.append(parent)
                    else:
                        parent.close()
                self._parents[key] = parents
                parent = parent_pick(parents, names)
                if parent is not None:
                    return parent
                if key + (wanted,) in self._parents_refused:
                    raise NotServed(self._parents_refused[key + (wanted,)])
                if len(parents) + len(self._parents_pending[key]) >= PARENTS_PER_ENVIRONMENT:
                    raise NotServed(f"{PARENTS_PER_ENVIRONMENT} warm parents of {key[0]} already, none importing "
                                    "only what the paper imports")
                generation = self._generation if generation is None else generation
                self._parents_pending[key].append(wanted)
            try:
                parent = _Parent(self, paper, root, wanted, launched=launched)
            except BaseException:
                with self._parents_lock:
                    self._parents_pending[key].remove(wanted)
                raise
            with self._parents_lock:  # no longer starting, and among the parents, at once
                self._parents_pending[key].remove(wanted)
                if generation != self._generation:  # closed while it imported: it serves nobody
                    parent.close()
                    raise NotServed("the sandbox was closed")
                if parent.refused:
                    self._parents_refused[key + (wanted,)] = parent.refused
                    parent.close()
                    raise NotServed(parent.refused)
                self._parents.setdefault(key, []).append(parent)
            return parent

    def prepare(self, papers: list[PaperSpec]) -> threading.Event | None:
        """Start, in the background, the warm parents the papers' sessions will ask for: in each
        environment, one for the first paper of each set of imports that no earlier one serves
        (``parents_planned``), in the order the scoring meets them (``parents_prestart`` says when;
        its event is returned)."""
        if not self.options.get("shared_parent", True):
            return None
        planned = parents_planned(papers, lambda p: (self.paper_python(p), str(self._parent_root(p))),
                                  lambda p: paper_preloads(p, self.options))
        with self._parents_lock:
            generation = self._generation
        return parents_prestart(self, planned, generation=generation)

    def _parent_root(self, paper: PaperSpec) -> Path:
        """The folder a warm parent serves: the one holding the paper's folder, or option ``papers_root``
        when the paper lies below it (see ``parent_for``)."""
        root = Path(paper.folder).resolve().parent
        shared = self.options.get("papers_root")
        if shared:
            shared_root = Path(shared).resolve()
            if shared_root in root.parents or shared_root == root:
                return shared_root
        return root

    def close(self) -> None:
        with self._parents_lock:
            parents = [p for group in self._parents.values() for p in group]
            self._parents.clear()
            self._generation += 1
        for parent in parents:
            parent.close()
        self.cgroups.close()


class _Channel(FileTransport):
    """A paper server forked by a warm parent: its stdin and stdout are a socket, its stderr a pipe."""

    def __init__(self, parent: "_Parent", sock: socket.socket, err_fd: int, pid: int):
        self.parent, self.sock, self.inner_pid = parent, sock, pid  # in the parent's pid namespace
        self._host_pid: int | None = None
        self.stdout = sock.makefile("rb")
        self.stderr = os.fdopen(err_fd, "rb")
        self.ended = threading.Event()

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """The server's pid as the host sees it (found by its pid in the parent's namespace)."""
        if self._host_pid is None:
            self._host_pid = host_pid(self.parent.proc.pid, self.inner_pid)
        return self._host_pid

    def _stdout_ended(self) -> None:
        self.ended.set()

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def alive(self) -> bool:
        return not self.ended.is_set() and self.parent.alive

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)  # the end of the server's stdin: it finishes and exits
        except OSError:
            pass
        if not self.ended.wait(10) and self.parent.alive:
            self.parent.kill(self.inner_pid)
            self.ended.wait(5)
        self.ended.set()
        self._close_files()
        self.sock.close()


class _Parent:
    """One warm parent: a bwrap sandbox whose runner imported an environment's modules once and
    forks a server per paper (warm.zygote_serve); papers are those under one folder."""

    def __init__(self, sandbox: "BwrapSandbox", paper: PaperSpec, root: Path, modules: tuple[str, ...], *,
                 launched: Callable[[], None] | None = None):
        self.sandbox, self.root, self.modules = sandbox, root, modules
        self.lock = threading.Lock()
        self.ctl, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        filter_fd = seccomp_filter_fd(refuse_memfd=sandbox.run_cgroups() is None)
        argv = sandbox.command(paper, parent_root=root, modules=modules) + ["--control-fd", str(child.fileno())]
        if filter_fd is not None:
            argv[1:1] = ["--seccomp", str(filter_fd)]
        fds = (child.fileno(),) + (() if filter_fd is None else (filter_fd,))
        argv = sandbox.cgroups.cpu_prefix() + argv
        try:
            self.proc = spawn_lasting(argv, env=child_env(f"{INSIDE}/runs"), pass_fds=fds,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        finally:
            child.close()
            if filter_fd is not None:
                os.close(filter_fd)
        if launched is not None:
            launched()
        self.stderr_tail = bytearray()
        threading.Thread(target=self._read_stderr, daemon=True, name="warm-parent-stderr").start()
        ready = self._receive(READY_TIMEOUT)
        if not ready or not ready.get("ready"):
            detail = self.stderr_tail.decode(errors="replace")[-2000:]
            self.close()
            raise SandboxUnavailable(f"the warm parent did not start: {detail or 'no output'}")
        self.ready = ready
        self.refused = str(ready.get("refused") or "")

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_tail += raw
            if len(self.stderr_tail) > 65536:
                del self.stderr_tail[:-32768]

    def _receive(self, timeout: float) -> dict | None:
        self.ctl.settimeout(timeout)
        try:
            data = self.ctl.recv(1 << 16)
        except OSError:
            return None
        try:
            return json.loads(data) if data else None
        except ValueError:
            return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def preloads(self) -> set[str] | None:
        """What the parent imported (``warm_client.parent_pick``); None when it serves no paper."""
        return None if self.refused else set(self.ready.get("preloaded") or ())

    def serve(self, paper: PaperSpec) -> WarmClient:
        """A client of a new server of ``paper``, forked from this parent; NotServed when it refuses."""
        rel = Path(paper.folder).resolve().relative_to(self.root).as_posix()
        request: dict[str, Any] = {"paper": f"{INSIDE}/papers/all/{rel}", "work": f"p-{uuid.uuid4().hex}"}
        if self.sandbox.is_root:
            request["run_uid_base"] = run_uid_base()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        with self.lock:
            try:
                socket.send_fds(self.ctl, [json.dumps(request).encode()], [theirs.fileno(), err_w])
                answer = self._receive(60.0)
            except OSError:
                answer = None
            finally:
                theirs.close()
                os.close(err_w)
        if not answer or not answer.get("ok"):
            mine.close()
            os.close(err_r)
            raise NotServed(str((answer or {}).get("why") or "the warm parent did not answer"))
        return WarmClient(_Channel(self, mine, err_r, int(answer["pid"])))

    def kill(self, pid: int) -> None:
        with self.lock:
            try:
                self.ctl.send(json.dumps({"kill": pid}).encode())  # no answer comes
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.ctl.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class BwrapSession(WarmSession):
    """One warm runner inside bwrap for one paper; ``run`` may be called from many threads."""

    def _connect(self) -> WarmClient:
        sandbox: BwrapSandbox = self.sandbox  # type: ignore[assignment]
        env = child_env(f"{INSIDE}/runs")
        # no user namespaces inside (docker's seccomp profile refuses them too): a seccomp filter,
        # since the root mode's runner has no user namespace of its own for --disable-userns
        filter_fd = seccomp_filter_fd(refuse_memfd=sandbox.run_cgroups() is None)
        argv = sandbox.command(self.paper)
        if filter_fd is not None:
            argv[1:1] = ["--seccomp", str(filter_fd)]
        argv = sandbox.cgroups.cpu_prefix() + argv
        try:
            return WarmClient.spawn(argv, env=env, pass_fds=() if filter_fd is None else (filter_fd,))
        finally:
            if filter_fd is not None:
                os.close(filter_fd)

    @property
    def server_pid(self) -> int | None:
        return self.client.pid if self.client else None


class ParentedSession(BwrapSession):
    """A paper served by its environment's warm parent (``BwrapSandbox.parent_for``): the heavy imports
    were made once for every paper of the environment; the runs are isolated as a standalone runner's."""

    def _connect(self) -> WarmClient:
        sandbox: BwrapSandbox = self.sandbox  # type: ignore[assignment]
        try:
            client = sandbox.parent_for(self.paper).serve(self.paper)
        except NotServed:
            if self.client is None and not getattr(self, "_served_once", False):
                raise
            # served before, refused now (its parent died and the new one will not): a runner of its own
            return BwrapSession._connect(self)
        self._served_once = True
        return client

    @property
    def server_pid(self) -> int | None:
        """The warm parent's bwrap process (it holds every server of the environment)."""
        client = self.client
        if client is None:
            return None
        transport = client.transport
        return transport.parent.proc.pid if isinstance(transport, _Channel) else client.pid
