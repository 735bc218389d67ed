#!/usr/bin/env python3
"""Warm runner: import a paper's heavy third-party modules once, then fork one child per test run.

Standalone on purpose (standard library only, no ``benchmark_core`` import): the bwrap and docker
backends copy this one file into their sandbox and start it with the paper's interpreter.

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

import argparse
import ast
import errno
import fcntl
import io
import json
import os
import random
import re
import resource
import selectors
import shutil
import signal
import stat
import sys
import threading
import time
import traceback

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


# --------------------------------------------------------------------------- import scan

def _module_roots(tree: ast.Module) -> list[str]:
    """First component of each absolute import at module level (also inside top-level try/if)."""
    names: list[str] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.append(node.module.split(".")[0])
        elif isinstance(node, (ast.Try, ast.If)):
            stack[:0] = list(node.body) + [n for h in getattr(node, "handlers", []) for n in h.body] + list(node.orelse)
    return names


def _module_paths(tree: ast.Module) -> list[str]:
    """Dotted names a module's top-level imports may load beyond their first component:
    ``import a.b.c`` gives ``a.b.c``; ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (``c`` may
    be a submodule or a name: the preload tells them apart)."""
    names: list[str] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if "." in alias.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                if "." in node.module:
                    names.append(node.module)
                names += [f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"]
        elif isinstance(node, (ast.Try, ast.If)):
            stack[:0] = list(node.body) + [n for h in getattr(node, "handlers", []) for n in h.body] + list(node.orelse)
    return names


def scan_submodules(paper: str) -> list[str]:
    """The submodules the paper's files import by name (``scipy.stats``, ``matplotlib.pyplot``),
    never its own nor those whose package is never preloaded or unsafe to fork: a test that
    imports ``from scipy import stats`` would otherwise import scipy.stats in every run."""
    own = own_names(paper)
    found: list[str] = []
    for tree in _trees(paper):
        for name in _module_paths(tree):
            root = name.split(".")[0]
            if root in own or root in NEVER_PRELOAD or root in UNSAFE_TO_FORK or name in found:
                continue
            found.append(name)
    return found


def own_names(paper: str) -> set[str]:
    """Every module name the paper itself could provide (any .py stem or folder name inside it)."""
    own: set[str] = set()
    for root, dirs, files in os.walk(paper):
        dirs[:] = [d for d in dirs if d not in _IGNORED]
        own.update(dirs)
        own.update(f[:-3] for f in files if f.endswith(".py"))
        own.update(f.split(".")[0] for f in files if f.endswith((".so", ".pyd")))
    return own


#: frameworks that are unsafe to fork once imported (JAX warns that fork() may deadlock): a paper
#: importing one, directly or through a preloaded module, gets a fresh interpreter per run
UNSAFE_TO_FORK = ("jax", "jaxlib", "flax", "tensorflow")
#: standard modules every run needs (imported once: unittest alone costs tens of milliseconds)
ALWAYS_PRELOAD = ("unittest", "unittest.mock", "runpy", "atexit", "threading", "json", "io", "traceback")
#: standard modules whose import has visible effects (prints, windows): never imported ahead
NEVER_PRELOAD = {"this", "antigravity", "turtle", "turtledemo", "tkinter", "idlelib", "__main__", "site",
                 "pydoc", "webbrowser", "readline", "rlcompleter", "pdb"}


def scan_imports(paper: str, *, stdlib: bool = False) -> list[str]:
    """Top-level modules the paper's files import, never its own: third-party ones, or with
    ``stdlib`` the standard library's (minus those whose import has side effects)."""
    own = own_names(paper)
    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    if stdlib:
        return [m for m in _scan(paper) if m in std and m not in own and m not in NEVER_PRELOAD]
    return [m for m in _scan(paper) if m not in std and m not in own and m != "__future__"]


#: CPython 3.11's ast.parse is not safe in two threads at once (a collection during one parse can
#: switch to another: "SystemError: AST constructor recursion depth mismatch"): the host's threads
#: (sessions opening ahead, completions' flags in runner.run_task) parse one at a time
AST_LOCK = threading.Lock()


def _trees(paper: str):
    """The parsed modules of the paper's files (a broken file is skipped: it breaks its own runs)."""
    for root, dirs, files in os.walk(paper):
        dirs[:] = sorted(d for d in dirs if d not in _IGNORED)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, name), "rb") as fh:
                    source = fh.read()
                with AST_LOCK:
                    tree = ast.parse(source)
            except (SyntaxError, ValueError, OSError, MemoryError, RecursionError):
                continue
            yield tree


def _scan(paper: str) -> list[str]:
    found: list[str] = []
    for tree in _trees(paper):
        for mod in _module_roots(tree):
            if mod and mod not in found:
                found.append(mod)
    return found


def preload(modules: list[str], paper: str) -> tuple[list[str], dict[str, str]]:
    """Import each module once (no tensor op, no call: only the import); report what failed."""
    import importlib
    import importlib.util

    done, failed = [], {}
    paper_real = os.path.realpath(paper)
    for mod in modules:
        try:
            spec = importlib.util.find_spec(mod)
            origin = os.path.realpath(spec.origin) if spec and spec.origin else ""
            if spec is None:
                failed[mod] = "not installed"
                continue
            if origin.startswith(paper_real + os.sep):
                failed[mod] = "belongs to the paper"
                continue
            importlib.import_module(mod)
            done.append(mod)
        except BaseException as exc:  # noqa: BLE001 - a module that cannot import fails in the runs, not here
            failed[mod] = f"{type(exc).__name__}: {exc}"[:300]
    return done, failed


# --------------------------------------------------------------------------- child side

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


# --------------------------------------------------------------------------- proof channel, audit hook
# The test runs in this process together with the completion, so everything here is readable and
# writable by hostile code. What it cannot do without an audited action (PEP 578 hooks cannot be
# removed) is reach the per-run key: it lives only in launch()'s frame and in the hook's closure,
# and frames, gc walks, ctypes and /proc/self/mem are all audited. The hook reports such actions
# on the proof pipe *before* they proceed; every line it writes carries a MAC with that key, so the
# supervisor tells the harness's lines from anything the completion writes there.
# docs/sandboxes.md ("Proof of run") has the threat model.

#: exit code of a run whose audit hook could not report (its proof pipe was closed or replaced)
PROOF_EXIT = 86
#: protected modules whose attributes a completion must not change (plus every ``*_ref`` module
#: and the test script's ``__main__``)
PROTECTED_MODULES = (
    "builtins", "unittest", "unittest.case", "unittest.result", "unittest.runner", "unittest.main",
    "unittest.suite", "unittest.loader", "unittest.util", "unittest.signals", "numpy", "numpy.testing",
    "numpy.testing._private.utils", "torch", "torch.testing", "torch.testing._comparison", "threading", "_thread",
)
#: classes whose special attributes a completion must not write (their plain attributes are compared
#: at every checkpoint); the libraries' own classes set theirs while importing
_PROTECTED_PREFIXES = ("unittest", "numpy.testing", "torch.testing", "builtins", "__main__")
#: audit events reported as they are, with the stack that raised them
_AUDITED = frozenset((
    "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.system", "subprocess.Popen",
    "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "sys._getframe", "sys._current_frames",
    "sys._current_exceptions", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
    "sys.setprofile", "sys.addaudithook", "_thread.start_new_thread", "object.__setattr__",
    "object.__delattr__", "object.__getattr__", "open", "os.listdir", "os.scandir", "import",
    "code.__new__", "compile", "rcb.thread", "rcb.test", "rcb.checkpoint", "rcb.modattr",
))
_FRAME_ATTRS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
_WATCHED_IMPORTS = frozenset(("ctypes", "_ctypes", "_posixsubprocess", "pty"))
_STACK_LIMIT = 20000  # distinct events remembered (so that each is reported once)


def proof_mac(key: bytes, body: bytes) -> bytes:
    """The MAC of one proof line (keyed BLAKE2b, C code the completion cannot patch)."""
    import _blake2

    return _blake2.blake2b(body, key=key, digest_size=16).hexdigest().encode()


class _WatchedModule(__import__("types").ModuleType):
    """A protected module's class during a run: attribute writes are reported before they happen."""

    def __setattr__(self, name, value, _audit=sys.audit):
        _audit("rcb.modattr", self.__name__, name)
        super().__setattr__(name, value)

    def __delattr__(self, name, _audit=sys.audit):
        _audit("rcb.modattr", self.__name__, name)
        super().__delattr__(name)


# --------------------------------------------------------------------------- library namespaces
# A completion can reach any library module's namespace without an audited action (a function's
# __globals__, a module's __dict__, vars(), a class dict taken through mappingproxy comparison), so
# writes there are found by what they leave: CPython bumps a dict's version tag (PEP 509) at every
# change, a value put back included. The guard reads the tags of every library module's and
# library class's dict at each checkpoint (a few thousand 8-byte reads, well under a millisecond
# with torch) and only looks into a dict whose tag moved. docs/sandboxes.md ("Library namespaces").

#: off only with --no-library-guard, for the bench to measure what the guard costs a run
LIBRARY_GUARD = [True]
_DICT_VERSION_OFFSET = 24  # PyDictObject: ob_refcnt, ob_type, ma_used, then ma_version_tag
#: modules whose attributes libraries and tests set and put back as they work (warnings.catch_warnings,
#: contextlib.redirect_stdout): a value written and restored there is not reported (a lasting change is)
_SELF_RESTORING = frozenset(("warnings", "sys"))
#: names a class dict gains by itself (abc caches, copyreg's __slotnames__, typing)
_CLASS_BENIGN = frozenset(("_abc_impl", "__abstractmethods__", "_is_protocol", "__parameters__", "_longMessage",
                           "__orig_bases__", "__slotnames__", "__weakref__", "__annotations__"))


