"""Run a child process with bounded output capture and whole-group kill on timeout; the small,
fixed environment every backend gives a test (``child_env``)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .base import SandboxUnavailable
from .warm import run_home_env

__all__ = ["BoundedBuffer", "ProcessOutcome", "child_env", "interpreter_paths", "run_process", "kill_group"]

_PASS_THROUGH_ENV = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TZ")


def child_env(home: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A small, predictable environment: no secrets of the worker leak into the test."""
    env = {k: os.environ[k] for k in _PASS_THROUGH_ENV if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    # HOME, TMPDIR and the cache variables (torch, matplotlib, XDG …) point into the run's own home
    env.update(run_home_env(home))
    env.update(
        {
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": "0",
            # one thread per run: the scorer already runs one test per core
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }
    )
    env.update(extra or {})
    return env


def interpreter_paths(python: str) -> dict[str, Any]:
    """Ask the interpreter (trusted: the operator chose it) where it lives and what it has installed
    (``packages``: a hash of its distributions and versions)."""
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



class BoundedBuffer:
    """Keep the first and last bytes of a stream; count what was dropped in between."""

    def __init__(self, limit: int):
        self.head_limit = limit // 4
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

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


@dataclass
class ProcessOutcome:
    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    truncated: bool


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(stream, buffer: BoundedBuffer) -> None:
    try:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            buffer.feed(chunk)
    except (OSError, ValueError):
        pass


def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    output_bytes: int,
    preexec: Callable[[], None] | None = None,
) -> ProcessOutcome:
    """Start ``argv`` in a new session, keep bounded output, kill the whole group on timeout."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=preexec,
        close_fds=True,
    )
    out, err = BoundedBuffer(output_bytes), BoundedBuffer(output_bytes)
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
    ]
    for t in pumps:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    # the test is over either way: nothing it started may outlive it
    kill_group(proc.pid)
    proc.wait()
    seconds = time.monotonic() - started
    for t in pumps:
        t.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    code = proc.returncode
    sig = -code if code is not None and code < 0 else None
    return ProcessOutcome(
        exit_code=code,
        signal=sig,
        timed_out=timed_out,
        stdout=out.text(),
        stderr=err.text(),
        seconds=seconds,
        truncated=bool(out.dropped or err.dropped),
    )
