"""The warm server of one paper: its preloads, its runs (each a forked child, usually a spare forked
ahead), their limits, their answers. Standard library only; runs inside the sandbox."""
from __future__ import annotations

import argparse
import errno
import json
import gc
import os
import selectors
import shutil
import signal
import stat
import sys
import time

from .child import _child
from .cleanup import (_cgroup_dirs, _cgroup_oom_kills, _cgroup_write, _disk_full, _kill_until_gone, _proc_entries,
                      ipc_remove, remove_tree)
from .common import (_ID_RE, _IGNORED, _THREAD_ENV, ARGS_PRELOAD, DISK_ALARM, DISK_CHECK_SECONDS, DISK_SHARE,
                     DRAIN_SECONDS, KEEP_RESULTS, PREPARE_RETRIES, PROOF_BYTES, PROTOCOL, RUNNER, split_lines)
from .audit import PAPER_FILES, PROOF_EXIT, paper_files
from .launch import snapshot_prepare
from . import watch
from .watch import prepare as watch_prepare, prepare_plain
from .proof import MODULES_MAX, proof_read
from .runs import Run, _Capture, _Spare
from .learn import LEARN_MAX, REFUSED_MAX, import_clean, learn_candidates, learn_limits, learn_probe
from .scan import (ALWAYS_PRELOAD, UNSAFE_TO_FORK, import_testing, named_roots, own_names, preload, scan_imports,
                   scan_submodules)


#: reads of a run's stdout or stderr pipe at its exit (64 KiB each) before the loop drains the rest
DRAIN_READS = 64
#: the server's folder (in its work folder) holding the next run's copy of the paper: a run id never
#: has a '+' (``_ID_RE``), so no run's folder can take its name
AHEAD_FOLDER = "+ahead"

#: the size of the block ``_malloc_settle`` takes and gives back: glibc's largest dynamic mmap
#: threshold (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit), less room for the chunk's header
MALLOC_SETTLE_BYTES = (32 << 20) - (64 << 10)


def _tree_use(roots: list[str]) -> tuple[int, int]:
    """Bytes (blocks) and inodes the trees at ``roots`` hold, symlinks not followed (at most 5
    million entries are counted)."""
    used = count = 0
    stack = list(roots)
    while stack and count < 5_000_000:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except OSError:
            continue
        used += st.st_blocks * 512
        count += 1
        if stat.S_ISDIR(st.st_mode):
            try:
                stack.extend(e.path for e in os.scandir(path))
            except OSError:
                pass
    return used, count


def _malloc_settle(libc, ctypes) -> None:
    """Raise glibc malloc's mmap threshold before any run is forked, as a run raises it itself.

    glibc serves a request above its threshold (128 KiB when a process starts) with a mapping of its
    own: each page of it faults in zeroed, and the whole goes back at free. Freeing such a block
    raises the threshold to its size (up to 32 MiB; the trim threshold to twice that), so a fresh
    interpreter's run stops mapping its big buffers after its first big free. Forked runs start from
    the server's state, where nothing may have raised it: a torch run that multiplies 512x512
    matrices in a loop took 90,000-230,000 page faults and ~10 % more CPU than with the threshold
    raised (5,000). Taking and freeing one block here (never touched: no page of it is used) raises
    it once for every run. Placement only: what a run computes, and its memory limits, are the same
    (a block a run frees may stay in its heap, at most twice the threshold, as in a fresh run's
    after its first big free). Without glibc (another libc), nothing changes."""
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    block = malloc(MALLOC_SETTLE_BYTES)
    if block:
        free(block)