def _dict_version_reader():
    """A function making a reader of a dict's version tag (``reader(d).value``), or None where
    this interpreter's dict layout is not the one known (the guard then compares identities)."""
    try:
        import ctypes
    except Exception:  # noqa: BLE001 - an interpreter without ctypes
        return None
    if sys.implementation.name != "cpython" or not (3, 8) <= sys.version_info[:2] <= (3, 13):
        return None
    make, used_at = ctypes.c_uint64.from_address, ctypes.c_ssize_t.from_address

    def reader(d: dict):
        return make(id(d) + _DICT_VERSION_OFFSET)

    probe = {"x": 1, "y": 2}
    try:
        tag = reader(probe)
        first = tag.value
        probe["z"] = 3
        second = tag.value
        probe["z"] = probe["z"]  # the same value: no change
        third = tag.value
        del probe["z"]
        ok = (used_at(id(probe) + 16).value == 2 and second != first and third == second
              and tag.value != third)
    except Exception:  # noqa: BLE001
        return None
    return reader if ok else None


def _library_roots() -> tuple[str, ...]:
    """Where the interpreter's own library and its site-packages live (never the file system root)."""
    roots = {os.path.realpath(p).rstrip("/") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}
    return tuple(sorted(r + "/" for r in roots if r))


def _library_guard(roots: tuple[str, ...], runner: str, protected: tuple[str, ...] = ()):
    """The library-namespace guard: ``(take, check, busy)``.

    ``take()`` takes in modules and classes not watched yet (every library module of
    ``sys.modules``: under ``roots``, built in, frozen, or a paper's ``*_ref`` module, with the
    classes each defines); ``check(emit, report)`` compares every watched dict whose version tag
    moved with its copy and emits, once per change: ``rcb.attr`` for a function, class, module or
    other callable changed or removed, a builtin's name added to a module (it shadows the
    builtin), a class attribute changed, removed or added over an inherited one; ``rcb.state``
    for a plain value (number, string, bytes, None) changed; ``rcb.rewrite`` for a dict written
    and put back as it was. The keyword defaults of every library module's functions (a dict that
    ``f.__kwdefaults__[name] = x`` changes in place: ``torch.testing.assert_close``'s ``atol``) are
    watched too (any change: ``rcb.attr``), and so are the dicts held by the ``protected`` modules
    (tolerance tables such as torch.testing's dtype precisions; any change: ``rcb.state``).
    Everything it uses is bound here: later rebinding of this module's globals or of builtins does
    not reach it."""
    import builtins as _builtins
    import gc
    import threading as _threading
    from operator import attrgetter

    reader = _dict_version_reader()
    modules = sys.modules
    tstr, ttype, tlen, issub, tid = str, type, len, issubclass, id
    list_, dict_, map_, zip_, range_ = list, dict, map, zip, range
    get_value = attrgetter("value")
    get_ident = _threading.get_ident
    referents = gc.get_referents
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    module_dict = __import__("types").ModuleType.__dict__["__dict__"].__get__
    ModuleType, FunctionType = __import__("types").ModuleType, __import__("types").FunctionType
    type_mod = type.__dict__["__module__"].__get__
    type_qual = type.__dict__["__qualname__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    function_kwdefaults = __import__("types").FunctionType.__dict__["__kwdefaults__"].__get__
    protected_set = frozenset(protected)
    callable_, any_ = callable, any
    builtin_modules = frozenset(sys.builtin_module_names)
    stdlib_names = frozenset(getattr(sys, "stdlib_module_names", ()))
    class_proxy = type.__dict__["__dict__"].__get__
    scalar_types = (int, float, bool, str, bytes, complex, type(None))
    builtin_names = frozenset(module_dict(_builtins))
    self_restoring, class_benign = _SELF_RESTORING, _CLASS_BENIGN
    missing = object()
    # parallel lists: label, the watched dict, its copy, kind ("m" module, "c" class), its tag reader
    labels: list = []
    dicts: list = []
    copies: list = []
    kinds: list = []
    owners: list = []  # the class of a class dict, None for a module's
    readers: list = []
    versions: list = []
    seen_modules: dict = {}  # name -> module object watched under that name
    seen_ids: set = set()  # ids of the dicts watched (a module under two names is watched once)
    classes_seen: set = set()
    busy = [0]  # the thread doing the guard's own audited work (gc, ctypes): the hook ignores it
    sys_tag = [reader(module_dict(modules["sys"])["modules"]) if reader else None, -1]

    def str_keys(d) -> bool:
        """Whether every key of ``d`` is an exact str: only then may it be looked up here (a key
        of another type could run its own __eq__ in our lookup, where the hook looks away)."""
        for key in d:
            if ttype(key) is not tstr:
                return False
        return True

    def is_library(name, module) -> bool:
        if name == "__main__" or not issub(ttype(module), ModuleType):
            return False
        if name.endswith("_ref"):
            return True
        d = module_dict(module)
        if not str_keys(d):
            return True  # watched, and reported at the next comparison
        path = d.get("__file__")
        if path is None:  # built-in and frozen modules of the standard library
            return name in builtin_modules or name.split(".")[0] in stdlib_names
        return ttype(path) is tstr and path != runner and path.startswith(roots)

    def watch(label: str, d, kind: str, owner=None) -> None:
        if tid(d) in seen_ids:
            return
        seen_ids.add(tid(d))
        owners.append(owner)
        labels.append(label)
        dicts.append(d)
        copies.append(dict_(d))
        kinds.append(kind)
        if reader is not None:
            tag = reader(d)
            readers.append(tag)
            versions.append(tag.value)

    def watch_values(label: str, d, inner_dicts: bool) -> None:
        """The keyword defaults of the functions in ``d`` (and with ``inner_dicts`` its dicts)."""
        for key, value in list_(d.items()):
            if ttype(key) is not tstr:
                continue
            if ttype(value) is FunctionType:
                kwd = function_kwdefaults(value)
                if ttype(kwd) is dict:
                    watch(label + "." + key + ".__kwdefaults__", kwd, "k")
            elif inner_dicts and ttype(value) is dict:
                watch(label + "." + key, value, "d")

    def watch_classes(name: str, d) -> None:
        for value in list_(d.values()):
            if not issub(ttype(value), type) or value in classes_seen:
                continue
            try:
                if type_mod(value) != name:
                    continue
                inner = referents(class_proxy(value))
            except Exception:  # noqa: BLE001 - a class without a plain __module__
                continue
            classes_seen.add(value)
            if tlen(inner) == 1 and ttype(inner[0]) is dict:
                watch(name + "." + tstr(type_qual(value)), inner[0], "c", value)

    def take() -> None:
        """Watch every library module (and the classes it defines) not watched yet, as it is now."""
        busy[0] = get_ident()
        # thousands of dict copies would start collections over every object of torch (half a
        # second); nothing here makes cycles
        collecting = gc_enabled()
        gc_disable()
        try:
            for name, module in list_(modules.items()):
                if ttype(name) is not tstr or seen_modules.get(name) is module or not is_library(name, module):
                    continue
                seen_modules[name] = module
                d = module_dict(module)
                watch(name, d, "m")
                watch_classes(name, d)
                watch_values(name, d, name in protected_set)
            if sys_tag[0] is not None:
                sys_tag[1] = sys_tag[0].value
        finally:
            if collecting:
                gc_enable()
            busy[0] = 0

    def diff(index: int, emit) -> None:
        label, d, old, kind = labels[index], dicts[index], copies[index], kinds[index]
        copies[index] = dict_(d)  # (a dict copy hashes nothing)
        if kind in ("k", "d"):  # keyword defaults, a protected module's table: any change counts
            # compared entry by entry in order, by identity: no key of theirs is hashed or compared
            if tlen(d) != tlen(old) or any_(a is not c or b is not e for (a, b), (c, e) in zip_(d.items(), old.items())):
                emit("E", "rcb.attr" if kind == "k" else "rcb.state", label + " changed")
            return
        if not (str_keys(d) and str_keys(old)):
            emit("E", "rcb.attr", label + " given a key that is not a string")
            return
        changed = False
        for key, before in list_(old.items()):
            now = d.get(key, missing)
            if now is before:
                continue
            changed = True
            if ttype(key) is not tstr:
                continue
            if kind == "c":
                if key not in class_benign:
                    emit("E", "rcb.attr", label + "." + key + (" removed" if now is missing else " changed"))
            elif ttype(before) in scalar_types:
                if now is missing or ttype(now) is not ttype(before) or now != before:
                    emit("E", "rcb.state", label + "." + key)
            elif callable_(before) or issub(ttype(before), ModuleType):
                emit("E", "rcb.attr", label + "." + key + (" removed" if now is missing else " changed"))
        for key in list_(d):
            if key in old:
                continue
            changed = True
            if ttype(key) is not tstr:
                continue
            if kind == "m" and key in builtin_names and label != "builtins":
                value = d.get(key)
                if issub(ttype(value), ModuleType) and modules.get(label + "." + key) is value:
                    continue  # the import system binding a submodule to its package (encodings.ascii)
                emit("E", "rcb.attr", label + "." + key + " added")
            elif kind == "c" and key not in class_benign and (
                    (key.startswith("__") and key.endswith("__")) or inherited_key(index, key)):
                emit("E", "rcb.attr", label + "." + key + " added")
        if not changed and label not in self_restoring:
            emit("E", "rcb.rewrite", label)

    def inherited_key(index: int, key) -> bool:
        owner = owners[index]
        if owner is None:
            return False
        return any_(key in class_proxy(b) for b in type_mro(owner)[1:])

    def check(emit, report: bool = True, full: bool = True) -> None:
        """Compare what moved since the last check (``report`` False: take it in silently); with
        ``full`` False only take in modules imported since (and report replaced entries)."""
        if not full:
            pass
        elif reader is not None:
            now = list_(map_(get_value, readers))
            if now != versions:
                for i in range_(tlen(now)):
                    if now[i] != versions[i]:
                        if report:
                            compare(i, emit)
                        else:
                            copies[i] = dict_(dicts[i])
                        versions[i] = now[i]
        else:  # no tags: identities, dict by dict
            for i in range_(tlen(dicts)):
                d, old = dicts[i], copies[i]
                if tlen(d) != tlen(old) or any_(a is not c or b is not e for (a, b), (c, e) in zip_(d.items(), old.items())):
                    if report:
                        compare(i, emit)
                    else:
                        copies[i] = dict_(d)
        if sys_tag[0] is None or sys_tag[0].value != sys_tag[1]:
            if not str_keys(modules):
                emit("E", "rcb.modules", "sys.modules given a key that is not a string")
                sys_tag[1] = sys_tag[0].value if sys_tag[0] is not None else -1
                return
            for name, module in list_(seen_modules.items()):
                if modules.get(name, module) is not module and report:
                    emit("E", "rcb.modules", name + " replaced")
            take()

    def compare(index: int, emit) -> None:
        """One watched dict's comparison: whatever goes wrong in it is reported, never swallowed."""
        busy[0] = get_ident()
        try:
            diff(index, emit)
        except BaseException:  # noqa: BLE001 - a dict made to break the comparison is a patch itself
            emit("E", "rcb.attr", labels[index] + " could not be compared")
        finally:
            busy[0] = 0

    return take, check, busy


def _install_audit(fd: int, key: bytes, script: str, prepared: tuple | None = None, *, prepare: bool = False):
    """Install the run's audit hook writing to ``fd``; return the checkpoint emitter for launch()
    and the function that names the test script (``script`` empty: a pre-forked run's hook is
    installed before its run is known). That function names it once; later calls change nothing,
    so code that reaches it cannot make its own frames pass for the test script's.

    ``prepared``: the snapshot of the protected modules a warm server took before forking
    (``snapshot_prepare``); the first checkpoint then only takes in what changed since (our own
    wrappers, what the fork did) instead of building it again in every run. With ``prepare``
    nothing is installed: the function that builds that snapshot is returned.
    """
    import _blake2
    import _thread
    import faulthandler
    import signal as _signal
    import types

    write, fstat, exit_, dump, getpid = os.write, os.fstat, os._exit, faulthandler.dump_traceback, os.getpid
    pipe, read, close = os.pipe, os.read, os.close
    runner = os.path.abspath(__file__)
    blake = _blake2.blake2b
    modules = sys.modules
    tstr, ttype, tint, tbytes, tlen, sorted_, issub = str, type, int, bytes, len, sorted, issubclass
    list_, callable_, memview = list, callable, memoryview
    # every global this hook needs, bound now: later rebinding of warm.py's globals (reachable from
    # the wrappers installed into unittest) must not change it
    audited, frame_attrs, watched_imports = _AUDITED, _FRAME_ATTRS, _WATCHED_IMPORTS
    protected, prefixes, proof_exit, stack_limit = PROTECTED_MODULES, _PROTECTED_PREFIXES, PROOF_EXIT, _STACK_LIMIT
    watched_class = _WatchedModule
    trusted_roots = tuple(sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, runner) if p}))
    type_mod = type.__dict__["__module__"].__get__

    def safe_mod(cls) -> str:
        try:
            mod = type_mod(cls)
        except Exception:  # noqa: BLE001 - a heap type without __module__
            return "?"
        return mod if ttype(mod) is tstr else "?"
    type_qual = type.__dict__["__qualname__"].__get__
    module_dict = types.ModuleType.__dict__["__dict__"].__get__
    ModuleType, FunctionType = types.ModuleType, types.FunctionType
    getsignal, default_int = _signal.getsignal, _signal.default_int_handler
    signals = [s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP)]
    st = fstat(fd) if not prepare else None
    channel = (st.st_dev, st.st_ino) if st is not None else None
    lock = _thread.RLock()
    state = {"handlers": set(), "returned": False, "started": False}
    script_cell = [script]  # the test script's path: its frames are the harness's, not paper code

    def name_script(path: str) -> None:
        if not script_cell[0]:
            script_cell[0] = path

    def stdio_ids() -> tuple:
        ids = []
        for std in (1, 2):
            try:
                now = fstat(std)
                ids.append((now.st_dev, now.st_ino))
            except OSError:
                ids.append(None)
        return tuple(ids)

    # what decides the published verdict besides the exit code: fds 1 and 2 (the output pipes) and
    # the few functions of sys that end the process or print its errors; sys itself is not watched
    # (tests rebind sys.stdout and friends), these are compared at every checkpoint
    stdio = stdio_ids()
    sys_dict = modules["sys"].__dict__
    sys_watched = ("exit", "excepthook", "displayhook", "audit", "addaudithook", "settrace", "setprofile",
                   "_getframe", "unraisablehook")
    sys_base = {name: sys_dict.get(name) for name in sys_watched}
    sent: set = set()  # events already reported, with their origin
    # module name -> (module, {attr: (value, code)}); protected class -> (label, {attr: (value, code)})
    # (a prepared snapshot is this process's own copy: the server's, inherited by the fork)
    base: dict = prepared[0] if prepared is not None else {}
    classes: dict = prepared[1] if prepared is not None else {}
    # every library module's and class's namespace (_library_guard): the server's, taken before it
    # forked, or this process's own, taken before the hook is in place
    if prepared is not None and len(prepared) > 2:
        library_take, library_check, library_busy = prepared[2]
    elif LIBRARY_GUARD[0]:
        library_take, library_check, library_busy = _library_guard(_library_roots(), runner, protected)
        library_take()
    else:  # --no-library-guard: the bench's "before" (bench/score_speed.py), never a scoring run
        library_take, library_check, library_busy = (lambda: None), (lambda emit, report=True, full=True: None), [0]
    get_ident = _thread.get_ident
    class_dict = type.__dict__["__dict__"].__get__
    import unittest
    unittest_classes = [c for c in (unittest.TestCase, unittest.TestResult, unittest.TextTestResult,
                                    unittest.TextTestRunner, unittest.TestSuite, unittest.TestLoader,
                                    unittest.TestProgram, unittest.FunctionTestCase) if issub(ttype(c), type)]
    #: attributes classes gain on their own while tests run (caches, abc registries)
    benign_new = frozenset(("_abc_impl", "__abstractmethods__", "_is_protocol", "__parameters__",
                            "_longMessage", "__orig_bases__"))

    def put(data: bytes) -> None:
        view = memview(data)
        while view:
            view = view[write(fd, view):]

    def stack_origin() -> tuple:
        """(innermost file outside the runner, whether untrusted code is on the stack) of this thread."""
        r, w = pipe()
        try:
            dump(w, all_threads=False)
            close(w)
            w = -1
            chunks = []
            while True:
                chunk = read(r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            close(r)
            if w >= 0:
                close(w)
        caller, untrusted, importing = "", False, False
        for line in b"".join(chunks).decode("utf-8", "replace").split("\n"):
            start = line.find('File "')
            end = line.rfind('", line ')
            if start < 0 or end <= start:
                continue
            path = line[start + 6:end]
            if path == runner:
                continue
            if not caller:
                caller = path
            if path.startswith("<frozen importlib") and not untrusted:
                importing = True  # a library's own import-time code, below any untrusted frame
            if not (path.startswith(trusted_roots) or path.startswith("<frozen ") or path == script_cell[0]):
                untrusted = True
        return caller or "?", ("P" if untrusted else "") + ("I" if importing else "") or "-"

    def emit(*fields: str, stack: bool = False) -> None:
        try:
            parts = [f.replace("\t", " ").replace("\n", " ")[:400] for f in fields]
            if stack:
                caller, origin = stack_origin()
                parts += [caller[:400], origin]
                key_ = tuple(parts)
                if key_ in sent:
                    return  # reported once already: the supervisor compares kinds, not counts
                if tlen(sent) < stack_limit:
                    sent.add(key_)
            data = "\t".join(parts).encode("utf-8", "backslashreplace")
            # one write of less than PIPE_BUF: atomic, whatever other threads or forked children write
            line = data + b"\t" + blake(data, key=key, digest_size=16).hexdigest().encode() + b"\n"
            with lock:
                now = fstat(fd)
                if (now.st_dev, now.st_ino) != channel:
                    exit_(proof_exit)
                put(line)
                now = fstat(fd)
                if (now.st_dev, now.st_ino) != channel:
                    exit_(proof_exit)
        except BaseException:  # noqa: BLE001 - a report that cannot be made ends the run
            exit_(proof_exit)

    def text(value) -> str:
        if ttype(value) is tstr:
            return value[:200]
        if ttype(value) is tbytes:
            return value[:200].decode("utf-8", "backslashreplace")
        if ttype(value) is tint:
            return "fd:" + tstr(value)
        return "?"

    def snapshot_value(value):
        code = value.__code__ if ttype(value) is FunctionType else None
        return value, code

    def describe(value) -> str:
        kind = ttype(value)
        if kind is FunctionType:
            return "f:" + text(value.__qualname__) + "@" + text(value.__code__.co_filename).rsplit("/", 1)[-1]
        if issub(kind, ModuleType):  # our own _WatchedModule too
            name = module_dict(value).get("__name__")
            return "m:" + (name if ttype(name) is tstr else "?")
        if issub(kind, type):
            mod = safe_mod(value)
            return "c:" + (mod if ttype(mod) is tstr else "?") + "." + text(type_qual(value))
        if callable_(value):
            return "b:" + text(type_qual(kind))
        return ""

    def watched_names() -> list:
        names = [n for n in protected if n in modules]
        names += [n for n in list_(modules) if ttype(n) is tstr and n.endswith("_ref")]
        if "__main__" in modules:
            names.append("__main__")
        return names

    def check_classes(report: bool = True) -> None:
        """Compare the protected classes with their snapshot, reporting each change once; without
        ``report`` (absorb) the snapshot only takes the changes in, as a first sight would."""
        for cls, (label, attrs) in list_(classes.items()):
            current = class_dict(cls)
            for attr, (value, code) in list_(attrs.items()):
                now = current.get(attr, classes)
                if now is classes:
                    if report:
                        emit("E", "rcb.attr", f"{label}.{attr} removed")
                    del attrs[attr]
                elif now is not value or (code is not None and value.__code__ is not code):
                    if report:
                        emit("E", "rcb.attr", f"{label}.{attr} changed")
                    attrs[attr] = snapshot_value(now)
            for attr in current:
                if ttype(attr) is tstr and attr not in attrs and (attr not in benign_new or not report):
                    if report:
                        emit("E", "rcb.attr", f"{label}.{attr} added")
                    attrs[attr] = snapshot_value(current[attr])

    def watch_classes(name: str, items: dict) -> None:
        """Remember the classes a protected module defines (and torch.Tensor), as they are now."""
        for value in list_(items.values()):
            if not issub(ttype(value), type) or value in classes:
                continue
            mod = safe_mod(value)
            if not (mod == name or (name == "torch" and value is items.get("Tensor"))):
                continue
            if name in ("numpy", "torch", "builtins") and value is not items.get("Tensor"):
                continue  # their hundreds of classes: the test machinery is what matters
            label = mod + "." + text(type_qual(value))
            classes[value] = (label, {k: snapshot_value(v) for k, v in list_(class_dict(value).items())
                                      if ttype(k) is tstr})
        for base_cls in unittest_classes:
            if base_cls not in classes:
                classes[base_cls] = (safe_mod(base_cls) + "." + text(type_qual(base_cls)),
                                     {k: snapshot_value(v) for k, v in list_(class_dict(base_cls).items())
                                      if ttype(k) is tstr})

    def absorb() -> None:
        """Take in, without reporting, what changed in the prepared snapshot before any of the
        paper's code ran (the launcher's wrappers, the fork's own resets)."""
        check_classes(report=False)
        for name, (module, attrs) in list_(base.items()):
            if modules.get(name) is not module:
                del base[name]  # seen anew below, as a module first seen
                continue
            current = module_dict(module)
            moved = False
            for attr, (value, code) in list_(attrs.items()):
                now = current.get(attr, base)
                if now is base:
                    del attrs[attr]
                elif now is not value or (code is not None and value.__code__ is not code):
                    attrs[attr] = snapshot_value(now)
                    moved = True
            for attr, now in list_(current.items()):
                if ttype(attr) is tstr and attr not in attrs and describe(now):
                    attrs[attr] = snapshot_value(now)
                    moved = True
            if moved:
                watch_classes(name, current)  # a class defined since is remembered as first seen
            watch(name, module)

    def watch(name: str, module) -> None:
        if ttype(module) is ModuleType and name != "__main__":
            try:
                module.__class__ = watched_class  # eager reports of plain attribute writes
            except TypeError:
                pass

    def first_sight(name: str, module, *, watched: bool = True) -> None:
        """Remember a module (and the classes it defines) as it is now."""
        items = module_dict(module)
        watch_classes(name, items)
        attrs = {k: snapshot_value(v) for k, v in list_(items.items()) if ttype(k) is tstr and describe(v)}
        base[name] = (module, attrs)
        if name == "__main__" or name.endswith("_ref"):
            listing = "\n".join(k + "=" + describe(attrs[k][0]) for k in sorted_(attrs))
            emit("S", name, blake(listing.encode("utf-8", "backslashreplace"), digest_size=16).hexdigest())
        if watched:
            watch(name, module)

    if prepare:
        def snapshot() -> tuple:
            # the modules' class is swapped in the run, after its wrappers are in (absorb)
            for name in protected:
                module = modules.get(name)
                if issub(ttype(module), ModuleType):
                    first_sight(name, module, watched=False)
            return base, classes, (library_take, library_check, library_busy)
        return snapshot

    def checkpoint(where: str) -> None:
        if where == "returned":
            state["returned"] = True  # the script is over: no test starts after this
            return
        if stdio_ids() != stdio:
            emit("E", "rcb.stdio", "fd 1 or 2 replaced")
        for name, value in sys_base.items():
            if sys_dict.get(name) is not value:
                emit("E", "rcb.attr", "sys." + name + " changed")
                sys_base[name] = sys_dict.get(name)
        if where == "test-start":
            # modules the test imported since, taken before the test's own code runs; version tags
            # keep every write, so the namespaces themselves are compared at the end only
            library_check(emit, full=False)
            if "__main__" in base:
                return  # between two tests nothing of the completion's runs: each test's end is checked
        # the launcher's first checkpoint of a run whose snapshot was prepared: nothing to compare
        # yet (once only: a "start" the paper's code raises later is compared like any other)
        first_start = where == "start" and not state["started"]
        prepared_start = first_start and prepared is not None
        state["started"] = True
        if prepared_start:
            absorb()
        else:
            check_classes()
        # the launcher's first checkpoint: its own wrappers went in since the guard's snapshot.
        # A test's end takes in new modules only: a tag moved is kept until the end, so a write
        # made and put back within a test is still seen then, at one comparison per run
        library_check(emit, report=not first_start, full=where != "test")
        for name in watched_names():
            module = modules.get(name)
            if name in base:
                if prepared_start:
                    continue
                old_module, attrs = base[name]
                if module is not old_module and name != "__main__":
                    emit("E", "rcb.modules", f"{name} replaced")
                current = module_dict(old_module)
                for attr, (value, code) in attrs.items():
                    now = current.get(attr, base)
                    if now is base:
                        emit("E", "rcb.attr", f"{name}.{attr} removed")
                    elif now is not value or (code is not None and value.__code__ is not code):
                        emit("E", "rcb.attr", f"{name}.{attr} changed")
                        attrs[attr] = snapshot_value(now)  # report each change once
                continue
            if not issub(ttype(module), ModuleType):
                continue
            if name == "__main__" and where not in ("test", "test-start"):
                continue  # the test script's namespace, from its first test on (at the end it is ours again)
            first_sight(name, module)
        for sig in signals:
            handler = getsignal(sig)
            if callable_(handler) and handler is not default_int and sig not in state["handlers"]:
                state["handlers"].add(sig)
                emit("E", "rcb.signal-handler", tstr(tint(sig)))

    def hook(event, args) -> None:
        if event not in audited and not event.startswith("ctypes."):
            return
        if library_busy[0] and library_busy[0] == get_ident():
            return  # the library guard's own reads (gc.get_referents, ctypes), in this thread only
        try:
            detail = describe_event(event, args)
        except Exception:  # noqa: BLE001 - an odd argument (a type without __module__): still reported
            detail = "?"
        if detail is not None:
            emit("E", event, detail, stack=True)

    def special_write(target, attr, value):
        """The detail of a write to ``__class__`` (any object: our own module swap excepted) or to
        a library function's ``__code__``, ``__defaults__`` or ``__kwdefaults__``; None otherwise."""
        if attr == "__class__":
            if value is watched_class:
                return None
            cls = ttype(target)
            return "class:" + safe_mod(cls) + "." + text(type_qual(cls))
        if ttype(target) is FunctionType and attr in ("__code__", "__defaults__", "__kwdefaults__"):
            filename = text(target.__code__.co_filename)
            if filename.startswith(trusted_roots) and filename != runner or filename.endswith("_ref.py"):
                return "func:" + text(target.__qualname__) + "@" + filename.rsplit("/", 1)[-1] + "." + attr
        return None

    def describe_event(event, args):
        """The detail reported for an audited event, or None when it is not worth reporting."""
        detail = ""
        if event == "object.__getattr__":
            if tlen(args) < 2 or ttype(args[1]) is not tstr or args[1] not in frame_attrs:
                return None
            detail = args[1]
        elif event == "object.__setattr__" or event == "object.__delattr__":
            target = args[0] if args else None
            if tlen(args) < 2:
                return None
            if not issub(ttype(target), type):
                return special_write(target, args[1], args[2] if tlen(args) > 2 else None)
            mod = safe_mod(target)
            if not (mod.startswith(prefixes) or mod.endswith("_ref")):
                return None
            detail = mod + "." + text(type_qual(target)) + "." + text(args[1])
        elif event == "open":
            path = args[0] if args else None
            if ttype(path) is tint:
                detail = "fd"
            else:
                path = text(path)
                if path.startswith("/dev/fd") or (path.startswith("/proc/") and (
                        "/mem" in path or "/fd" in path or "/map_files" in path or "/environ" in path)):
                    detail = path
                else:
                    return None
        elif event == "os.listdir" or event == "os.scandir":
            path = text(args[0]) if args else "?"
            if not (path.startswith("/proc/") and path.endswith("/fd")):
                return None
            detail = path
        elif event == "import":
            name = args[0] if args else None
            if ttype(name) is not tstr or name not in watched_imports:
                return None
            detail = name
        elif event == "os.kill" or event == "os.killpg":
            pid = args[0] if args else None
            detail = "self" if pid == getpid() else "other"
            if tlen(args) > 1 and args[1] == 0:
                return  # signal 0 only asks whether a process exists
        elif event == "rcb.test":
            # anyone may call sys.audit("rcb.test") or our startTest wrapper: a start counts only
            # while the script runs and with no paper code on the stack (the runner starts tests)
            _caller, origin = stack_origin()
            if state["returned"] or "P" in origin:
                emit("E", "rcb.test-spoof", text(args[0] if args else "?"), stack=True)
            else:
                emit("T", text(args[0] if args else "?"))
            return None
        elif event == "rcb.checkpoint":
            checkpoint(text(args[0] if args else "?"))
            return None
        elif event == "compile" or event == "code.__new__":
            # code under a library's (or the import system's) name: its frames would pass for library code
            name = text(args[1]) if tlen(args) > 1 else "?"
            spoofed = name.startswith(trusted_roots) or name.startswith("<frozen")
            if event == "compile" and not spoofed:
                return None
            detail = ("spoof:" + name) if spoofed else ""
        elif event == "rcb.modattr":
            detail = text(args[0] if args else "?") + "." + text(args[1] if tlen(args) > 1 else "?")
        elif event in ("os.exec", "os.posix_spawn", "os.spawn", "os.system", "pty.spawn"):
            detail = text(args[0] if args else "?")
        return detail

    sys.addaudithook(hook)
    return checkpoint, name_script


#: the testing modules of protected libraries, imported with them so that their snapshot is taken
#: before any of the paper's code runs
TESTING_MODULES = (("numpy", "numpy.testing"), ("torch", "torch.testing"))


def import_testing() -> None:
    """Import the testing module of every protected library already imported (TESTING_MODULES).

    Every run has them: a warm server imports them once before forking (what they print is replayed
    with the other imports' output), instead of each run importing them again (numpy.testing alone
    costs a run tens of milliseconds)."""
    for parent, child in TESTING_MODULES:
        if parent in sys.modules and child not in sys.modules:
            try:
                __import__(child)
            except Exception:  # noqa: BLE001 - it fails the same way in the test
                pass


def snapshot_prepare() -> tuple:
    """The snapshot of the protected modules imported here, as a run's first checkpoint would take
    it: a warm server takes it once, before forking its runs (each run then only takes in what
    changed since, see ``_install_audit``). Call it after the preloads and ``import_testing``."""
    return _install_audit(-1, b"", "", prepare=True)()


def launch(script: str, proof_fd: int, prepared: tuple | None = None) -> None:
    """Run ``script`` as __main__ in this process, write the proof, and exit like ``python script``."""
    launch_prepare(proof_fd, prepared)(script)


def launch_prepare(proof_fd: int, prepared: tuple | None = None):
    """The part of ``launch`` that does not depend on which run this is: the proof's key, the audit
    hook, the wrappers and the first checkpoint. Return ``go(script)``, which runs the script, writes
    the proof's last line and exits like ``python script`` (once: it never returns). A warm server's
    spare run does this while it waits for its request (``Server.spare_fork``).

    Proof lines (each but the first ends in its MAC): ``K <key>`` first, before any of the paper's
    code runs; ``T start|skip`` per test case; ``S <module> <digest>`` (a protected module as first
    seen); ``E <event> <detail>`` per audited action, most followed by the Python stack and ``X``;
    ``F <completed> <exit code>`` last.
    """
    import atexit
    import threading
    import unittest.result

    # everything used once the paper's code has run is bound now: it may rebind any global or
    # module attribute it can reach (os.write, this module's functions) but not these locals
    write, exit_, mac, audit, getpid = os.write, os._exit, proof_mac, sys.audit, os.getpid
    main_file = getattr(sys.modules.get("unittest.main"), "__file__", None) or ""
    key = os.urandom(32)
    try:
        os.write(proof_fd, b"K " + key.hex().encode() + b"\n")
    except OSError:
        os._exit(PROOF_EXIT)
    import_testing()  # a warm server did it before forking; a fresh interpreter does it here
    checkpoint, name_script = _install_audit(proof_fd, key, "", prepared)
    original_start = unittest.result.TestResult.startTest
    original_stop = unittest.result.TestResult.stopTest
    original_skip = unittest.result.TestResult.addSkip

    def start_test(self, test):  # counts every case any runner starts
        audit("rcb.test", "start")
        audit("rcb.checkpoint", "test-start")
        return original_start(self, test)

    def stop_test(self, test):
        audit("rcb.checkpoint", "test")
        return original_stop(self, test)

    def add_skip(self, test, reason):
        audit("rcb.test", "skip")
        return original_skip(self, test, reason)

    unittest.result.TestResult.startTest = start_test
    unittest.result.TestResult.stopTest = stop_test
    unittest.result.TestResult.addSkip = add_skip
    # CPython 3.11 has no audit event for a new thread: the one way threads start reports itself
    import _thread

    original_thread = _thread.start_new_thread

    def start_new_thread(function, args, kwargs=None):
        audit("rcb.thread")
        return original_thread(function, args, kwargs or {})

    _thread.start_new_thread = threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]
    checkpoint("start")  # the snapshot of the test machinery, our wrappers in place
    gone = []

    def go(script: str) -> None:
        if gone:
            exit_(PROOF_EXIT)  # a second start of the same run: only paper code would make one
        gone.append(True)
        script = os.path.abspath(script)
        name_script(script)
        sys.argv = [os.path.basename(script)]
        sys.path[0] = os.path.dirname(script)
        completed, code = False, 0
        try:
            import runpy

            runpy.run_path(script, run_name="__main__")
            completed = True
        except SystemExit as exc:
            code = _exit_code(exc)
            # a SystemExit counts as completion only when raised by unittest or the test script itself
            # (the innermost frame only: each frame taken from a traceback is an audited event)
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            where = tb.tb_frame.f_code.co_filename if tb is not None else ""
            completed = where == script or where == main_file or where.endswith("/unittest/main.py")
        except BaseException as exc:  # noqa: BLE001 - print it the way the interpreter would, then exit 1
            # from the script's own frame on, as `python script` shows it (runpy's frames are ours)
            tb = exc.__traceback__
            while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) != os.path.realpath(script):
                tb = tb.tb_next
            traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        audit("rcb.checkpoint", "returned")
        # like interpreter shutdown: wait for non-daemon threads, run atexit handlers, flush
        try:
            threading._shutdown()  # type: ignore[attr-defined]
        except BaseException:  # noqa: BLE001
            pass
        try:
            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                code = code or 120  # what the interpreter reports when it cannot flush stdout
        audit("rcb.checkpoint", "end")
        body = f"F\t{int(completed)}\t{code}\t{getpid()}".encode()
        try:
            write(proof_fd, body + b"\t" + mac(key, body) + b"\n")
        except OSError:
            pass
        exit_(code)

    return go


