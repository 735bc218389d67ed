"""The import scan: which modules a paper's files import, and their preload (run once per server)."""
from __future__ import annotations

import ast
import functools
import os
import sys
import threading

from .common import _IGNORED

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


def import_statements(tree: ast.AST) -> list:
    """The import statements of a module's tree, anywhere in it (in functions, classes, branches and
    handlers), in the file's order: an import is a statement, so only statement lists are walked,
    not the expressions that make up most of a file's nodes (a walk of every node took most of the
    host's static reading of a real paper's file). No recursion (a tree may be thousands deep)."""
    found: list = []
    todo = [getattr(tree, "body", [])]
    while todo:
        for node in todo.pop():
            kind = type(node)
            if kind is ast.Import or kind is ast.ImportFrom:
                found.append(node)
                continue
            for field in STATEMENT_FIELDS:
                inner = getattr(node, field, None)
                if inner:
                    if field == "handlers" or field == "cases":
                        todo.extend(h.body for h in inner)
                    else:
                        todo.append(inner)
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return found


#: where a statement holds statements (an except's and a match case's bodies, through them)
STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


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
    for _roots, paths, _named in _files_read(paper):
        for name in paths:
            root = name.split(".")[0]
            if root in own or root in NEVER_PRELOAD or root in UNSAFE_TO_FORK or name in found:
                continue
            found.append(name)
    return found


def parent_names(paper: str) -> list[str]:
    """What a warm parent of the paper's environment may import ahead for it: its third-party
    modules and the submodules of those it names (``scipy.stats``), which its server would
    otherwise import (``Server.preload_paper``). A parent whose preloads are all among a paper's
    ``parent_names`` may serve it: a fresh interpreter running the paper's files would import them
    too (``zygote._serve_refusal``; the hosts pick a parent by them: ``warm_client.parent_pick``)."""
    top = scan_imports(paper)
    third = set(top)
    return top + [m for m in scan_submodules(paper) if m.split(".")[0] in third and m not in third]


def named_roots(paper: str) -> set[str]:
    """The first component of every absolute import anywhere in the paper's files (inside functions
    too): the packages the paper itself names (``learn``: a run may teach the server only those)."""
    found: set[str] = set()
    for _roots, _paths, named in _files_read(paper):
        found.update(named)
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
#: standard modules every run needs (imported once: unittest alone costs tens of milliseconds). No
#: submodule that its package does not import itself: in every fork it would be an attribute of the
#: package, so ``import unittest`` then ``unittest.mock`` would work here and fail in a fresh
#: interpreter (and ``unittest.mock`` alone, through asyncio and ssl, took 50 ms of every scoring's
#: start, where a core waits). A paper naming it gets it from its server (``scan_submodules``) or
#: from its reference run (``learn``).
ALWAYS_PRELOAD = ("unittest", "runpy", "atexit", "threading", "json", "io", "traceback")
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


def _files_read(paper: str):
    """What the import scans need of each of the paper's ``.py`` files, in a fixed order: (its
    module-level imports' first components, their dotted names, the first component of every
    absolute import anywhere in it). A broken file is skipped: it breaks its own runs."""
    for root, dirs, files in os.walk(paper):
        dirs[:] = sorted(d for d in dirs if d not in _IGNORED)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            read = _file_read(path, st.st_ino, st.st_mtime_ns, st.st_size)
            if read is not None:
                yield read


@functools.lru_cache(maxsize=1024)
def _file_read(path: str, _inode: int, _mtime_ns: int, _size: int):
    """``_files_read`` of one file, parsed once while it is unchanged (by its inode, time and size):
    each paper's scans ran on every session opened for it, twice (its third-party modules, their
    submodules), over files that are hundreds of lines in a real paper."""
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        with AST_LOCK:
            tree = ast.parse(source)
    except (SyntaxError, ValueError, OSError, MemoryError, RecursionError):
        return None
    named: set[str] = set()
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            named.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            named.add(node.module.split(".")[0])
    return tuple(_module_roots(tree)), tuple(_module_paths(tree)), frozenset(named)


def _scan(paper: str) -> list[str]:
    found: list[str] = []
    for roots, _paths, _named in _files_read(paper):
        for mod in roots:
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
