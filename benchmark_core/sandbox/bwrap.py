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

import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

from .base import Limits, PaperSpec, RunResult, Sandbox, SandboxSession, SandboxUnavailable
from .local import child_env

__all__ = ["BwrapSandbox", "BwrapSession", "WARM_SCRIPT", "bwrap_available"]

WARM_SCRIPT = Path(__file__).with_name("warm.py")
INSIDE = "/rcb"
# each session's runs get uids BASE+slot with a random BASE: two sandboxes never share a uid,
# so a fork bomb in one cannot use up the other's process limit (RLIMIT_NPROC counts per uid)
RUN_UID_MIN, RUN_UID_BLOCKS, RUN_UID_BLOCK = 100_000, 4_000_000, 1000
RUN_UID_BASE = 61000  # the lowest run uid any backend uses (the docker backend builds on it)
#: files of /etc a Python program may reasonably read; the rest of /etc stays out
ETC_FILES = (
    "passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
    "timezone", "ssl", "ca-certificates", "alternatives", "os-release", "debian_version", "mime.types",
    "matplotlibrc", "fonts",
)
#: capabilities the runner keeps (root only) to give each run its own uid and clean up after it
RUNNER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_KILL")
READY_TIMEOUT = 300.0  # importing torch on a cold disk can take a while


def _interpreter_paths(python: str) -> dict[str, Any]:
    """Ask the interpreter (trusted: the operator chose it) where it lives."""
    code = (
        "import hashlib, json, sys\n"
        "from importlib import metadata\n"
        "dists = sorted(f\"{d.metadata['Name']}=={d.version}\" for d in metadata.distributions())\n"
        "print(json.dumps({'prefixes': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, "
        "sys.base_exec_prefix}), 'path': [p for p in sys.path if p], 'executable': sys.executable, "
        "'version': '%d.%d.%d' % sys.version_info[:3], "
        "'packages': hashlib.sha256('\\n'.join(dists).encode()).hexdigest()[:16]}))"
    )
    try:
        out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True)
        return json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxUnavailable(f"interpreter {python!r} cannot be used: {exc}") from exc


def _absolute(python: str) -> str:
    # the runner starts elsewhere: a relative path or a bare name must not change meaning
    return os.path.abspath(python) if os.sep in python else (shutil.which(python) or python)


# seccomp: classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: (unshare, clone, clone3, setns) per architecture
_SYSCALLS = {"x86_64": (272, 56, 435, 308), "aarch64": (97, 220, 435, 268)}
_CLONE_NEWUSER = 0x10000000


def seccomp_program(machine: str | None = None) -> bytes | None:
    """A filter that refuses new user namespaces: unshare/clone with CLONE_NEWUSER and setns get
    EPERM, clone3 (whose flags it cannot read) ENOSYS so that libc falls back to clone."""
    import errno  # noqa: PLC0415
    import platform  # noqa: PLC0415
    import struct  # noqa: PLC0415

    machine = machine or platform.machine()
    if machine not in _SYSCALLS:
        return None
    unshare, clone, clone3, setns = _SYSCALLS[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, jt, jf, k)

    prog = [
        op(ld, 0, 0, 4),  # arch
        op(jeq, 1, 0, _AUDIT_ARCH[machine]),
        op(ret, 0, 0, eperm),  # another ABI (x32, ia32): refused outright
        op(ld, 0, 0, 0),  # syscall number
        op(jeq, 4, 0, unshare),
        op(jeq, 3, 0, clone),
        op(jeq, 6, 0, clone3),
        op(jeq, 4, 0, setns),
        op(ret, 0, 0, allow),
        op(ld, 0, 0, 16),  # args[0], low half: the flags of unshare and clone
        op(jset, 1, 0, _CLONE_NEWUSER),
        op(ret, 0, 0, allow),
        op(ret, 0, 0, eperm),
        op(ret, 0, 0, enosys),
    ]
    return b"".join(prog)