def proof_read(data: bytes, *, paper_dir: str, test_script: str, runner: str, pid: int,
               trusted: tuple[str, ...] = ()) -> dict:
    """The supervisor's reading of a run's proof pipe: what the authenticated lines say.

    Lines without a valid MAC (the completion's own writes) are counted as ``forged``; each event
    keeps its innermost caller outside the runner (``paper`` for any file that is not the
    interpreter's own library, the test script or the runner) and whether paper code was on the stack.
    """
    import hmac

    out: dict = {"completed": False, "tests_run": 0, "skipped": 0, "authentic": False, "forged": 0,
                 "events": [], "snapshots": {}, "overflow": False, "forged_sample": []}
    lines = data.split(b"\n")
    if not lines or not lines[0].startswith(b"K "):
        out["forged"] = int(bool(data.strip()))
        return out
    try:
        key = bytes.fromhex(lines[0][2:].decode())
    except ValueError:
        out["forged"] = 1
        return out
    roots = tuple(r.rstrip("/") + "/" for r in trusted if r)
    prefix = paper_dir.rstrip("/") + "/"

    def role(path: str) -> str:
        if path == runner:
            return "runner"
        if path == prefix + test_script:
            return "test"
        if path.startswith("<frozen "):
            return "std:" + path[8:-1]
        if "/site-packages/" in path and path.startswith(roots):
            return "lib:" + path.split("site-packages/", 1)[1].split("/", 1)[0]
        if path.startswith(roots):
            rest = path.rsplit("/", 2)
            return "std:" + (rest[-2] + "/" + rest[-1] if rest[-1] == "__init__.py" else rest[-1])
        return "paper"  # the paper's files, and anything a run wrote and imported or compiled

    events: dict[tuple, dict] = {}
    finished = False
    for raw in lines[1:]:
        if not raw:
            continue
        body, _, mac = raw.rpartition(b"\t")
        if not body or not hmac.compare_digest(mac, proof_mac(key, body)):
            out["forged"] += 1
            if len(out["forged_sample"]) < 3:
                out["forged_sample"].append(raw[:200].decode("utf-8", "replace"))
            continue
        parts = body.decode("utf-8", "replace").split("\t")
        kind = parts[0]
        if finished:
            out["forged"] += 1  # nothing authentic follows the final line
        elif kind == "T":
            if parts[1:2] == ["start"]:
                out["tests_run"] += 1
            elif parts[1:2] == ["skip"]:
                out["skipped"] += 1
        elif kind == "S" and len(parts) == 3:
            out["snapshots"].setdefault(parts[1], parts[2])
        elif kind == "E" and len(parts) >= 3:
            detail = re.sub(r"/proc/\d+", "/proc/N", parts[2]).replace(paper_dir, "PAPER")
            caller = parts[3] if len(parts) > 3 else ""
            origin = parts[4] if len(parts) > 4 else ""
            event = {"event": parts[1], "detail": detail, "caller": role(caller) if caller and caller != "?" else "?",
                     "paper": "P" in origin, "importing": "I" in origin}
            key_ = (event["event"], event["detail"], event["caller"], event["paper"], event["importing"])
            if key_ in events:
                events[key_]["count"] += 1
            elif len(events) < 500:
                events[key_] = {**event, "count": 1}
            else:
                out["overflow"] = True
        elif kind == "F" and len(parts) == 4:
            if parts[3] != str(pid):
                out["forged"] += 1  # a forked copy of the run reached the end of the test
                continue
            out["completed"] = parts[1] == "1"
            out["authentic"] = True
            finished = True
    out["events"] = list(events.values())
    return out


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
    return run


