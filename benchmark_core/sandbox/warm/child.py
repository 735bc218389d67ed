"""A run's forked child: isolated, given its request, then its test (``launch``). Standard library only."""
from __future__ import annotations

import fcntl
import io
import json
import os
import random
import resource
import signal
import sys
import traceback

from .common import _THREAD_ENV, LIBRARY_GUARD, RUN_NICE
from .launch import launch_prepare
from .runs import Run


def _fresh_stdio() -> None:
    """New sys.std* objects on fds 0-2, as a fresh interpreter with PYTHONUNBUFFERED would make."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def text(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors=errors)
        return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors,
                                write_through=unbuffered, line_buffering=False)

    sys.stdin = sys.__stdin__ = text(0, "r", "strict")
    sys.stdout = sys.__stdout__ = text(1, "w", "strict")
    sys.stderr = sys.__stderr__ = text(2, "w", "backslashreplace")
    sys.stderr.reconfigure(line_buffering=True)


def _reset_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGQUIT, signal.SIGTSTP):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # the interpreter's own default
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    signal.alarm(0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


#: where a run's writes go, relative to its private home (owned by its uid, removed after the run):
#: a preloaded or cached location of the server's (root's /tmp, /rcb/runs) must never be used
HOME_ENV = {
    "HOME": "", "TMPDIR": "", "XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state",
    "TORCHINDUCTOR_CACHE_DIR": ".cache/torchinductor", "TRITON_CACHE_DIR": ".cache/triton",
    "TORCH_HOME": ".cache/torch", "MPLCONFIGDIR": ".config/matplotlib", "HF_HOME": ".cache/huggingface",
    "NUMBA_CACHE_DIR": ".cache/numba", "CUPY_CACHE_DIR": ".cache/cupy", "WANDB_DIR": ".cache/wandb",
    "WANDB_CACHE_DIR": ".cache/wandb", "WANDB_CONFIG_DIR": ".config/wandb", "WANDB_DATA_DIR": ".cache/wandb",
    "WANDB_MODE": None,
}
#: wandb never reaches a server from a sandbox: keep it from trying
_FIXED_ENV = {"WANDB_MODE": "disabled"}


def run_home_env(home: str) -> dict[str, str]:
    """HOME, TMPDIR and the usual cache variables pointing into ``home``."""
    env = {k: (os.path.join(home, sub) if sub else home) for k, sub in HOME_ENV.items() if sub is not None}
    env.update(_FIXED_ENV)
    return env


def home_seed(skel: str | None, home: str) -> None:
    """Fill ``home`` with a copy of an environment's home skeleton (``sandbox.skel``: what the
    environment's first imports write into a new home, matplotlib's font list say), as a user's kept
    home holds it; files and folders only. Nothing when there is no skeleton: the imports build it."""
    if not skel or not os.path.isdir(skel):
        return
    import shutil

    def links(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if os.path.islink(os.path.join(folder, n))]

    # what the skeleton holds, never its own folder's mode or times: the home keeps its own (a warm
    # parent's home is its work folder, which the runs may pass but not list)
    for name in sorted(set(os.listdir(skel)) - set(links(skel, os.listdir(skel)))):
        source, target = os.path.join(skel, name), os.path.join(home, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True, ignore=links)
        elif os.path.isfile(source):
            shutil.copy2(source, target)


def _run_env(run: "Run", server: "Server") -> str:
    """Give the run its private home and undo what preloaded imports changed here; return the home.

    A fresh interpreter that imports the same modules gets a temp dir of its own and exit handlers
    that clean up after *its* imports: here the cached ``tempfile.tempdir`` points at the home, and
    exit handlers the preloads registered (cleanups of the server's own temp folders, which the
    run's uid may not remove, as wandb's) are dropped. What the preloads put into os.environ stays:
    the same imports in a fresh interpreter would put it there too.
    """
    import atexit
    import tempfile

    home = os.path.join(run.folder, "home")
    os.environ.update(run_home_env(home))
    if run.uid is not None:
        # the run's uid has no passwd entry: getpass.getuser() and friends read these first
        os.environ.setdefault("USER", "rcb")
        os.environ.setdefault("LOGNAME", "rcb")
    tempfile.tempdir = home
    atexit._clear()
    return home


#: the descriptor a spare run reads its request from (below the proof's 200-249)
_SPARE_CONTROL_FD = 199
#: a spare's process name while it waits (what tests and operators see of it; a run is named anew)
SPARE_NAME = b"rcb-spare"


def _name(new: bytes | None = None) -> bytes:
    """This process's name (``/proc/self/comm``; no ctypes: a call through it is an audited event);
    with ``new``, name it so and return the name it had."""
    try:
        with open("/proc/self/comm", "rb") as fh:
            old = fh.read().strip()
        if new is not None:
            with open("/proc/self/comm", "wb") as fh:
                fh.write(new[:15])
        return old
    except OSError:
        return b""


def _spare_request(control: int) -> "Run | None":
    """A run's request, as the server writes it to its child (``Server.spare_give``): None when the
    server closed the pipe without one (it is shutting down, or dropped its spare)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(control, 65536)
        if not chunk:
            return None
        data += chunk
    os.close(control)
    fields = json.loads(data)
    run = Run({"id": "spare"}, fields["folder"])
    run.uid = fields["uid"]
    run.memory_mb, run.file_size_mb, run.pids = fields["memory_mb"], fields["file_size_mb"], fields["pids"]
    run.cgroup_procs = list(fields.get("cgroups") or [])
    run.threads = max(1, min(64, int(fields.get("threads") or 1)))
    return run