class Server:
    def __init__(self, args: argparse.Namespace):
        self.paper = os.path.abspath(args.paper)
        # the files every run's copy holds, listed once: each run's hook reports one it writes
        PAPER_FILES[0] = paper_files(self.paper)
        self.work = os.path.abspath(args.work)
        self.fresh = bool(args.fresh)
        #: the environment's home skeleton (``--skel``): a fresh run's home starts as a copy of it
        self.skel = getattr(args, "skel", None)
        self.python = args.python or sys.executable
        self.self_path = RUNNER
        self.test_script = "paper2code_test.py"
        self.uid_base = args.run_uid_base if os.geteuid() == 0 else None
        if self.uid_base is not None and self.uid_base <= 0:
            self.uid_base = None
        self.runs: dict[int, Run] = {}  # by pid
        self.active_ids: set[str] = set()
        self.finished: list[str] = []
        self.slots: set[int] = set()
        self.sel = selectors.DefaultSelector()
        self.stdin_buf = bytearray()
        self.stdin_open = True
        self.out_fd = -1
        self.statuses: dict[int, int] = {}
        #: CPU seconds (user + system) and minor page faults of each ended run's child (wait4: the
        #: child's own and its waited-for descendants'), for the bench; no verdict reads them
        self.usages: dict[int, tuple[float, int]] = {}
        self.import_output: tuple[bytes, bytes] = (b"", b"")
        self.disk_check_at = 0.0
        self.retry: list[tuple[float, dict]] = []  # runs that could not be prepared on a full disk
        self.fresh_reason = "fresh_process" if self.fresh else ""
        #: the protected modules' snapshot every run's first checkpoint starts from (snapshot_prepare;
        #: a warm parent's, set by the parent before ``serve``, until the server brings it up to date)
        self.prepared: tuple | None = None
        #: what the warm parent printed importing the environment's modules (zygote_serve): replayed too
        self.inherited_output: tuple[bytes, bytes] = (b"", b"")
        #: forked by a warm parent: other papers' servers share the sandbox
        self.shared = False
        #: the next run's child, forked ahead and waiting for its request (spare_fork), or None
        self.spare: _Spare | None = None
        #: import learning (learn.py): the modules learned, the names refused, the paper's own
        #: names and the packages its files name (read at the first lesson)
        self.learned: list[str] = []
        self.learn_refused: set[str] = set()
        self.learn_names: tuple[set[str], set[str]] | None = None
        #: a run of the paper's own code has ended and its lesson was taken (``lesson_pending``)
        self.taught = False
        self.plain_taught = False  # the paper's own modules compiled for the runs (``plain_learn``)
        #: the sandbox's cgroup folders ("v1" memory and pids, or "v2" unified), uid mode only
        self.cgroups = _cgroup_dirs(getattr(args, "cgroups", "") or "") if self.uid_base is not None else {}
        #: the last run's memory (MB) and process limits, a spare's cgroups' until its request
        self.cgroup_limits: tuple[int | None, int | None] = (None, None)
        #: each run cgroup made here, with the limits last written into it (only this server writes
        #: them: a run's uid cannot), so that a slot's next run writes only limits that changed
        self.cgroup_set: dict[str, tuple[int | None, int | None]] = {}
        #: a copy of the paper made while the runs before went on (``copy_ahead``), or None
        self.ahead: str | None = None
        #: whether the host may send another run: False once a request was marked ``"last"`` (the
        #: host's last queued run of the paper), so that no spare and no copy is made for nobody; a
        #: request after it all the same (a run made again) forks its child at its request
        self.more = True
        #: the paper's bytes and inodes (``ahead_room``; read once)
        self.paper_size: tuple[int, int] | None = None

    # -- helpers
    def send(self, obj: "dict | str") -> None:
        """One protocol line: ``obj``, or its JSON text when already made (``finish``)."""
        data = ((obj if isinstance(obj, str) else json.dumps(obj)) + "\n").encode()
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.out_fd, view)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            view = view[n:]

    def reap(self) -> None:
        """Collect every exited child (runs and orphans reparented to us); keep run statuses."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.runs:
                self.statuses[pid] = status
                self.usages[pid] = (usage.ru_utime + usage.ru_stime, usage.ru_minflt)
            elif self.spare is not None and pid == self.spare.pid:
                self.spare_drop(kill=False)  # it died waiting (killed from outside): the next run forks its own

    def run_pids(self, run: Run, table) -> list[int]:
        me = os.getpid()
        if run.uid is not None:
            return [p for p, _pp, _g, _s, uid, st in table if uid == run.uid and st != "Z" and p != me]
        # no uid of its own: its session, its group, its descendants, orphans handed to us
        children: dict[int, list[int]] = {}
        for p, pp, _g, _s, _u, _st in table:
            children.setdefault(pp, []).append(p)
        found = {p for p, _pp, g, s, _u, st in table if st != "Z" and (s == run.pid or g == run.pid)}
        stack = [run.pid]
        while stack:
            for c in children.get(stack.pop(), []):
                if c not in found:
                    found.add(c)
                    stack.append(c)
        active = set(self.runs)
        if self.spare is not None:
            active.add(self.spare.pid)  # the next run's child, ours: not something this run left
        found |= {p for p, pp, _g, _s, _u, st in table if pp == me and p not in active and st != "Z"}
        found.discard(me)
        return [p for p in found if p != run.pid or run.status is None]

    def kill_tree(self, run: Run) -> None:
        _kill_until_gone(lambda: self.run_pids(run, _proc_entries()), self.reap, rounds=400)

    # -- request handling
    def bad_request(self, rid, message: str) -> None:
        self.send({"id": rid, "exit_code": None, "signal": None, "timed_out": False, "stdout": "", "stderr": message,
                   "seconds": 0.0, "truncated": False, "oom": False,
                   "proof": {"completed": False, "tests_run": 0}, "error": message})

    def start(self, request: dict) -> None:
        rid = request.get("id")
        if request.get("_tries"):
            self.active_ids.discard(rid)  # held while it waited for the disk
        if not isinstance(rid, str) or not _ID_RE.match(rid) or rid in (".", ".."):
            self.bad_request(rid, f"bad run id {rid!r}: use 1-128 letters, digits, '_', '.', '-'")
            return
        if rid in self.active_ids:
            self.bad_request(rid, f"run id {rid!r} is already running")
            return
        folder = os.path.join(self.work, rid)
        if request.get("last") is True:
            self.more = False
        run = self.prepare(request, rid, folder)
        if run is None:
            return
        if self.uid_base is not None:
            spare = self.spare
            slot = spare.slot if spare is not None else None
            if spare is not None:
                spare.slot = None  # the run's now (its cgroups are those the spare joined ahead)
            self.give_uid(run, folder, slot)
            if spare is not None and not set(spare.joined) <= set(run.cgroup_procs):
                self.spare_drop()  # a cgroup it joined could not be set for the run: a child of its own
        run.started = time.monotonic()
        run.deadline = run.started + run.timeout
        child = self.spare_give(run)
        run.forked_ahead = child is not None
        if child is None:  # no spare, or it is gone: a child forked now takes the request the same way
            try:
                child = self.spare_give(run, self.child_fork())
                why = "its child ended before it took its request"
            except OSError as exc:
                why = f"cannot fork: {exc}"
            if child is None:
                self.discard(folder)
                if run.slot is not None:
                    self.slots.discard(run.slot)
                self.bad_request(rid, f"cannot start run {rid}: {why}")
                return
        self.watch_run(run, rid, child)
        self.spare_fork()  # the next run's child, while this one runs
        self.copy_ahead()  # and its copy of the paper

    def prepare(self, request: dict, rid: str, folder: str) -> "Run | None":
        """The run's folder: a copy of the paper with the request's files written into it, and its
        home. None when it cannot be made (answered, or retried once a full disk has room)."""
        try:
            self.discard(folder)
            run = Run(request, folder)
            os.makedirs(folder)
            paper_copy = os.path.join(folder, "paper")
            if not self.ahead_take(paper_copy):
                self.paper_copy(paper_copy)
            base = os.path.realpath(paper_copy)
            for rel, text in run.files.items():
                target = os.path.realpath(os.path.join(paper_copy, rel))
                if not target.startswith(base + os.sep):
                    raise ValueError(f"refusing to write outside the paper folder: {rel}")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.islink(os.path.join(paper_copy, rel)):
                    os.unlink(os.path.join(paper_copy, rel))
                with open(target, "w", encoding="utf-8") as fh:
                    fh.write(text)
            run.own_code = self.own_code(run.files)
            os.makedirs(os.path.join(folder, "home"))
        except (OSError, ValueError, TypeError, AttributeError, shutil.Error) as exc:
            self.discard(folder)
            tries = int(request.get("_tries") or 0)
            if _disk_full(exc) and tries < PREPARE_RETRIES and (self.runs or tries == 0):
                # another run filled the disk: the guard stops it and its folder goes; try again then
                self.retry.append((time.monotonic() + 0.3, {**request, "_tries": tries + 1}))
                self.active_ids.add(rid)
                return None
            self.bad_request(rid, f"cannot prepare run {rid}: {exc}")
            return None
        return run

    def paper_copy(self, target: str) -> None:
        """A copy of the paper's folder at ``target`` (its caches and bytecode left out)."""
        shutil.copytree(self.paper, target, symlinks=True, ignore=shutil.ignore_patterns(*_IGNORED, "*.pyc"))

    # -- the next run's copy of the paper, made while the runs before it go on (``copy_ahead``): a
    # run's request then only moves it into the run's folder. It lies in a folder of the server's
    # own (mode 0700, root's in uid mode), which no run can enter, and it is the paper's folder as
    # the copy at the request would be: the paper is read-only to the server.
    def ahead_folder(self) -> str:
        return os.path.join(self.work, AHEAD_FOLDER)

    def copy_ahead(self) -> None:
        """Make the next run's copy of the paper now, unless one is waiting; a copy that cannot be
        made (a full disk) is left for the request to make."""
        if self.ahead is not None or not self.stdin_open or not self.more or self.uid_base is None:
            return  # (without run uids a run could write into a copy its server keeps)
        if not self.ahead_room():
            return
        holder = self.ahead_folder()
        target = os.path.join(holder, "paper")
        try:
            self.discard(holder)
            os.mkdir(holder, 0o700)
            self.paper_copy(target)
        except (OSError, shutil.Error):
            self.discard(holder)
            return
        self.ahead = target

    def ahead_room(self) -> bool:
        """Whether a copy made ahead leaves the runs' disk far from the disk guard's alarm: at most
        half of ``DISK_ALARM`` of its bytes and of its inodes used with it (the runs' own copies and
        output come first; a big paper on a small disk is copied at its request, as before)."""
        if self.paper_size is None:
            self.paper_size = _tree_use([self.paper])  # (its caches too: a copy holds less)
        try:
            st = os.statvfs(self.work)
        except OSError:
            return False
        size, count = self.paper_size
        room = DISK_ALARM / 2
        blocks_ok = st.f_blocks > 0 and (st.f_blocks - st.f_bavail) * st.f_frsize + size <= st.f_blocks * st.f_frsize * room
        inodes_ok = st.f_files <= 0 or (st.f_files - st.f_favail) + count <= st.f_files * room
        return blocks_ok and inodes_ok

    def ahead_take(self, target: str) -> bool:
        """Move the copy made ahead to ``target``; False when there is none (or it cannot move)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            return False
        try:
            os.rename(ahead, target)
            return True
        except OSError:
            self.discard(os.path.dirname(ahead))
            return False

    def own_code(self, files: dict) -> bool:
        """Whether every file of the request is the paper's own, as it is in the paper's folder (a
        reference run: the paper's own code, no completion's; learn() learns from those only)."""
        root = os.path.realpath(self.paper)
        for rel, text in files.items():
            path = os.path.join(self.paper, rel)
            if os.path.islink(path) or not os.path.realpath(path).startswith(root + os.sep):
                return False
            try:
                with open(path, encoding="utf-8", newline="") as fh:
                    if fh.read() != text:
                        return False
            except (OSError, ValueError):
                return False
        return True

    def slot_take(self) -> int:
        """The lowest free slot (a run's uid is ``uid_base + slot``), taken."""
        slot = 0
        while slot in self.slots:
            slot += 1
        self.slots.add(slot)
        return slot

    def give_uid(self, run: Run, folder: str, slot: "int | None" = None) -> None:
        """The run's slot (``slot``: one the spare took for it, else the lowest free), its uid
        (``uid_base + slot``), its folder owned by it, its cgroups."""
        if slot is None:
            slot = self.slot_take()
        run.slot, run.uid = slot, self.uid_base + slot
        for root, dirs, files in os.walk(folder):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), run.uid, run.uid)
        os.chown(folder, run.uid, run.uid)
        os.chmod(folder, 0o700)
        self.cgroup_prepare(run)

    def watch_run(self, run: Run, rid: str, child: _Spare) -> None:
        """The run's child is started: watch its pipes and its exit."""
        pid, (out_r, err_r, proof_r) = child.pid, child.fds
        run.learned, run.compiled = child.learned, child.compiled
        run.pid = pid
        self.runs[pid] = run
        self.active_ids.add(rid)
        for fd, kind in ((out_r, "out"), (err_r, "err"), (proof_r, "proof")):
            os.set_blocking(fd, False)
            run.open_fds[fd] = kind
            self.sel.register(fd, selectors.EVENT_READ, (run, kind))
        if hasattr(os, "pidfd_open"):
            try:
                run.pidfd = os.pidfd_open(pid)
                self.sel.register(run.pidfd, selectors.EVENT_READ, (run, "exit"))
            except OSError:
                run.pidfd = -1

    # -- the run's cgroups (--cgroups: folders the host made for this sandbox, see sandbox/cgroups.py)
    def cgroup_make(self, uid: int, memory_mb: "int | None" = None, pids: "int | None" = None) -> tuple[list[str], int]:
        """Make (once per uid) the memory and pids cgroups of the runs of ``uid``, with the limits
        given; return the ``cgroup.procs`` files of those usable and the memory cgroup's OOM kills."""
        procs, oom_kills = [], 0
        for kind, root in self.cgroups.items():
            path = os.path.join(root, f"run-{uid}")
            written = self.cgroup_set.pop(path, None)
            try:
                if written is None:
                    os.makedirs(path, exist_ok=True)
                if written != (memory_mb, pids):
                    self.cgroup_limits_write(path, kind, memory_mb, pids)
                if memory_mb is not None and kind in ("memory", "unified"):
                    oom_kills = _cgroup_oom_kills(path, kind)
            except OSError as exc:
                # the host made the folders: a failure here is the environment's, said where it shows
                print(f"[warm] run cgroup {path} not usable: {exc}", file=sys.stderr, flush=True)
                continue
            self.cgroup_set[path] = (memory_mb, pids)
            procs.append(os.path.join(path, "cgroup.procs"))
        return procs, oom_kills

    @staticmethod
    def cgroup_limits_write(path: str, kind: str, memory_mb: "int | None", pids: "int | None") -> None:
        """Write a run cgroup's memory and process limits (those given; raises OSError)."""
        if memory_mb is not None and kind in ("memory", "unified"):
            limit = str(memory_mb * 1024 * 1024)
            if kind == "memory":
                # memory and swap together (where the kernel accounts swap) may never be below memory
                # alone: a limit raised goes into memsw first, a limit lowered into memory first
                try:
                    _cgroup_write(path, "memory.limit_in_bytes", limit)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    _cgroup_write(path, "memory.memsw.limit_in_bytes", limit, optional=True)
                    _cgroup_write(path, "memory.limit_in_bytes", limit)
                # no swap beyond the limit
                _cgroup_write(path, "memory.memsw.limit_in_bytes", limit, optional=True)
            else:
                _cgroup_write(path, "memory.max", limit)
                _cgroup_write(path, "memory.swap.max", "0", optional=True)
                _cgroup_write(path, "memory.oom.group", "1", optional=True)
        if pids is not None and kind in ("pids", "unified"):
            _cgroup_write(path, "pids.max", str(pids + 8), optional=kind == "unified")

    def cgroup_prepare(self, run: Run) -> None:
        """Make (once per uid) and set the run's memory and pids cgroups; its child joins them (a
        spare joined them already, while it waited: ``spare_fork``)."""
        run.cgroup_procs, run.oom_kills = self.cgroup_make(run.uid, run.memory_mb, run.pids)
        self.cgroup_limits = (run.memory_mb, run.pids)

    def cgroup_oom(self, run: Run) -> bool:
        """Whether the run's memory cgroup killed a process of the run."""
        for kind, root in self.cgroups.items():
            if kind in ("memory", "unified") and run.uid is not None:
                path = os.path.join(root, f"run-{run.uid}")
                if _cgroup_oom_kills(path, kind) > run.oom_kills:
                    return True
        return False

    # -- the spare: the next run's child, forked before its request
    # Forking a warm server, and a run's set-up up to its first checkpoint (the proof's key, the
    # audit hook, taking in the snapshot), do not depend on the run: a spare does them while the
    # runs before it go on, then waits for its request on a pipe of its own. Its state is the
    # server's at the fork, as a child forked for the request would have it; what depends on the
    # run (limits, uid, folder, home) comes with the request, before any of the paper's code runs.
    def child_fork(self, join: "list[str] | tuple[str, ...]" = ()) -> _Spare:
        """A run's child, waiting for its request (``_child``); it joins the cgroups of ``join``
        (``cgroup.procs`` files) first. Raises OSError when it cannot fork."""
        pipes = [os.pipe() for _ in range(4)]  # out, err, proof, control
        try:
            pid = os.fork()
        except OSError:
            for r, w in pipes:
                os.close(r)
                os.close(w)
            raise
        (out_r, out_w), (err_r, err_w), (proof_r, proof_w), (ctl_r, ctl_w) = pipes
        if pid == 0:
            for fd in (out_r, err_r, proof_r, ctl_w):
                os.close(fd)
            _child(self, (out_w, err_w, proof_w), ctl_r, tuple(join))
        for fd in (out_w, err_w, proof_w, ctl_r):
            os.close(fd)
        spare = _Spare(pid, ctl_w, (out_r, err_r, proof_r))
        spare.learned = list(self.learned)
        spare.compiled = [entry[0] for entry in watch.PLAIN]
        spare.joined = list(join)
        return spare

    def spare_fork(self) -> None:
        """Fork the next run's child now, unless the runs are fresh interpreters or one is waiting.

        In uid mode the spare takes its run's slot now and joins that uid's cgroups while it waits:
        a process joining a cgroup waits for the kernel (an RCU grace period: 6-14 ms on a 2-core
        VM, measured 2026-12-04), which a child joining at its request added to every run's time."""
        if self.fresh or self.spare is not None or not self.stdin_open or not self.more:
            return
        if self.lesson_pending():
            return  # the lesson would drop it: the spare is forked once the lesson is taken (finish)
        slot, join = None, []
        if self.uid_base is not None and self.cgroups:
            slot = self.slot_take()
            # with the last run's limits: a waiting spare's cgroup is never left without one
            join, _ = self.cgroup_make(self.uid_base + slot, *self.cgroup_limits)
        try:
            self.spare = self.child_fork(join)
        except OSError:
            if slot is not None:
                self.slots.discard(slot)
            return  # no spare: the next run forks when it comes
        self.spare.slot = slot

    def lesson_pending(self) -> bool:
        """Whether the paper's first run of its own code (its reference run) is going on: its lesson
        (``learn``) would drop a spare forked now and fork another. Once one lesson is taken, a run of
        the paper's own code (a reference run made again, a completion that is the paper's code, as
        every run of a bench set of reference code is) holds nothing back: it would teach nothing new."""
        if self.taught or self.fresh or len(self.learned) >= LEARN_MAX or len(self.learn_refused) >= REFUSED_MAX:
            return False
        return any(run.own_code for run in self.runs.values())

    def spare_give(self, run: Run, spare: "_Spare | None" = None) -> "_Spare | None":
        """Hand ``run`` to ``spare`` (default: the waiting spare); None when there is none or it is
        gone (the run then forks its own)."""
        if spare is None:
            spare, self.spare = self.spare, None
        if spare is None:
            return None
        request = {"folder": run.folder, "uid": run.uid, "memory_mb": run.memory_mb,
                   "file_size_mb": run.file_size_mb, "pids": run.pids, "cgroups": run.cgroup_procs,
                   "threads": run.threads}
        try:
            os.write(spare.control, (json.dumps(request) + "\n").encode())  # far below a pipe's buffer
        except OSError:  # its end is closed: it is gone
            self.spare_drop(spare)
            return None
        os.close(spare.control)
        return spare

    def spare_drop(self, spare: "_Spare | None" = None, *, kill: bool = True) -> None:
        spare = spare or self.spare
        if spare is None:
            return
        if spare is self.spare:
            self.spare = None
        if spare.slot is not None:  # the slot it took for its run (a run that took it over set None)
            self.slots.discard(spare.slot)
            spare.slot = None
        for fd in (spare.control, *spare.fds):
            try:
                os.close(fd)
            except OSError:
                pass
        if kill:  # (not once reaped: its pid may be another process's by then)
            try:
                os.kill(spare.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def on_data(self, run: Run, fd: int, kind: str) -> bool:
        """Read what ``fd`` holds (one read); whether there may be more (False: nothing now, or its end)."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            run.open_fds.pop(fd, None)
            return False
        if kind == "out":
            run.out.feed(data)
        elif kind == "err":
            run.err.feed(data)
        elif len(run.proof) < PROOF_BYTES:
            run.proof += data
        else:
            run.proof_overflow = True
        return True

    def on_exit(self, run: Run) -> None:
        if run.pidfd >= 0:
            self.sel.unregister(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = -1
        run.ended = time.monotonic()
        self.kill_tree(run)
        run.drain_until = time.monotonic() + DRAIN_SECONDS
        # its processes are gone: what they wrote is in the pipes now, ended by EOF unless something
        # outside the run still holds a pipe (the drain then goes on in the loop until DRAIN_SECONDS)
        for fd, kind in list(run.open_fds.items()):
            if kind in ("out", "err"):
                for _ in range(DRAIN_READS):
                    if not self.on_data(run, fd, kind):
                        break

    def finish(self, run: Run) -> None:
        for fd in list(run.open_fds):
            self.sel.unregister(fd)
            os.close(fd)
        run.open_fds.clear()
        result = self.result_of(run)
        del self.runs[run.pid]
        self.statuses.pop(run.pid, None)
        self.usages.pop(run.pid, None)
        self.active_ids.discard(run.id)
        if run.slot is not None:
            self.slots.discard(run.slot)
        self.clean_after(run)
        # the run owned this folder: whatever it left under that name must not redirect our write
        target = os.path.join(run.folder, "result.json")
        self.discard(target)
        text = json.dumps(result)  # once, for the file and the answer (json.dump encodes in Python)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError:
            pass
        self.send(text)
        self.finished.append(run.folder)
        while len(self.finished) > KEEP_RESULTS:
            self.discard(self.finished.pop(0))
        if run.own_code:
            self.plain_learn(run.modules)
            try:
                self.learn(run.modules)
            except Exception as exc:  # noqa: BLE001 - a lesson lost costs time, never the server
                os.write(2, f"[runner] import learning failed: {type(exc).__name__}: {exc}\n".encode())
            self.taught = True
            self.spare_fork()  # (held back while the lesson was pending: lesson_pending)

    def learn_told(self, names) -> None:
        """The host's lesson (``{"op": "learn", "modules": [...]}``): what the paper's reference run
        reported in an earlier session whose outcome the host kept (its reference is not run again
        here, so nothing would be learned otherwise). Checked as a run's report is (``learn``)."""
        if not isinstance(names, list):
            return
        self.plain_learn(names[:MODULES_MAX])
        try:
            self.learn([n for n in names[:MODULES_MAX] if isinstance(n, str)])
        except Exception as exc:  # noqa: BLE001 - a lesson lost costs time, never the server
            os.write(2, f"[runner] import learning failed: {type(exc).__name__}: {exc}\n".encode())

    def plain_learn(self, names) -> None:
        """The paper's own modules a run of its own code imported (a ``*_ref.py`` copy, helpers),
        compiled once for the runs forked after (``watch.prepare_plain``): a run whose file reads the
        same takes that code instead of compiling it (1.3 ms a run for a 13 KB reference copy)."""
        if self.fresh or self.plain_taught or not names:
            return
        self.plain_taught = True
        try:
            prepare_plain(self.paper, PAPER_FILES[0] or (), names)
        except Exception as exc:  # noqa: BLE001 - costs time, never the server
            os.write(2, f"[runner] compiling the paper's modules failed: {type(exc).__name__}: {exc}\n".encode())

    def learn(self, names: list[str]) -> None:
        """Import learning (learn.py): what a run of the paper's own code (its reference run)
        imported that this server had not, imported here (once a forked probe imported it cleanly)
        before the next spare is forked, so that no later run pays it. The spare forked before the
        lesson is dropped and forked anew."""
        if (self.fresh or not names or len(self.learned) >= LEARN_MAX
                or len(self.learn_refused) >= REFUSED_MAX):
            return
        if self.learn_names is None:
            self.learn_names = (own_names(self.paper), named_roots(self.paper))
        own, named = self.learn_names
        candidates = learn_candidates(names, own=own, named=named, known=self.learn_refused)
        if not candidates:
            return
        limits = learn_limits(self.paper, self.work, self.uid_base)
        clean = learn_probe(candidates, *limits)[:LEARN_MAX - len(self.learned)]
        self.learn_refused.update(n for n in candidates if n not in clean)
        if not clean:
            return
        import threading

        threads = set(threading.enumerate())
        done = import_clean(clean, *limits, strict=False)
        import_testing()
        if not done:
            return
        self.learned += done
        os.write(2, f"[runner] learned imports: {', '.join(done)}\n".encode())
        extra = sorted(t.name for t in set(threading.enumerate()) - threads if t.is_alive())
        unsafe = [m for m in UNSAFE_TO_FORK if m in sys.modules]
        if unsafe or extra:  # as after the preloads: a fork would not be a fresh interpreter's equal
            self.fresh, self.fresh_reason = True, f"learned imports left {', '.join(unsafe + extra)} behind"
        else:
            self.prepared = snapshot_prepare(self.prepared)  # the new modules in the snapshot runs start from
            gc.freeze()
        self.spare_drop()
        self.spare_fork()

    def result_of(self, run: Run) -> dict:
        """The run's answer: its exit, its output, what its proof says."""
        status = run.status if run.status is not None else 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = -sig if sig is not None else os.WEXITSTATUS(status)
        proof = proof_read(bytes(run.proof), paper_dir=os.path.join(run.folder, "paper"),
                           test_script=self.test_script, runner=self.self_path, pid=run.pid,
                           trusted=(sys.prefix, sys.base_prefix, sys.exec_prefix))
        run.modules = proof.pop("modules", [])  # for learn(); the host keeps a reference run's (own code)
        if run.own_code and run.modules:
            proof["modules"] = run.modules
        proof["overflow"] = run.proof_overflow
        # the hook ended the run because it could not report: its proof pipe was closed or replaced
        proof["channel_lost"] = code == PROOF_EXIT and not proof["authentic"]
        stderr = run.err.text()
        if run.disk_stopped:
            stderr = (stderr.rstrip("\n") + "\n" + run.disk_stopped + "\n").lstrip("\n")
        oom = ("MemoryError" in stderr or "std::bad_alloc" in stderr
               or (sig == signal.SIGKILL and not run.timed_out) or self.cgroup_oom(run))
        result = {
            "id": run.id,
            "exit_code": code,
            "signal": sig,
            "timed_out": run.timed_out,
            "stdout": run.out.text(),
            "stderr": stderr,
            "seconds": round((run.ended or time.monotonic()) - run.started, 4),
            "truncated": bool(run.out.dropped or run.err.dropped),
            "oom": bool(oom),
            "proof": proof,
            "forked_ahead": run.forked_ahead,
            "learned": run.learned,
            "compiled": run.compiled,
        }
        if run.pid in self.usages:
            result["cpu_seconds"], result["minor_faults"] = round(self.usages[run.pid][0], 4), self.usages[run.pid][1]
        return result

    def clean_after(self, run: Run) -> None:
        """Whatever the run left goes: its folder's content, its SysV IPC objects, its files in the
        shared /tmp, /dev/shm and /dev/mqueue."""
        # everything the run made in its folder goes (a run's leftovers must not fill the runs' disk);
        # the folder itself is the runner's again before its result is written there
        try:
            names = os.listdir(run.folder)
        except OSError:
            names = []
        for name in names:
            self.discard(os.path.join(run.folder, name))
        if run.uid is not None:
            try:
                os.chown(run.folder, 0, 0)
            except OSError:
                pass
        if run.uid is not None:
            # what the run left in the sandbox's IPC namespace: SysV segments, queues, semaphores
            ipc_remove(run.uid)
            # what the run left in the shared /tmp, /dev/shm, /dev/mqueue would leak into the next run
            for shared in ("/tmp", "/dev/shm", "/dev/mqueue"):
                try:
                    with os.scandir(shared) as entries:
                        for entry in entries:
                            if entry.stat(follow_symlinks=False).st_uid == run.uid:
                                self.discard(entry.path)
                except OSError:
                    pass

    def disk_guard(self) -> None:
        """Per-run disk and inode limits: when a shared tmpfs (the runs' folder, /tmp, /dev/shm) is
        more than half used while other runs go on or wait, a run holding more than its share of it
        is stopped, so that one run cannot fill the disk every other run needs."""
        active = [r for r in self.runs.values() if r.status is None and not r.disk_stopped]
        if len(active) + len(self.retry) < (1 if self.shared else 2):
            # alone, a run meets a full disk as it would anywhere (ENOSPC); its folder goes after it
            # (under a warm parent it is never alone: other papers' runs share the disks)
            return
        for mount in (self.work, "/tmp", "/dev/shm"):
            try:
                st = os.statvfs(mount)
            except OSError:
                continue
            blocks = 1 - st.f_bavail / st.f_blocks if st.f_blocks else 0.0
            inodes = 1 - st.f_favail / st.f_files if st.f_files else 0.0
            if max(blocks, inodes) < DISK_ALARM:
                continue
            share_bytes = st.f_blocks * st.f_frsize * DISK_SHARE
            share_inodes = st.f_files * DISK_SHARE
            for run in active:
                if run.disk_stopped:
                    continue
                used, count = self.disk_use(run, mount)
                if used > share_bytes or count > share_inodes:
                    run.disk_stopped = (f"[runner] the run was stopped: it used {used >> 20} MB and {count} files of "
                                        f"{mount} (a run may use {int(share_bytes) >> 20} MB and "
                                        f"{int(share_inodes)} files)")
                    self.kill_tree(run)
                    try:
                        os.kill(run.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def disk_use(self, run: "Run", mount: str) -> tuple[int, int]:
        """Bytes and inodes the run holds on ``mount``: its folder, or what its uid owns there."""
        if mount == self.work:
            roots = [run.folder]
        elif run.uid is not None:
            try:
                roots = [e.path for e in os.scandir(mount) if e.stat(follow_symlinks=False).st_uid == run.uid]
            except OSError:
                roots = []
        else:
            return 0, 0
        return _tree_use(roots)

    @staticmethod
    def discard(path: str) -> None:
        """Remove ``path`` whatever a run left there: no recursion, no path longer than one name."""
        remove_tree(path)

    def on_stdin(self) -> None:
        try:
            data = os.read(0, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self.stdin_open = False
            self.sel.unregister(0)
            return
        self.stdin_buf += data
        for line in split_lines(self.stdin_buf):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
            except ValueError as exc:
                self.bad_request(None, f"bad request line: {exc}")
                continue
            if request.get("op") == "learn":
                self.learn_told(request.get("modules"))
                continue
            try:
                self.start(request)
            except Exception as exc:  # noqa: BLE001 - one bad request must not stop the other runs
                self.bad_request(request.get("id"), f"cannot start run: {type(exc).__name__}: {exc}")

    def serve(self) -> int:
        # protocol lines go to a private copy of stdout; anything else printed lands on stderr
        self.out_fd = os.dup(1)
        os.dup2(2, 1)
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of runs come back to us
            _malloc_settle(libc, ctypes)
        except (OSError, AttributeError):
            pass
        os.makedirs(self.work, exist_ok=True)
        if self.uid_base is not None:
            os.chmod(self.work, 0o711)
        for var in _THREAD_ENV:
            os.environ.setdefault(var, "1")
        preloaded, failed = self.preload_paper()
        if not self.fresh:
            # the paper's annotated files compiled once: a run parses only what its completion changed
            watch_prepare(self.paper, PAPER_FILES[0] or ())
            # once, rather than in every run (_install_audit); a warm parent's brought up to date
            self.prepared = snapshot_prepare(self.prepared)
            gc.freeze()  # what is here now is never walked by a run's collections: no copy-on-write for it
        # a preloaded module may have installed handlers; the server's own are set after
        self.send({"ready": True, "protocol": PROTOCOL, "preloaded": preloaded, "failed": failed,
                   "fresh": self.fresh, "fresh_reason": self.fresh_reason, "uid_mode": self.uid_base is not None})
        self.spare_fork()
        self.copy_ahead()
        os.set_blocking(0, False)
        self.sel.register(0, selectors.EVENT_READ, (None, "stdin"))
        try:
            while self.stdin_open or self.runs or self.retry:
                self.serve_once()
        finally:
            self.shutdown()
        return 0

    def preload_paper(self) -> tuple[list[str], dict[str, str]]:
        """Import what the paper's files import, once (unless its runs need a fresh interpreter):
        (the third-party modules imported, those that failed)."""
        preloaded, failed = [], {}
        wanted = list(dict.fromkeys(scan_imports(self.paper) + [m for m in ARGS_PRELOAD if m]))
        unsafe = [m for m in wanted if m in UNSAFE_TO_FORK]
        if unsafe and not self.fresh:
            self.fresh, self.fresh_reason = True, f"{', '.join(unsafe)} is unsafe to fork: a fresh interpreter per run"
        if self.fresh:
            return preloaded, failed
        import threading

        threads = set(threading.enumerate())
        # what imports print (warnings, banners) a fresh run would print too: keep it to replay
        with _Capture() as captured:
            preloaded, failed = preload(wanted, self.paper)
            # the standard library's modules are not reported: they are not what "warm" is about
            preload([m for m in ALWAYS_PRELOAD + tuple(scan_imports(self.paper, stdlib=True))
                     if m not in sys.modules], self.paper)
            # and the submodules they name (scipy.stats, matplotlib.pyplot): no run imports them again
            preload([m for m in scan_submodules(self.paper) if m not in sys.modules], self.paper)
            import_testing()
        self.import_output = tuple(a + b for a, b in zip(self.inherited_output, captured.output))
        os.write(2, captured.output[1])
        # a fork copies only the forking thread (others' locks stay held) and unsafe frameworks
        # may arrive indirectly: then a fresh interpreter per run, as a fresh process would be
        extra = sorted(t.name for t in set(threading.enumerate()) - threads if t.is_alive())
        unsafe = [m for m in UNSAFE_TO_FORK if m in sys.modules]
        if unsafe:
            self.fresh, self.fresh_reason = True, f"{', '.join(unsafe)} is unsafe to fork: a fresh interpreter per run"
        elif extra:
            self.fresh, self.fresh_reason = True, f"preloaded imports left threads running ({', '.join(extra)})"
        return preloaded, failed

    def serve_once(self) -> None:
        """One turn of the loop: requests due, pipes and exits, the disk guard, timeouts, answers."""
        now = time.monotonic()
        waits = [0.05]
        for due, request in list(self.retry):
            if due <= now:
                self.retry.remove((due, request))
                self.start(request)
        for run in self.runs.values():
            waits.append((run.drain_until if run.drain_until is not None else run.deadline) - now)
        for key, _ in self.sel.select(max(0.0, min(waits))):
            run, kind = key.data
            if kind == "stdin":
                self.on_stdin()
            elif kind == "exit":
                self.reap()
            else:
                self.on_data(run, key.fd, kind)
        self.reap()
        now = time.monotonic()
        if now >= self.disk_check_at:
            self.disk_check_at = now + DISK_CHECK_SECONDS
            self.disk_guard()
        for run in list(self.runs.values()):
            if run.status is None and run.pid in self.statuses:
                run.status = self.statuses[run.pid]
                self.on_exit(run)
            elif run.status is None and now >= run.deadline and not run.timed_out:
                run.timed_out = True
                self.kill_tree(run)
                try:
                    os.kill(run.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if run.drain_until is not None and (not any(k in ("out", "err") for k in run.open_fds.values())
                                                or now >= run.drain_until):
                # take what is already in the proof pipe, then answer
                for fd, kind in list(run.open_fds.items()):
                    if kind == "proof":
                        self.on_data(run, fd, kind)
                self.finish(run)

    def shutdown(self) -> None:
        """The server ends: its spare, every run still going, the result folders it kept, the copy
        of the paper it made ahead."""
        self.spare_drop()
        for run in list(self.runs.values()):
            self.kill_tree(run)
            try:
                os.kill(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap()
        for folder in self.finished:
            self.discard(folder)
        self.ahead = None
        self.discard(self.ahead_folder())