def _child(server: "Server", fds: tuple[int, int, int], control: int) -> None:
    """In the forked child: isolate, take the run's request, then run the test (never returns).

    What does not depend on the run comes first: its session, descriptors, signals, fresh standard
    streams, and (warm) the proof's key, the audit hook and its first checkpoint. The request is then
    read from ``control`` (a spare, forked before its request, waits there: ``Server.spare_fork``);
    the limits, the uid, the folder and the home follow, and the test starts.
    """
    code = 127
    try:
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
        run = _spare_request(control)
        if run is None:
            code = 0
            return
        if name:
            _name(name)  # named as the server is, as a child forked for its run would be
        # into the run's own cgroups (memory, pids: Server.cgroup_prepare) while still root
        for procs in run.cgroup_procs:  # (os calls: no codec is imported after the snapshot)
            cg = os.open(procs, os.O_WRONLY)
            try:
                os.write(cg, str(os.getpid()).encode())
            finally:
                os.close(cg)
        mem = run.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        size = run.file_size_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        if run.uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (run.pids, run.pids))
            os.setgroups([])
            os.setresgid(run.uid, run.uid, run.uid)
            os.setresuid(run.uid, run.uid, run.uid)
        paper_dir = os.path.join(run.folder, "paper")
        os.chdir(paper_dir)
        _run_env(run, server)
        script = os.path.join(paper_dir, server.test_script)
        if go is None:
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