def _threads_set(threads: int) -> None:
    """The BLAS/OpenMP/torch threads this run may use (the scheduler's share of the cores for each
    run in flight: ``base.threads_per_run``). The server imported everything with one (common.
    ``_THREAD_ENV``), so no pool of threads was made before the fork; more are set here, before the
    test: the variables (a fresh interpreter of the run's, its subprocesses, a library imported
    later read them) and torch's pool when torch is loaded."""
    if threads <= 1:
        return
    for var in _THREAD_ENV:
        os.environ[var] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(threads)
        except Exception:  # noqa: BLE001 - a torch without it: the run keeps one thread
            pass


def _child(server: "Server", fds: tuple[int, int, int], control: int, join: tuple[str, ...] = ()) -> None:
    """In the forked child: isolate, take the run's request, then run the test (never returns).

    What does not depend on the run comes first: its session, descriptors, signals, fresh standard
    streams, and (warm) the proof's key, the audit hook and its first checkpoint. The request is then
    read from ``control`` (a spare, forked before its request, waits there: ``Server.spare_fork``);
    the limits, the uid, the folder and the home follow, and the test starts. A spare joins its
    run's cgroups (``join``) before it waits: joining one waits for the kernel (an RCU grace
    period), which is then not the run's time.
    """
    code = 127
    try:
        proof, control = _child_isolate(fds, control)
        go, name = None, _name(SPARE_NAME)
        if not server.fresh:
            # state a fresh interpreter would not share with its siblings
            random.seed()
            np_random = sys.modules.get("numpy.random")
            if np_random is not None:
                try:
                    np_random.seed()
                except Exception:  # noqa: BLE001
                    pass
            _fresh_stdio()
            go = launch_prepare(proof, server.prepared)
        # into the next run's cgroups while it waits (the set-up's pages stay the server's, as a
        # child forked for the request would have them)
        joined = _cgroups_join(join, strict=False)
        run = _spare_request(control)
        if run is None:
            code = 0
            return
        if name:
            _name(name)  # named as the server is, as a child forked for its run would be
        _child_enter(run, joined)
        paper_dir = os.path.join(run.folder, "paper")
        os.chdir(paper_dir)
        home = _run_env(run, server)
        _threads_set(run.threads)
        script = os.path.join(paper_dir, server.test_script)
        if go is None:
            home_seed(server.skel, home)  # a fresh interpreter's home, as a user's kept home
            os.set_inheritable(proof, True)
            os.execve(server.python, [server.python, server.self_path, "--launch", script, "--proof-fd", str(proof),
                                      *([] if LIBRARY_GUARD[0] else ["--no-library-guard"])], dict(os.environ))
        # a fresh interpreter would print this while importing the preloaded modules
        for fd, data in ((1, server.import_output[0]), (2, server.import_output[1])):
            if data:
                os.write(fd, data)
        go(script)
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _child_isolate(fds: tuple[int, int, int], control: int) -> tuple[int, int]:
    """The child's own session, descriptors (fds 0-2, the proof's, the request's), signals, no core
    dumps and the runs' niceness; return (the proof's descriptor, the request's)."""
    out_w, err_w, proof_w = fds
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    proof = 200 + (proof_w % 50)
    # both moved above the fds they go to first, so that neither lands on the other
    high = fcntl.fcntl(proof_w, fcntl.F_DUPFD_CLOEXEC, 300)
    control = fcntl.fcntl(control, fcntl.F_DUPFD_CLOEXEC, 300)
    os.dup2(control, _SPARE_CONTROL_FD, inheritable=False)
    control = _SPARE_CONTROL_FD
    os.dup2(high, proof, inheritable=False)
    os.closerange(3, _SPARE_CONTROL_FD)
    os.closerange(_SPARE_CONTROL_FD + 1, proof)
    os.closerange(proof + 1, 65536)
    _reset_signals()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # runs yield the CPU to the runner, so it enforces timeouts on time even under a fork bomb
    # (in docker all of them share the container's CPU quota)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, RUN_NICE)
    except OSError:
        pass
    return proof, control


def _cgroups_join(procs: "list[str] | tuple[str, ...]", *, joined: tuple[str, ...] = (),
                  strict: bool = True) -> tuple[str, ...]:
    """Join (as root) the cgroups whose ``cgroup.procs`` files are ``procs``, but those of ``joined``;
    return every one joined. A cgroup that cannot be joined raises OSError, or with ``strict`` off
    (a spare joining ahead: its request tries again) is left out."""
    done = list(joined)
    for path in procs:  # (os calls: no codec is imported after the snapshot)
        if path in done:
            continue
        try:
            cg = os.open(path, os.O_WRONLY)
            try:
                os.write(cg, str(os.getpid()).encode())
            finally:
                os.close(cg)
        except OSError:
            if strict:
                raise
            continue
        done.append(path)
    return tuple(done)


def _child_enter(run: Run, joined: tuple[str, ...] = ()) -> None:
    """Into the run's cgroups (while still root; a spare joined them ahead), under its limits, as
    its uid."""
    # into the run's own cgroups (memory, pids: Server.cgroup_prepare) while still root
    _cgroups_join(run.cgroup_procs, joined=joined)
    mem = run.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    size = run.file_size_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if run.uid is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (run.pids, run.pids))
        os.setgroups([])
        os.setresgid(run.uid, run.uid, run.uid)
        os.setresuid(run.uid, run.uid, run.uid)
