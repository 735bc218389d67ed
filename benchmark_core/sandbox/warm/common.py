"""What every room of the warm runner shares: the protocol's constants and a few small helpers."""
from __future__ import annotations

import os
import re
import sys

PROTOCOL = 1
KEEP_RESULTS = 64
RUN_NICE = 10  # niceness of every run (the runner stays at 0)
DISK_CHECK_SECONDS = 0.1
PREPARE_RETRIES = 40  # times a run is prepared again while another run holds the disk
DISK_ALARM = 0.5  # a shared tmpfs this full is checked run by run
DISK_SHARE = 0.35  # what one run may hold of it then
PROOF_BYTES = 4 << 20  # what is kept of a run's proof pipe (stacks of a few hundred audited events)
DRAIN_SECONDS = 2.0
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_IGNORED = ("__pycache__", ".git", ".ipynb_checkpoints")
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: the runner itself: this package's folder (in a sandbox ``/rcb/warm.py``, a folder Python runs by
#: its ``__main__.py``); a frame whose file is under it is the runner's, never the paper's
RUNNER = os.path.dirname(os.path.abspath(__file__))
#: off only with --no-library-guard, for the bench to measure what the guard costs a run
LIBRARY_GUARD = [True]
#: modules named by ``--preload`` (the host's extra imports for every run)
ARGS_PRELOAD: list[str] = []


def is_runner(path: str, runner: str = RUNNER) -> bool:
    """Whether ``path`` is one of the runner's own files (or the runner's folder itself)."""
    return path == runner or path.startswith(runner + "/")


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass
    return 1


def split_lines(buf: bytearray):
    """Take every complete line out of ``buf`` (a stream's bytes as they came), in order and without
    its newline; what follows the last newline stays for the next read. The host's docker transport
    reads the container's stream with it too."""
    while True:
        cut = buf.find(b"\n")
        if cut < 0:
            return
        line = bytes(buf[:cut])
        del buf[:cut + 1]
        yield line