# --------------------------------------------------------------------------- server side

def _disk_full(exc: BaseException) -> bool:
    """Whether preparing a run failed for want of disk (shutil.copytree gathers its errors)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left" in str(exc) or "Disk quota" in str(exc)


def remove_tree(path: str) -> None:
    """Delete a file or folder tree iteratively, one directory fd at a time.

    A run may leave a folder chain thousands deep (``shutil.rmtree`` recurses and its paths grow
    past PATH_MAX), read-only or unreadable folders, and symlinks anywhere: this walks down by
    name relative to the current folder's fd, never follows a link, and climbs back with "..".
    """
    parent, name = os.path.split(os.path.abspath(path))
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top_parent = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        try:
            os.unlink(name, dir_fd=top_parent)
            return
        except IsADirectoryError:
            pass
        except OSError as exc:
            if exc.errno != errno.EISDIR and exc.errno != errno.EPERM:
                return
        try:
            os.chmod(name, 0o700, dir_fd=top_parent, follow_symlinks=True)
            cur = os.open(name, flags, dir_fd=top_parent)
        except OSError:
            return
        depth = 0
        while True:
            subdir = None
            try:
                with os.scandir(cur) as entries:
                    for entry in entries:
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                subdir = subdir or entry.name
                            else:
                                os.unlink(entry.name, dir_fd=cur)
                        except OSError:
                            pass
            except OSError:
                pass
            if subdir is not None:
                try:
                    os.chmod(subdir, 0o700, dir_fd=cur)
                    child = os.open(subdir, flags, dir_fd=cur)
                except OSError:
                    child = -1
                if child >= 0:
                    os.close(cur)
                    cur, depth = child, depth + 1
                    continue
                try:  # cannot enter it: it may still be empty
                    os.rmdir(subdir, dir_fd=cur)
                    continue
                except OSError:
                    break  # not removable at all: leave the rest rather than loop
            if depth == 0:
                os.close(cur)
                cur = -1
                try:
                    os.rmdir(name, dir_fd=top_parent)
                except OSError:
                    pass
                return
            me = os.fstat(cur)
            up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            os.close(cur)
            cur, depth = up, depth - 1
            try:
                with os.scandir(cur) as entries:
                    for entry in entries:
                        if entry.inode() == me.st_ino and entry.is_dir(follow_symlinks=False):
                            os.rmdir(entry.name, dir_fd=cur)
                            break
            except OSError:
                pass
        if cur >= 0:
            os.close(cur)
    finally:
        os.close(top_parent)


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


def _kill_until_gone(find, reap, *, rounds: int) -> None:
    """SIGKILL every pid ``find()`` lists, reaping after, until it lists none (at most ``rounds`` times)."""
    for _ in range(rounds):
        pids = find()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        time.sleep(0.002)


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


def _reap_any() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _proc_entries() -> list[tuple[int, int, int, int, int, str]]:
    """(pid, ppid, pgid, sid, uid, state) of every visible process."""
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2:].split()
            with open(f"/proc/{name}/status", "rb") as fh:
                uid_line = next(ln for ln in fh.read().decode(errors="replace").splitlines() if ln.startswith("Uid:"))
            rows.append((int(name), int(fields[1]), int(fields[2]), int(fields[3]), int(uid_line.split()[1]), fields[0]))
        except (OSError, ValueError, StopIteration, IndexError):
            continue
    return rows


class _Spare:
    """A spare run's child: its pid, the pipe its request goes to, its out, err and proof pipes."""

    def __init__(self, pid: int, control: int, fds: tuple[int, int, int]):
        self.pid, self.control, self.fds = pid, control, fds


