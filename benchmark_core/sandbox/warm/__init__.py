"""Warm runner: import a paper's heavy third-party modules once, then fork one child per test run.

Standalone on purpose (standard library only, no ``benchmark_core`` import): the bwrap and docker
backends put this package's folder into their sandbox as ``/rcb/warm.py`` (bwrap binds it read-only,
docker copies it owned by root) and start it with the paper's interpreter, which runs a folder by
its ``__main__.py``. Its rooms: ``scan`` (what a paper imports, the preloads), ``guard`` (library
namespaces), ``audit`` (the run's audit hook), ``launch`` (the test run as ``__main__``), ``proof``
(the proof's reading), ``learn`` (import learning), ``child`` (a run's forked child), ``runs``,
``server`` (one paper's warm server), ``cleanup`` (what runs leave), ``zygote`` (one warm parent per
environment), ``cli``.

PROTOCOL (version 1; extend only compatibly)
    python warm.py --paper DIR --work DIR [--preload m1,m2] [--fresh] [--python PY]
                   [--run-uid-base N]

stdin: one JSON object per line, a run request::

    {"id": str, "files": {relpath: text}, "timeout": float, "memory_mb": int, "output_bytes": int}
    optional: "pids": int (process cap per run, uid mode only), "file_size_mb": int

stdout: first ``{"ready": true, "preloaded": [...], "failed": {...}, "protocol": 1, "uid_mode": bool}``,
then one JSON line per request, in completion order (several requests run at once)::

    {"id", "exit_code", "signal", "timed_out", "stdout", "stderr", "seconds", "truncated", "oom",
     "proof": {"completed": bool, "tests_run": int}}

plus ``"error": str`` when the request itself was unusable (bad id, file outside the folder).
The same object is written to ``WORK/<id>/result.json``; the run's copy of the paper is removed as
soon as the run ends, and a result folder is removed once 64 later runs have ended (or at exit).
Stray output of preloaded modules goes to stderr: stdout carries protocol lines only.

Each run: copy of the paper in WORK/<id>/paper, the files written into it, a forked child that
calls setsid, sets rlimits, drops to its own uid (when the server runs as root: uid
``run-uid-base + slot``, so runs cannot touch each other's folders and every process a run
leaves behind can be found and killed), redirects output to pipes, and runs the test script with
runpy as ``__main__``. When the child ends or times out every process of the run is killed.
With ``--fresh`` (a paper's ``fresh_process: true``) the child execs a fresh interpreter instead.
Otherwise the child is usually forked ahead (a *spare*: ``Server.spare_fork``), does what does not
depend on its run while earlier runs go on, and takes the rest from its request; the answer then
has ``"forked_ahead": true``.

PROOF: the launcher in the child writes, to an inherited close-on-exec pipe that is not one of
fds 0-2, whether the script ran to completion (returned, or exited through unittest / the test
script's own ``sys.exit``) and how many unittest cases started. ``os._exit`` from a completion,
a ``sys.exit`` raised in the completion's code, or a fake "OK" leaves ``completed`` false.
"""
from __future__ import annotations

from .audit import PROOF_EXIT, PROTECTED_MODULES, _install_audit, proof_mac
from .child import HOME_ENV, SPARE_NAME, home_seed, run_home_env
from .cleanup import ipc_remove, remove_tree
from .cli import main
from .common import LIBRARY_GUARD, PROTOCOL, RUNNER, split_lines
from .guard import _library_guard
from .launch import launch, launch_prepare, snapshot_prepare
from .proof import proof_read
from .runs import Bounded, Run
from .scan import (ALWAYS_PRELOAD, AST_LOCK, NEVER_PRELOAD, TESTING_MODULES, UNSAFE_TO_FORK, import_testing, own_names,
                   parent_names, preload, scan_imports, scan_submodules)
from .server import Server
from .zygote import zygote_serve

__all__ = [
    "ALWAYS_PRELOAD", "AST_LOCK", "Bounded", "HOME_ENV", "LIBRARY_GUARD", "NEVER_PRELOAD", "PROOF_EXIT",
    "PROTECTED_MODULES", "PROTOCOL", "RUNNER", "Run", "SPARE_NAME", "Server", "TESTING_MODULES", "UNSAFE_TO_FORK",
    "_install_audit", "_library_guard", "home_seed", "import_testing", "ipc_remove", "launch", "launch_prepare", "main",
    "own_names", "parent_names", "preload", "proof_mac", "proof_read", "remove_tree", "run_home_env", "scan_imports",
    "scan_submodules", "snapshot_prepare", "split_lines", "zygote_serve",
]