def seccomp_filter_fd() -> int | None:
    """A readable fd holding the filter for bwrap's --seccomp (None on an unknown architecture)."""
    program = seccomp_program()
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

    def interpreter_info(self, python: str) -> dict[str, Any]:
        """Where ``python`` lives and what it has installed (asked once per interpreter)."""
        with self._infos_lock:
            if python not in self._infos:
                self._infos[python] = _interpreter_paths(python)
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

    def command(self, paper: PaperSpec) -> list[str]:
        """The bwrap command line that starts the warm runner for ``paper``."""
        python = self.paper_python(paper)
        info = self.interpreter_info(python)
        args = [self.binary, "--die-with-parent", "--new-session"]
        if self.is_root:
            # no user namespace: the runner needs real uids to give each run its own
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
            args += ["--cap-drop", "ALL"]
            for cap in RUNNER_CAPS:
                args += ["--cap-add", cap]
        else:
            args += ["--unshare-all"]
        args += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/") / name
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        for name in ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        # the interpreter's prefixes are bound after the private /tmp, or a venv that lives under
        # /tmp (a CI clone, say) would be hidden by it
        bound: list[str] = ["/usr"]
        prefix_args: list[str] = []
        for prefix in info["prefixes"]:
            real = os.path.realpath(prefix)
            for p in dict.fromkeys((prefix, real)):
                if not any(p == b or p.startswith(b + "/") for b in bound) and os.path.isdir(p):
                    # bwrap copies the modes of the host's parents (/root is 0700): open them up,
                    # but leave the sandbox's own world-writable /tmp as it is
                    for parent in reversed(Path(p).parents[:-1]):
                        if str(parent) != "/tmp":
                            prefix_args += ["--perms", "0755", "--dir", str(parent)]
                    prefix_args += ["--ro-bind", p, p]
                    bound.append(p)
        limits = self.limits
        args += [
            "--proc", "/proc",
            "--dev", "/dev",
            # POSIX semaphores and shared memory (multiprocessing) live here
            "--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/dev/shm",
            # world-writable like a host's /tmp: every run has its own uid
            "--perms", "1777", "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", "/tmp",
            *prefix_args,
            "--dir", INSIDE,
            "--ro-bind", str(WARM_SCRIPT), f"{INSIDE}/warm.py",
            "--ro-bind", str(Path(paper.folder).resolve()), f"{INSIDE}/paper",
            "--size", str(limits.tmpfs_mb * 1024 * 1024), "--tmpfs", f"{INSIDE}/runs",
            "--chdir", INSIDE,
            "--",
            python, f"{INSIDE}/warm.py", "--paper", f"{INSIDE}/paper", "--work", f"{INSIDE}/runs",
        ]
        if self.is_root:
            base = RUN_UID_MIN + secrets.randbelow(RUN_UID_BLOCKS) * RUN_UID_BLOCK
            args += ["--run-uid-base", str(base)]
        if paper.fresh_process:
            args += ["--fresh"]
        args += ["--python", python]
        preload = self.options.get("preload")
        if preload:
            args += ["--preload", ",".join(preload)]
        return args

    def open(self, paper: PaperSpec) -> SandboxSession:
        return BwrapSession(self, paper)


class WarmClient:
    """Talks the warm runner's JSON-lines protocol over a process's stdin/stdout; thread-safe."""

    def __init__(self, argv: list[str], *, env: Mapping[str, str], ready_timeout: float = READY_TIMEOUT,
                 pass_fds: tuple[int, ...] = ()):
        self.argv = argv
        # bwrap's --die-with-parent fires when the *thread* that started it ends: start it from a
        # thread that lives exactly as long as the process (sessions are opened from pool threads)
        started = threading.Event()
        box: list = []

        def spawn_and_wait() -> None:
            try:
                box.append(subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env),
                    start_new_session=True, close_fds=True, pass_fds=pass_fds,
                ))
            except OSError as exc:
                box.append(exc)
            started.set()
            if isinstance(box[0], subprocess.Popen):
                box[0].wait()

        threading.Thread(target=spawn_and_wait, daemon=True, name="warm-runner").start()
        started.wait()
        if isinstance(box[0], OSError):
            raise SandboxUnavailable(f"cannot start {argv[0]}: {box[0]}")
        self.proc: subprocess.Popen = box[0]
        self.write_lock = threading.Lock()
        self.pending: dict[str, list] = {}  # id -> [event, result]
        self.pending_lock = threading.Lock()
        self.stderr_tail = bytearray()
        self.ready: dict[str, Any] | None = None
        self.ready_event = threading.Event()
        self.dead = False
        self.ids = itertools.count()
        threading.Thread(target=self._read_stdout, daemon=True, name="warm-stdout").start()
        threading.Thread(target=self._read_stderr, daemon=True, name="warm-stderr").start()
        if not self.ready_event.wait(ready_timeout) or self.ready is None:
            detail = self.stderr_tail.decode(errors="replace")[-2000:]
            self.close()
            raise SandboxUnavailable(f"the warm runner did not start: {detail or 'no output'}")

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("ready"):
                self.ready = msg
                self.ready_event.set()
                continue
            with self.pending_lock:
                slot = self.pending.get(msg.get("id")) if isinstance(msg, dict) else None
            if slot is not None:
                slot[1] = msg
                slot[0].set()
        self.dead = True
        self.ready_event.set()
        with self.pending_lock:
            for slot in self.pending.values():
                slot[0].set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr_tail += raw
            if len(self.stderr_tail) > 65536:
                del self.stderr_tail[:-32768]

    def request(self, payload: dict[str, Any], *, wait: float) -> dict[str, Any] | None:
        """Send one run; return its result, or None when the runner died or never answered."""
        # unguessable: a run must not find its neighbours' folders by counting
        rid = f"r{next(self.ids)}-{uuid.uuid4().hex[:12]}"
        slot: list = [threading.Event(), None]
        with self.pending_lock:
            self.pending[rid] = slot
        try:
            line = (json.dumps({**payload, "id": rid}) + "\n").encode()
            try:
                with self.write_lock:
                    assert self.proc.stdin is not None
                    self.proc.stdin.write(line)
                    self.proc.stdin.flush()
            except (OSError, ValueError):
                return None
            slot[0].wait(wait)
            return slot[1]
        finally:
            with self.pending_lock:
                self.pending.pop(rid, None)

    @property
    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass


def result_from_message(msg: dict[str, Any] | None, *, seconds: float, why: str) -> RunResult:
    """A RunResult from a warm runner's answer (or a crash result when there is none)."""
    if msg is None:
        return RunResult(exit_code=None, signal=None, timed_out=False, stdout="", stderr=why, seconds=seconds,
                         extra={"proof": False, "sandbox_error": why[:500]})
    proof = msg.get("proof") or {}
    extra: dict[str, Any] = {
        "completed": bool(proof.get("completed")),
        "tests_run": int(proof.get("tests_run") or 0),
        # what the run's audit hook reported (runner.apply_proof compares it with the reference run)
        "audit": {k: proof.get(k) for k in ("authentic", "forged", "forged_sample", "skipped", "events",
                                            "snapshots", "overflow", "channel_lost") if k in proof},
    }
    if msg.get("error"):
        extra["sandbox_error"] = str(msg["error"])[:500]
        extra["proof"] = False
    return RunResult(
        exit_code=msg.get("exit_code"),
        signal=msg.get("signal"),
        timed_out=bool(msg.get("timed_out")),
        stdout=str(msg.get("stdout") or ""),
        stderr=str(msg.get("stderr") or ""),
        seconds=float(msg.get("seconds") or seconds),
        truncated=bool(msg.get("truncated")),
        oom=bool(msg.get("oom")),
        extra=extra,
    )


class BwrapSession(SandboxSession):
    """One warm runner inside bwrap for one paper; ``run`` may be called from many threads."""

    def __init__(self, sandbox: BwrapSandbox, paper: PaperSpec):
        super().__init__(sandbox, paper)
        self.lock = threading.Lock()
        self.client: WarmClient | None = None
        self.closed = False
        self._start()

    def _start(self) -> WarmClient:
        sandbox: BwrapSandbox = self.sandbox  # type: ignore[assignment]
        env = child_env(f"{INSIDE}/runs")
        # no user namespaces inside (docker's seccomp profile refuses them too): a seccomp filter,
        # since the root mode's runner has no user namespace of its own for --disable-userns
        filter_fd = seccomp_filter_fd()
        argv = sandbox.command(self.paper)
        if filter_fd is not None:
            argv[1:1] = ["--seccomp", str(filter_fd)]
        try:
            self.client = WarmClient(argv, env=env, pass_fds=() if filter_fd is None else (filter_fd,))
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
        return self.client

    @property
    def ready(self) -> dict[str, Any]:
        return (self.client.ready if self.client else None) or {}

    @property
    def server_pid(self) -> int | None:
        return self.client.proc.pid if self.client else None

    def run(self, files: Mapping[str, str], *, timeout: float) -> RunResult:
        limits = self.sandbox.limits
        with self.lock:
            if self.closed:
                raise RuntimeError("session is closed")
            client = self.client
            if client is None or not client.alive:
                # the runner died (killed from outside, or a bug): start a new one rather than fail the rest
                if client is not None:
                    client.close()
                client = self._start()
        payload = {"files": dict(files), "timeout": timeout, "memory_mb": limits.memory_mb,
                   "output_bytes": limits.output_bytes, "pids": limits.pids, "file_size_mb": limits.file_size_mb}
        started = time.monotonic()
        msg = client.request(payload, wait=timeout + 60.0)
        if msg is None and self._died(client):
            # the runner was already dead when this run was sent (killed from outside between runs,
            # before its reader saw the end of its output): this run never ran, so run it once more
            # in a new runner instead of failing a completion that was never tried
            with self.lock:
                if self.closed:
                    raise RuntimeError("session is closed")
                if self.client is client:
                    client.close()
                    self._start()
                client = self.client
            msg = client.request(payload, wait=timeout + 60.0)
        why = "the sandbox's warm runner stopped answering: " + client.stderr_tail.decode(errors="replace")[-1000:]
        return result_from_message(msg, seconds=time.monotonic() - started, why=why)

    @staticmethod
    def _died(client: WarmClient, grace: float = 2.0) -> bool:
        """True when the runner is gone (its output ends soon after it dies)."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not client.alive:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.client is not None:
                self.client.close()
                self.client = None