def _cgroup_dirs(spec: str) -> dict[str, str]:
    """``--cgroups v1:/root`` or ``v2:/root`` -> the folders runs' cgroups are made in, by kind."""
    version, _, root = spec.partition(":")
    if not root:
        return {}
    names = ("memory", "pids") if version == "v1" else ("unified",) if version == "v2" else ()
    return {name: os.path.join(root, name) for name in names if os.path.isdir(os.path.join(root, name))}


def _cgroup_write(path: str, name: str, value: str, *, optional: bool = False) -> None:
    try:
        with open(os.path.join(path, name), "w", encoding="ascii") as fh:
            fh.write(value)
    except OSError:
        if not optional:
            raise


def _cgroup_oom_kills(path: str, kind: str) -> int:
    """The OOM kills a memory cgroup has counted (v1 memory.oom_control, v2 memory.events)."""
    try:
        with open(os.path.join(path, "memory.oom_control" if kind == "memory" else "memory.events"),
                  encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


#: the SysV IPC tables (/proc/sysvipc) and the ipcrm option removing an entry of each
_SYSV_TABLES = (("shm", "-m"), ("msg", "-q"), ("sem", "-s"))


def ipc_remove(uid: int) -> int:
    """Remove every SysV IPC object of this IPC namespace that ``uid`` created or owns (a run's
    leftovers: memory beyond its limits, a channel to the next run); return how many were found.
    Reading the tables costs microseconds; ``ipcrm`` runs, as ``uid``, only when something is there
    (call it once the run's processes are gone: none of them can make another meanwhile)."""
    doomed: list[str] = []
    for table, option in _SYSV_TABLES:
        try:
            with open(f"/proc/sysvipc/{table}", encoding="ascii") as fh:
                header = fh.readline().split()
                rows = [line.split() for line in fh]
        except OSError:
            continue
        try:
            ident, owner, creator = header.index("shmid" if table == "shm" else "msqid" if table == "msg" else "semid"), \
                header.index("uid"), header.index("cuid")
        except ValueError:
            continue
        for row in rows:
            if len(row) > max(ident, owner, creator) and str(uid) in (row[owner], row[creator]):
                doomed += [option, row[ident]]
    if doomed:
        ipcrm = shutil.which("ipcrm") or "/usr/bin/ipcrm"
        try:
            pid = os.fork()
        except OSError:
            return len(doomed) // 2
        if pid == 0:
            try:
                os.closerange(3, 65536)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 1)
                os.dup2(null, 2)
                # the creator may remove what it made (the runner has no CAP_SYS_ADMIN to do it)
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.execv(ipcrm, [ipcrm, *doomed])
            finally:
                os._exit(127)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return len(doomed) // 2


class Server:
    def __init__(self, args: argparse.Namespace):
        self.paper = os.path.abspath(args.paper)
        self.work = os.path.abspath(args.work)
        self.fresh = bool(args.fresh)
        self.python = args.python or sys.executable
        self.self_path = os.path.abspath(__file__)
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
        self.import_output: tuple[bytes, bytes] = (b"", b"")
        self.disk_check_at = 0.0
        self.retry: list[tuple[float, dict]] = []  # runs that could not be prepared on a full disk
        self.fresh_reason = "fresh_process" if self.fresh else ""
        #: the protected modules' snapshot every run's first checkpoint starts from (snapshot_prepare)
        self.prepared: tuple | None = None
        #: what the warm parent printed importing the environment's modules (zygote_serve): replayed too
        self.inherited_output: tuple[bytes, bytes] = (b"", b"")
        #: forked by a warm parent: other papers' servers share the sandbox
        self.shared = False
        #: the next run's child, forked ahead and waiting for its request (spare_fork), or None
        self.spare: _Spare | None = None
        #: the sandbox's cgroup folders ("v1" memory and pids, or "v2" unified), uid mode only
        self.cgroups = _cgroup_dirs(getattr(args, "cgroups", "") or "") if self.uid_base is not None else {}

    # -- helpers
    def send(self, obj: dict) -> None:
        data = (json.dumps(obj) + "\n").encode()
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
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.runs:
                self.statuses[pid] = status
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
        try:
            self.discard(folder)
            run = Run(request, folder)
            os.makedirs(folder)
            paper_copy = os.path.join(folder, "paper")
            shutil.copytree(self.paper, paper_copy, symlinks=True, ignore=shutil.ignore_patterns(*_IGNORED, "*.pyc"))
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
            os.makedirs(os.path.join(folder, "home"))
        except (OSError, ValueError, TypeError, AttributeError, shutil.Error) as exc:
            self.discard(folder)
            tries = int(request.get("_tries") or 0)
            if _disk_full(exc) and tries < PREPARE_RETRIES and (self.runs or tries == 0):
                # another run filled the disk: the guard stops it and its folder goes; try again then
                self.retry.append((time.monotonic() + 0.3, {**request, "_tries": tries + 1}))
                self.active_ids.add(rid)
                return
            self.bad_request(rid, f"cannot prepare run {rid}: {exc}")
            return
        if self.uid_base is not None:
            slot = 0
            while slot in self.slots:
                slot += 1
            self.slots.add(slot)
            run.slot, run.uid = slot, self.uid_base + slot
            for root, dirs, files in os.walk(folder):
                for name in dirs + files:
                    os.lchown(os.path.join(root, name), run.uid, run.uid)
            os.chown(folder, run.uid, run.uid)
            os.chmod(folder, 0o700)
            self.cgroup_prepare(run)
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
        pid, (out_r, err_r, proof_r) = child.pid, child.fds
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
        self.spare_fork()  # the next run's child, while this one runs

    # -- the run's cgroups (--cgroups: folders the host made for this sandbox, see sandbox/cgroups.py)
    def cgroup_prepare(self, run: Run) -> None:
        """Make (once per uid) and set the run's memory and pids cgroups; its child joins them."""
        run.cgroup_procs = []
        for kind, root in self.cgroups.items():
            path = os.path.join(root, f"run-{run.uid}")
            try:
                os.makedirs(path, exist_ok=True)
                if kind in ("memory", "unified"):
                    limit = str(run.memory_mb * 1024 * 1024)
                    if kind == "memory":
                        _cgroup_write(path, "memory.limit_in_bytes", limit)
                        # no swap beyond the limit, where the kernel accounts swap
                        _cgroup_write(path, "memory.memsw.limit_in_bytes", limit, optional=True)
                    else:
                        _cgroup_write(path, "memory.max", limit)
                        _cgroup_write(path, "memory.swap.max", "0", optional=True)
                        _cgroup_write(path, "memory.oom.group", "1", optional=True)
                    run.oom_kills = _cgroup_oom_kills(path, kind)
                if kind in ("pids", "unified"):
                    _cgroup_write(path, "pids.max", str(run.pids + 8), optional=kind == "unified")
            except OSError as exc:
                # the host made the folders: a failure here is the environment's, said where it shows
                print(f"[warm] run cgroup {path} not usable: {exc}", file=sys.stderr, flush=True)
                continue
            run.cgroup_procs.append(os.path.join(path, "cgroup.procs"))

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
    def child_fork(self) -> _Spare:
        """A run's child, waiting for its request (``_child``); raises OSError when it cannot fork."""
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
            _child(self, (out_w, err_w, proof_w), ctl_r)
        for fd in (out_w, err_w, proof_w, ctl_r):
            os.close(fd)
        return _Spare(pid, ctl_w, (out_r, err_r, proof_r))

    def spare_fork(self) -> None:
        """Fork the next run's child now, unless the runs are fresh interpreters or one is waiting."""
        if self.fresh or self.spare is not None or not self.stdin_open:
            return
        try:
            self.spare = self.child_fork()
        except OSError:
            pass  # no spare: the next run forks when it comes

    def spare_give(self, run: Run, spare: "_Spare | None" = None) -> "_Spare | None":
        """Hand ``run`` to ``spare`` (default: the waiting spare); None when there is none or it is
        gone (the run then forks its own)."""
        if spare is None:
            spare, self.spare = self.spare, None
        if spare is None:
            return None
        request = {"folder": run.folder, "uid": run.uid, "memory_mb": run.memory_mb,
                   "file_size_mb": run.file_size_mb, "pids": run.pids, "cgroups": run.cgroup_procs}
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

    def on_data(self, run: Run, fd: int, kind: str) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(fd)
            os.close(fd)
            run.open_fds.pop(fd, None)
            return
        if kind == "out":
            run.out.feed(data)
        elif kind == "err":
            run.err.feed(data)
        elif len(run.proof) < PROOF_BYTES:
            run.proof += data
        else:
            run.proof_overflow = True

    def on_exit(self, run: Run) -> None:
        if run.pidfd >= 0:
            self.sel.unregister(run.pidfd)
            os.close(run.pidfd)
            run.pidfd = -1
        run.ended = time.monotonic()
        self.kill_tree(run)
        run.drain_until = time.monotonic() + DRAIN_SECONDS

    def finish(self, run: Run) -> None:
        for fd in list(run.open_fds):
            self.sel.unregister(fd)
            os.close(fd)
        run.open_fds.clear()
        status = run.status if run.status is not None else 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = -sig if sig is not None else os.WEXITSTATUS(status)
        proof = proof_read(bytes(run.proof), paper_dir=os.path.join(run.folder, "paper"),
                           test_script=self.test_script, runner=self.self_path, pid=run.pid,
                           trusted=(sys.prefix, sys.base_prefix, sys.exec_prefix))
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
        }
        del self.runs[run.pid]
        self.statuses.pop(run.pid, None)
        self.active_ids.discard(run.id)
        if run.slot is not None:
            self.slots.discard(run.slot)
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
        # the run owned this folder: whatever it left under that name must not redirect our write
        target = os.path.join(run.folder, "result.json")
        self.discard(target)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(result, fh)
        except OSError:
            pass
        self.send(result)
        self.finished.append(run.folder)
        while len(self.finished) > KEEP_RESULTS:
            self.discard(self.finished.pop(0))

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
        except (OSError, AttributeError):
            pass
        os.makedirs(self.work, exist_ok=True)
        if self.uid_base is not None:
            os.chmod(self.work, 0o711)
        for var in _THREAD_ENV:
            os.environ.setdefault(var, "1")
        preloaded, failed = [], {}
        wanted = list(dict.fromkeys(scan_imports(self.paper) + [m for m in ARGS_PRELOAD if m]))
        unsafe = [m for m in wanted if m in UNSAFE_TO_FORK]
        if unsafe and not self.fresh:
            self.fresh, self.fresh_reason = True, f"{', '.join(unsafe)} is unsafe to fork: a fresh interpreter per run"
        if not self.fresh:
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
        if not self.fresh:
            self.prepared = snapshot_prepare()  # once, rather than in every run (_install_audit)
        # a preloaded module may have installed handlers; the server's own are set after
        self.send({"ready": True, "protocol": PROTOCOL, "preloaded": preloaded, "failed": failed,
                   "fresh": self.fresh, "fresh_reason": self.fresh_reason, "uid_mode": self.uid_base is not None})
        self.spare_fork()
        os.set_blocking(0, False)
        self.sel.register(0, selectors.EVENT_READ, (None, "stdin"))
        try:
            while self.stdin_open or self.runs or self.retry:
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
        finally:
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
        return 0


