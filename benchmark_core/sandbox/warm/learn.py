"""Import learning (issue 24): the modules a paper's runs import, imported by its server before it
forks the next spare, so that no later run of the paper pays them again. Standard library only.

The run's launcher reports the names its test added to ``sys.modules`` (MAC'd ``M`` lines of the
proof, ``launch._module_reporter``). The server learns only from runs of the paper's own code (its
reference run: every file of the request is the paper's own, ``Server.own_code``): a completion's
imports would make the server hold modules the reference run never loaded, and honest runs' audit
trails would then differ from the reference's (state those modules change at shutdown). Even so
the report is a hint, and a name is learned only when every rule holds, all checked here, in the
server and in a throwaway probe forked from it:

- a dotted name of identifiers, not imported yet, not refused before, at most ``LEARN_MAX`` learned
  per server and ``LEARN_REPORT`` read per run;
- never the paper's own (any .py or folder name of the paper), never ``*_ref``, never a module whose
  import is unsafe to fork (jax...), has visible effects (``NEVER_PRELOAD``) or is one the audit hook
  watches being imported (ctypes, pty...);
- its top-level package is the standard library's, one the server imported already, or one the
  paper's own files import somewhere (even inside a function): a completion cannot make the server
  import a package the paper never names;
- the file of each of its components resolves under the interpreter's library roots (never the
  paper, the runs' folder, a file a run's uid owns, a namespace folder);
- imported in the probe first, one by one: a name whose import printed anything, failed, started a
  thread, or brought in a module unsafe to fork or one whose import the hook reports (ctypes, pty...)
  is refused (its import stays the runs' own, as in a fresh interpreter). The probe is killed after ``LEARN_SECONDS``.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
import time

from .audit import _WATCHED_IMPORTS
from .guard import _library_roots
from .runs import _Capture
from .scan import NEVER_PRELOAD, UNSAFE_TO_FORK

#: modules a server imports by learning, at the most
LEARN_MAX = 256
#: names read from one run's report, at the most (what one import of scipy.stats adds is ~600)
LEARN_REPORT = 4096
#: names refused and remembered (not tried again), at the most: beyond it the server stops learning
REFUSED_MAX = 16384
#: how long the probe may take to import a run's names
LEARN_SECONDS = 10.0
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}$")


def learn_candidates(names, *, own: set[str], named: set[str], known: set[str]) -> list[str]:
    """The names of a run's report worth trying (shallowest first: a package before its submodules)."""
    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    found: list[str] = []
    for name in list(names)[:LEARN_REPORT]:
        if type(name) is not str or name in known or name in sys.modules or not _NAME_RE.match(name):
            continue
        root = name.split(".")[0]
        if (root in own or root.startswith("_rcb_warm") or name.endswith("_ref") or root == "__main__"
                or root in NEVER_PRELOAD or root in UNSAFE_TO_FORK or root in _WATCHED_IMPORTS
                or name in _WATCHED_IMPORTS):
            continue
        if root not in std and root not in sys.modules and root not in named:
            continue
        found.append(name)
    return sorted(dict.fromkeys(found), key=lambda n: n.count("."))


def library_origin(name: str, roots: tuple[str, ...], refused: tuple[str, ...], uids: range | None) -> bool:
    """Whether every component of ``name`` not imported yet is a file under ``roots`` (or built in),
    never under ``refused`` nor owned by a uid of ``uids``. Finding a submodule imports its parents,
    each checked first."""
    import importlib.util

    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(sub)
        except (ImportError, ValueError, AttributeError):
            return False
        if spec is None:
            return False
        if spec.origin in ("built-in", "frozen") and sub in sys.builtin_module_names + tuple(
                getattr(sys, "stdlib_module_names", ())):
            continue
        if not spec.origin or not spec.has_location:
            return False  # a namespace folder: found anywhere on the path
        origin = os.path.realpath(spec.origin)
        if not origin.startswith(roots) or origin.startswith(refused):
            return False
        if uids is not None:
            try:
                if os.stat(origin).st_uid in uids:
                    return False
            except OSError:
                return False
    return True


def import_clean(names: list[str], roots: tuple[str, ...], refused: tuple[str, ...], uids: range | None,
                 *, strict: bool) -> list[str]:
    """Import each name that passes ``library_origin``; return those imported. With ``strict`` (the
    probe) a name whose import printed, failed, started a thread or brought in a module unsafe to
    fork or watched by the hook is left out; without, such a name is only left out when its import failed."""
    import importlib
    import threading

    done: list[str] = []
    for name in names:
        if name in sys.modules:
            continue
        if not library_origin(name, roots, refused, uids):
            continue
        threads = set(threading.enumerate())
        watched = [m for m in _WATCHED_IMPORTS if m not in sys.modules]
        with _Capture() as captured:
            try:
                importlib.import_module(name)
                ok = True
            except BaseException:  # noqa: BLE001 - a module that cannot import is the runs' to fail on
                ok = False
        if not strict:
            if captured.output[0] or captured.output[1]:
                os.write(2, captured.output[0] + captured.output[1])
            if ok:
                done.append(name)
            continue
        extra = [t for t in set(threading.enumerate()) - threads if t.is_alive()]
        # a module unsafe to fork, or one whose import the audit hook reports (ctypes, pty...), stays
        # the runs' own import, as it would be in a fresh interpreter
        unsafe = [m for m in UNSAFE_TO_FORK if m in sys.modules] + [m for m in watched if m in sys.modules]
        if ok and not (captured.output[0] or captured.output[1]) and not extra and not unsafe:
            done.append(name)
    return done


def learn_probe(names: list[str], roots: tuple[str, ...], refused: tuple[str, ...], uids: range | None) -> list[str]:
    """The names a throwaway child forked from here imports cleanly (``import_clean``, strict)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            # nothing of the server's stays open here but the answer's pipe (stdin, the runs' pipes)
            os.closerange(3, w)
            os.closerange(w + 1, 65536)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            data = json.dumps(import_clean(names, roots, refused, uids, strict=True)).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    deadline = time.monotonic() + LEARN_SECONDS
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)  # too slow: nothing is learned from this run
                data = b""
                break
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        clean = json.loads(data or b"[]")
    except ValueError:
        return []
    wanted = set(names)
    return [n for n in clean if type(n) is str and n in wanted] if type(clean) is list else []


def learn_limits(paper: str, work: str, uid_base: int | None) -> tuple[tuple[str, ...], tuple[str, ...], range | None]:
    """(the library roots, the folders never imported from, the run uids whose files are refused)."""
    refused = tuple(os.path.realpath(p).rstrip("/") + "/" for p in (paper, work))
    uids = range(uid_base, uid_base + 1000) if uid_base is not None else None
    return _library_roots(), refused, uids
