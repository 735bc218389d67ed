"""What a server keeps of a run: its request's limits, its bounded output, its spare child."""
from __future__ import annotations

import os
import sys


class Bounded:
    """First quarter and last three quarters of a stream; counts what was dropped in between."""

    def __init__(self, limit: int):
        self.head_limit = max(0, limit // 4)
        self.tail_limit = max(0, limit - self.head_limit)
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def feed(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        if len(self.tail) > self.tail_limit:
            cut = len(self.tail) - self.tail_limit
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n... [{self.dropped} bytes omitted] ...\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


class _Capture:
    """Collect what fds 1 and 2 receive inside the block (at most 64 KiB each)."""

    def __enter__(self) -> "_Capture":
        import tempfile

        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.files[0].fileno(), 1)
        os.dup2(self.files[1].fileno(), 2)
        self.output = (b"", b"")
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        data = []
        for fh in self.files:
            fh.seek(0)
            data.append(fh.read(65536))
            fh.close()
        self.output = (data[0], data[1])


class Run:
    def __init__(self, request: dict, folder: str):
        self.id = request["id"]
        self.folder = folder
        self.timeout = float(request.get("timeout") or 60.0)
        self.memory_mb = int(request.get("memory_mb") or 4096)
        self.output_bytes = int(request.get("output_bytes") or 64 * 1024)
        self.file_size_mb = int(request.get("file_size_mb") or 256)
        self.pids = int(request.get("pids") or 512)
        self.threads = max(1, min(64, int(request.get("threads") or 1)))  # BLAS/OpenMP/torch threads
        self.files = request.get("files") or {}
        self.uid: int | None = None
        self.slot: int | None = None
        self.pid = 0
        self.pidfd = -1
        self.started = 0.0
        self.deadline = 0.0
        self.drain_until: float | None = None
        self.status: int | None = None
        self.ended = 0.0
        self.timed_out = False
        self.out = Bounded(self.output_bytes)
        self.err = Bounded(self.output_bytes)
        self.proof = bytearray()
        self.proof_overflow = False
        self.disk_stopped = ""  # why the runner stopped the run for its disk use
        self.open_fds: dict[int, object] = {}
        self.forked_ahead = False  # its child was a spare, forked before the request (Server.spare_fork)
        self.cgroup_procs: list[str] = []  # the cgroup.procs files its child joins (Server.cgroup_prepare)
        self.oom_kills = 0  # its memory cgroup's OOM kills before it started
        self.modules: list[str] = []  # what its test imported, as its proof reports it (learn.py)
        self.own_code = False  # its files are the paper's own (a reference run: Server.own_code)
        self.learned: list[str] = []  # what its child had imported by learning (learn.py)
        self.compiled: list[str] = []  # the paper's files its child held compiled (watch.prepare_plain)


class _Spare:
    """A spare run's child: its pid, the pipe its request goes to, its out, err and proof pipes."""

    def __init__(self, pid: int, control: int, fds: tuple[int, int, int]):
        self.pid, self.control, self.fds = pid, control, fds
        self.learned: list[str] = []  # the server's learned imports when it was forked
        self.compiled: list[str] = []  # the paper's files the server had compiled then (watch.PLAIN)
        self.slot: int | None = None  # the slot it took for its run (uid mode: Server.spare_fork)
        self.joined: list[str] = []  # the cgroup.procs files it joined while it waited