# --------------------------------------------------------------------------- one warm parent per environment
# ``--zygote``: the environment's modules (the first paper's third-party imports, torch say, or
# ``--modules``) are imported once; then, per request, a paper's Server is forked from it and serves
# that paper as a standalone runner would (own work folder, own run uid block, its own imports on
# top). A paper that does not import everything the parent imported gets ``{"ok": false}`` (a fresh
# interpreter would not hold those modules): the host starts a standalone runner for it.
#
# Two ways to reach it. bwrap (``--control-fd``): requests on a SOCK_SEQPACKET socket, each with two
# descriptors (the server's protocol socket and a stderr pipe) that the server uses directly.
# docker (``--mux``): the container has one stream, the parent's stdin/stdout; every line carries a
# tag before a tab — empty for the parent itself (JSON: ``{"op": "serve"|"close"|"kill", "re": id,
# "tag": T, ...}`` in, ``{"ready"...}``, ``{"re": id, "ok", "pid"|"why"}``, ``{"stderr": T, "data"}``,
# ``{"ended": T}`` out), else the tag of the paper server the line goes to or comes from (its protocol
# lines as they are). The parent relays; it runs no paper code and reads nothing a run wrote.
# When a server ends (or is killed) every process left with a uid of its block is killed; under
# ``--mux`` its paper folder and work folder are removed too.

_TAG_RE = re.compile(r"^[A-Za-z0-9]{1,64}$")


def _zygote_prepare(args: argparse.Namespace) -> tuple[list[str], str, tuple[bytes, bytes]]:
    """Import the environment's modules once: (what was imported, why no paper can be served, what
    the imports printed)."""
    import threading

    for var in _THREAD_ENV:
        os.environ.setdefault(var, "1")
    threads = set(threading.enumerate())
    if args.first_paper:
        first, origin = scan_imports(args.first_paper), args.first_paper
    else:
        # named by the host (its own scan of the first paper): never a standard module of this interpreter
        std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
        first = [m.strip() for m in (args.modules or "").split(",") if m.strip() and m.strip() not in std]
        origin = args.papers
    wanted = [m for m in dict.fromkeys(first + ARGS_PRELOAD) if m not in UNSAFE_TO_FORK]
    with _Capture() as captured:
        preloaded, _failed = preload(wanted, origin)
        preload([m for m in ALWAYS_PRELOAD if m not in sys.modules], origin)
        import_testing()
    refused = ""
    extra = sorted(t.name for t in set(threading.enumerate()) - threads if t.is_alive())
    if [m for m in UNSAFE_TO_FORK if m in sys.modules]:
        refused = "a module unsafe to fork was imported"
    elif extra:
        refused = f"imports left threads running ({', '.join(extra)})"
    return preloaded, refused, captured.output


def _serve_refusal(request: dict, papers: str, preloaded: list[str], refused: str) -> tuple[str, str]:
    """(the paper's folder, why it cannot be served here: "" when it can)."""
    paper = os.path.realpath(str(request.get("paper") or ""))
    if refused:
        return paper, refused
    if not paper.startswith(papers + os.sep) or not os.path.isfile(os.path.join(paper, "paper2code_test.py")):
        return paper, f"{paper} is not a paper of this parent"
    if not _ID_RE.match(str(request.get("work") or "")):
        return paper, "bad work folder name"
    missing = sorted(set(preloaded) - set(scan_imports(paper)))
    if missing:
        return paper, f"the paper does not import {', '.join(missing)} (the parent did)"
    return paper, ""


def _kill_uid_block(base: int) -> None:
    """Kill every process whose uid is in the run uid block starting at ``base`` (what a server that
    died or was killed left running)."""
    if base > 0:
        _kill_until_gone(lambda: [p for p, _pp, _g, _s, uid, st in _proc_entries()
                                  if base <= uid < base + 1000 and st != "Z"], _reap_any, rounds=50)


def zygote_serve(args: argparse.Namespace) -> int:
    if args.mux:
        # protocol lines go to a private copy of stdout; anything else printed lands on stderr
        out_fd = os.dup(1)
        os.dup2(2, 1)
        preloaded, refused, output = _zygote_prepare(args)
        return _zygote_mux(args, out_fd, preloaded, refused, output)
    import socket

    ctl = socket.socket(fileno=args.control_fd)
    papers = os.path.realpath(args.papers)
    preloaded, refused, output = _zygote_prepare(args)
    blocks: dict[int, int] = {}  # server pid -> its run uid block

    def reply(obj: dict) -> None:
        ctl.send(json.dumps(obj).encode())

    reply({"ready": True, "preloaded": preloaded, "refused": refused})
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 16, 4)
        except OSError:
            break
        if not data:
            for fd in fds:
                os.close(fd)
            break
        _reap_any()
        try:
            request = json.loads(data)
        except ValueError:
            request = {}
        if request.get("kill"):
            try:
                pid = int(request["kill"])
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, ValueError, TypeError):
                pid = 0
            _kill_uid_block(blocks.pop(pid, 0))
            for fd in fds:
                os.close(fd)
            continue
        paper, why = _serve_refusal(request, papers, preloaded, refused)
        if not why and len(fds) != 2:
            why = "two descriptors expected (protocol socket, stderr pipe)"
        if why:
            for fd in fds:
                os.close(fd)
            reply({"ok": False, "why": why})
            continue
        # forked once (a fork of a parent holding torch costs milliseconds): the servers that ended
        # are reaped at the next request
        server_pid = os.fork()
        if server_pid == 0:
            _paper_server(request, paper, fds, output, args)
        for fd in fds:
            os.close(fd)
        blocks[server_pid] = int(request.get("run_uid_base") or 0)
        reply({"ok": True, "pid": server_pid})
    return 0


class _Relay:
    """A paper server of a ``--mux`` parent: its socket and stderr pipe, what waits to go either way."""

    def __init__(self, tag: str, pid: int, sock, err: int, paper: str, work: str, uid_base: int):
        self.tag, self.pid, self.sock, self.err = tag, pid, sock, err
        self.paper, self.work, self.uid_base = paper, work, uid_base
        self.to_server = bytearray()
        self.from_server = bytearray()
        self.closing = False  # the host ended its stdin: shut the socket's write side once flushed
        self.eof = False  # the server's stdout ended
        self.exited = False


def _zygote_mux(args: argparse.Namespace, out_fd: int, preloaded: list[str], refused: str,
                output: tuple[bytes, bytes]) -> int:
    import socket

    papers = os.path.realpath(args.papers)
    sel = selectors.DefaultSelector()
    out = bytearray()
    relays: dict[str, _Relay] = {}
    by_pid: dict[int, _Relay] = {}
    inbuf = bytearray()
    stdin_open = True
    writing = False

    def emit(tag: str, payload: bytes) -> None:
        out.extend(tag.encode() + b"\t" + payload + b"\n")

    def control(obj: dict) -> None:
        emit("", json.dumps(obj).encode())

    def interest(relay: _Relay) -> None:
        events = 0 if relay.eof else selectors.EVENT_READ
        if relay.to_server:
            events |= selectors.EVENT_WRITE
        key = sel.get_map().get(relay.sock.fileno())
        if key is None and events:
            sel.register(relay.sock, events, ("sock", relay))
        elif key is not None and not events:
            sel.unregister(relay.sock)
        elif key is not None and key.events != events:
            sel.modify(relay.sock, events, ("sock", relay))

    def shut(relay: _Relay) -> None:
        if relay.closing and not relay.to_server:
            try:
                relay.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def kill(relay: _Relay) -> None:
        try:
            os.kill(relay.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_uid_block(relay.uid_base)

    def serve(request: dict) -> None:
        rid, tag = request.get("re"), str(request.get("tag") or "")
        paper, why = _serve_refusal(request, papers, preloaded, refused)
        if not why and (not _TAG_RE.match(tag) or tag in relays):
            why = "bad or used tag"
        if why:
            control({"re": rid, "ok": False, "why": why})
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            mine.close()
            os.close(err_r)
            _paper_server(request, paper, [theirs.detach(), err_w], output, args)
        theirs.close()
        os.close(err_w)
        mine.setblocking(False)
        os.set_blocking(err_r, False)
        relay = _Relay(tag, pid, mine, err_r, paper, os.path.join(os.path.realpath(args.work), request["work"]),
                       int(request.get("run_uid_base") or 0))
        relays[tag] = relay
        by_pid[pid] = relay
        interest(relay)
        sel.register(err_r, selectors.EVENT_READ, ("err", relay))
        control({"re": rid, "ok": True, "pid": pid})

    def on_host_line(line: bytes) -> None:
        tag, sep, payload = line.partition(b"\t")
        if not sep:
            return
        if tag:
            relay = relays.get(tag.decode(errors="replace"))
            if relay is not None and not relay.closing and not relay.eof:
                relay.to_server += payload + b"\n"
                interest(relay)
            return
        try:
            request = json.loads(payload)
        except ValueError:
            return
        if not isinstance(request, dict):
            return
        op = request.get("op")
        relay = relays.get(str(request.get("tag") or ""))
        if op == "serve":
            serve(request)
        elif op == "close" and relay is not None:
            relay.closing = True
            shut(relay)
        elif op == "kill" and relay is not None:
            kill(relay)

    def drain_err(relay: _Relay) -> bool:
        """Relay what the server wrote to stderr; False once the pipe is closed."""
        while True:
            try:
                data = os.read(relay.err, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                return False
            control({"stderr": relay.tag, "data": data.decode("utf-8", "replace")})

    def finish(relay: _Relay) -> None:
        drain_err(relay)
        if relay.err in sel.get_map():
            sel.unregister(relay.err)
        os.close(relay.err)
        if relay.sock.fileno() in sel.get_map():
            sel.unregister(relay.sock)
        relay.sock.close()
        _kill_uid_block(relay.uid_base)
        for folder in (relay.work, relay.paper):
            remove_tree(folder)
        relays.pop(relay.tag, None)
        by_pid.pop(relay.pid, None)
        control({"ended": relay.tag})

    control({"ready": True, "protocol": PROTOCOL, "preloaded": preloaded, "refused": refused, "mux": True})
    os.set_blocking(0, False)
    os.set_blocking(out_fd, False)
    sel.register(0, selectors.EVENT_READ, ("stdin", None))
    while stdin_open or relays:
        if out and not writing:
            sel.register(out_fd, selectors.EVENT_WRITE, ("stdout", None))
            writing = True
        for key, events in sel.select(0.5):
            kind, relay = key.data
            if kind == "stdin":
                try:
                    data = os.read(0, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    # the host is gone: so are the servers, then this parent
                    stdin_open = False
                    sel.unregister(0)
                    for each in list(relays.values()):
                        kill(each)
                    continue
                inbuf += data
                for line in split_lines(inbuf):
                    on_host_line(line)
            elif kind == "stdout":
                try:
                    done = os.write(out_fd, out)
                    del out[:done]
                except BlockingIOError:
                    pass
                except OSError:
                    out.clear()  # nobody reads: nothing can be told
                if not out:
                    sel.unregister(out_fd)
                    writing = False
            elif kind == "err":
                if not drain_err(relay):
                    sel.unregister(relay.err)
            elif kind == "sock":
                if events & selectors.EVENT_WRITE and relay.to_server:
                    try:
                        sent = relay.sock.send(relay.to_server)
                        del relay.to_server[:sent]
                    except BlockingIOError:
                        pass
                    except OSError:
                        relay.to_server.clear()
                    shut(relay)
                if events & selectors.EVENT_READ:
                    try:
                        data = relay.sock.recv(1 << 20)
                    except BlockingIOError:
                        data = None
                    except OSError:
                        data = b""
                    if data == b"":
                        relay.eof = True
                        relay.to_server.clear()
                    elif data:
                        relay.from_server += data
                        for line in split_lines(relay.from_server):
                            emit(relay.tag, line)
                interest(relay)
        try:
            while True:
                pid, _status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid in by_pid:
                    by_pid[pid].exited = True
        except ChildProcessError:
            pass
        for relay in list(relays.values()):
            if relay.eof and relay.exited:
                finish(relay)
    # what is still owed to the host
    os.set_blocking(out_fd, True)
    try:
        os.write(out_fd, out)
    except OSError:
        pass
    return 0


def _paper_server(request: dict, paper: str, fds: list[int], output: tuple[bytes, bytes],
                  args: argparse.Namespace) -> None:
    """In the forked server: take the paper's channel as stdin/stdout and serve it (never returns)."""
    code = 1
    try:
        channel, err = fds
        os.dup2(channel, 0)
        os.dup2(channel, 1)
        os.dup2(err, 2)
        # nothing of the parent's stays open here: its control socket, other papers' channels
        os.closerange(3, 65536)
        token = str(request.get("work") or "")
        if not _ID_RE.match(token):
            raise ValueError(f"bad work folder name {token!r}")
        server_args = argparse.Namespace(
            paper=paper, work=os.path.join(os.path.realpath(args.work), token), fresh=False, python=args.python,
            run_uid_base=int(request.get("run_uid_base") or 0), cgroups=getattr(args, "cgroups", ""),
        )
        server = Server(server_args)
        server.inherited_output = output
        # other papers' runs share this sandbox's disks: the disk guard watches even a lone run
        server.shared = True
        code = server.serve()
    except BaseException:  # noqa: BLE001 - never back into the parent's loop
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


ARGS_PRELOAD: list[str] = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="warm runner for one paper's test (see the module docstring)")
    parser.add_argument("--paper")
    parser.add_argument("--work")
    parser.add_argument("--preload", default="", help="extra modules to import once, comma-separated")
    parser.add_argument("--fresh", action="store_true", help="a fresh interpreter per run (no fork)")
    parser.add_argument("--python", help="interpreter for --fresh runs (default: this one)")
    parser.add_argument("--run-uid-base", type=int, default=0,
                        help="when root: each run gets its own uid BASE+slot (default 0: off; the bwrap backend uses it)")
    parser.add_argument("--cgroups", default="",
                        help="v1:DIR or v2:DIR: the sandbox's cgroup folders, one cgroup per run (root only)")
    parser.add_argument("--no-library-guard", action="store_true",
                        help="measurement only (bench/score_speed.py): no library-namespace guard")
    parser.add_argument("--launch", help=argparse.SUPPRESS)
    parser.add_argument("--proof-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--zygote", action="store_true", help="warm parent of several papers (zygote_serve)")
    parser.add_argument("--papers", help="with --zygote: the folder holding the papers it may serve")
    parser.add_argument("--first-paper", help="with --zygote: the paper whose imports it makes")
    parser.add_argument("--control-fd", type=int, help="with --zygote: the control socket's descriptor")
    parser.add_argument("--mux", action="store_true",
                        help="with --zygote: requests and every server's streams as tagged lines on stdin/stdout")
    parser.add_argument("--modules", help="with --zygote, instead of --first-paper: the modules to import")
    args = parser.parse_args(argv)
    if args.no_library_guard:
        LIBRARY_GUARD[0] = False
    if args.launch:
        launch(args.launch, args.proof_fd if args.proof_fd is not None else -1)
        return 0  # not reached
    if args.zygote:
        if not (args.papers and args.work and (args.first_paper or args.modules is not None)
                and (args.mux or args.control_fd is not None)):
            parser.error("--zygote needs --papers, --work, --first-paper or --modules, and --control-fd or --mux")
        ARGS_PRELOAD[:] = [m.strip() for m in args.preload.split(",") if m.strip()]
        return zygote_serve(args)
    if not args.paper or not args.work:
        parser.error("--paper and --work are required")
    if not os.path.isfile(os.path.join(args.paper, "paper2code_test.py")):
        parser.error(f"{args.paper} has no paper2code_test.py")
    ARGS_PRELOAD[:] = [m.strip() for m in args.preload.split(",") if m.strip()]
    return Server(args).serve()


if __name__ == "__main__":
    sys.exit(main())
