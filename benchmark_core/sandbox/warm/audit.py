"""The run's audit hook (PEP 578): what a run does that a test never needs is reported on the proof
pipe, MAC'd with the run's key, before it proceeds. Standard library only; runs inside the sandbox.

``install_audit`` wires small factories together; each returns closures holding the references
it needs, bound when the hook is installed (before any of the paper's code runs), never looked up
in a module's globals afterwards: see docs/sandboxes.md ("The runner in rooms")."""
from __future__ import annotations

import os
import sys

from .common import _IGNORED, LIBRARY_GUARD, RUNNER
from .guard import _dict_version_reader, _library_guard, _library_roots, _modules_delta, mirror_rebound
from .watch import watcher

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
    "os.rename", "os.link", "os.symlink", "os.truncate", "rcb.framework", "rcb.vacuous", "rcb.changed",
    "rcb.watch",
))
#: files Python runs code from: a run that reads one the paper does not ship (a copy of its ``*_ref``
#: module under another name, imported) or writes one in the paper's folder is reported
_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyw", ".so", ".zip", ".pyz", ".pth")
#: the paper's files as a run's copy holds them (relative paths), set by a warm server before it
#: forks any run (``paper_files``); a fresh interpreter's run lists its own copy when it starts
PAPER_FILES: list = [None]


def paper_files(folder: str) -> frozenset:
    """The relative paths of the files (and links) a run's copy of the paper at ``folder`` holds:
    what ``Server.paper_copy`` copies (no caches, no bytecode)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in _IGNORED]
        rel = os.path.relpath(root, folder)
        for name in files:
            if not name.endswith(".pyc"):
                found.append(name if rel == "." else rel + "/" + name)
        for name in dirs:  # a link to a folder is copied as a link (symlinks=True)
            if os.path.islink(os.path.join(root, name)):
                found.append(name if rel == "." else rel + "/" + name)
    return frozenset(found)


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


def _install_audit(fd: int, key: bytes, script: str, prepared: tuple | None = None, *, prepare: bool = False,
                   costs: list | None = None, watched: list | None = None):
    """Install the run's audit hook writing to ``fd``; return the checkpoint emitter for launch()
    and the function that names the test script (``script`` empty: a pre-forked run's hook is
    installed before its run is known). That function names it once; later calls change nothing,
    so code that reaches it cannot make its own frames pass for the test script's.

    ``prepared``: the snapshot of the protected modules a warm server took before forking
    (``snapshot_prepare``); the first checkpoint then only takes in what changed since (our own
    wrappers, what the fork did) instead of building it again in every run. With ``prepare``
    nothing is installed: the function that builds that snapshot is returned.

    ``costs`` (``COSTS_FIELDS``, zeros): the hook adds what each detection costs this run as it goes,
    for the bench to weigh (the launcher reports them on the proof's ``C`` line). Figures only: the
    completion can reach the list like any object of this process, and no verdict reads it.

    ``watched`` (a list): filled with the run's ``watch.watcher`` (the paper's functions around the
    snippets watched across each call), which reads frames under the hook's own flag.
    """
    # every global this hook needs is bound now, in the factories' closures: later rebinding of the
    # runner's globals (reachable from the wrappers installed into unittest) must not change it
    runner = RUNNER
    protected = PROTECTED_MODULES
    trusted_roots = tuple(sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, runner) if p}))
    st = os.fstat(fd) if not prepare else None
    channel = (st.st_dev, st.st_ino) if st is not None else None
    state = {"handlers": set(), "returned": False, "started": False}
    script_cell = [script]  # the test script's path: its frames are the harness's, not paper code
    # (the paper's folder as a run sees it, with a "/" after it; its files, relative paths)
    shipped_cell = [None, PAPER_FILES[0]]

    def name_script(path: str) -> None:
        if not script_cell[0]:
            script_cell[0] = path
            folder = os.path.dirname(os.path.abspath(path))
            if shipped_cell[1] is None:  # a fresh interpreter's run: its copy, before any paper code ran
                shipped_cell[1] = paper_files(folder)
            shipped_cell[0] = folder.rstrip("/") + "/"
            library[3][0] = shipped_cell[0]  # the guard watches the paper's modules too, from now on

    # module name -> (module, {attr: (value, code)}); protected class -> (label, {attr: (value, code)})
    # (a prepared snapshot is this process's own copy: the server's, inherited by the fork)
    base: dict = prepared[0] if prepared is not None else {}
    classes: dict = prepared[1] if prepared is not None else {}
    emit, stack_origin = _audit_emitter(fd, key, channel, script_cell, runner, trusted_roots)
    check_process, check_signals = _audit_process(emit, state)
    # every library module's and class's namespace (guard.py): the server's, taken before it
    # forked, or this process's own, taken before the hook is in place
    library = _audit_library(prepared, runner, protected)
    text, safe_mod, snapshot_value, describe = _audit_describers()
    # the tags as the server settled them when it took its snapshot (valid in its forks: same addresses)
    unmoved = _audit_unmoved(runner, trusted_roots, library[2], prepared[3] if prepared is not None
                             and len(prepared) > 3 else None)
    check_classes, watch_classes = _audit_classes(classes, emit, text, safe_mod, snapshot_value, unmoved)
    # the *_ref names as last listed, with the tag of sys.modules then (a prepared snapshot's: ``listed``)
    listed: list = prepared[4] if prepared is not None and len(prepared) > 4 else [None, []]
    absorb, first_sight, watched_names = _audit_modules(base, protected, emit, describe, snapshot_value,
                                                        check_classes, watch_classes, unmoved, listed, library[2])
    if prepare:
        return _audit_snapshot(protected, base, classes, first_sight, library, check_classes, unmoved,
                               watched_names, listed)
    checkpoint, take_in, take_new = _audit_checkpoint(state, base, prepared is not None, emit, library[1],
                                                    check_process, check_signals,
                                                    (absorb, check_classes, first_sight, watched_names,
                                                     snapshot_value), unmoved)
    if costs is not None:
        checkpoint, take_in, take_new = (_timed(checkpoint, costs, 2), _timed(take_in, costs, 2),
                                         _timed(take_new, costs, 2))
    describe_event = _audit_events(state, runner, trusted_roots, emit, stack_origin, checkpoint, text, safe_mod,
                                   shipped_cell)
    sys.addaudithook(_audit_hook(describe_event, emit, library[2], costs))
    if watched is not None:
        watched[:] = watcher(sys.audit, library[2], costs)
    take = library[0]

    def take_named(name: str) -> None:  # one module, sys.modules not taken as read (guard ``take``)
        take([name], False)

    if costs is not None:
        take_named = _timed(take_named, costs, 2)
    # the window's own steps run inside the paper's import: an error of ours there is reported, never
    # raised into the import (it failed an honest run as the model's TypeError while being written)
    steps = [_never_raises(step, emit, name) for step, name in
             ((checkpoint, "checkpoint"), (take_in, "take-in"), (take_new, "take-new"), (take_named, "take-named"))]
    return checkpoint, name_script, _audit_import_window(state, steps[0], steps[1], stack_origin, trusted_roots,
                                                         library[2], steps[2], library[3], steps[3])


def _never_raises(step, emit, name: str):
    """``step`` reporting an exception of its own (``rcb.harness``: a review flag, ``audit:other``)
    instead of raising it into the code that called it."""
    def run(*args):
        try:
            return step(*args)
        except Exception as error:  # noqa: BLE001 - ours, not the paper's: reported, not raised
            emit("E", "rcb.harness", name + " failed: " + type(error).__name__)
        return None

    return run


def _audit_import_window(state: dict, checkpoint, take_in, stack_origin, trusted_roots: tuple, busy: list,
                         take_new=None, paper: list | None = None, take_named=None):
    """``window(exec_module, module, library=True, origin="")``: how one import the launcher's finder
    saw (a module of a file: ``library`` when under the environment's prefix) is judged.

    Every other import is taken in where it ends, before any code of the paper's runs after it: a
    module of the paper's own (``paper[0]``, its folder) by its name (``take_named``: that module,
    watched as it is then), the outermost import of a library that the test or a library asked for
    with the modules it added (``take_new``). A class body or a module-level line of the completion that changes ``helpers`` right
    after importing it (``setattr(helpers, "SCALE", 0)``) was otherwise first seen at the first
    test's start, changed, and passed unflagged until 2026-12-06.

    A library module imported because the paper's code asked for
    it (``torch.func.grad`` or ``torch.utils.checkpoint`` importing ``torch._dynamo`` on first use),
    run as its own import-time code. What a library's import does to other libraries is the
    library's, as it is in a fresh interpreter: ``torch._dynamo`` wraps ``torch.manual_seed`` and
    gives ``torch.compiler``'s ``CacheInfo`` its properties. Judged as the completion's, those writes
    failed an honest completion as tampering:patch while it passed in a fresh interpreter.

    So such an import is a window: a checkpoint reports whatever changed before it (the paper's
    own), then the import runs with the cyclic garbage collector off (no finalizer of the paper's
    runs inside) and a profile function that notes any call of code that is not a library's
    (``trusted_roots``) or the interpreter's own (``<frozen ...>``, ``<string>``: a dataclass's made
    methods); at its end what changed is taken in silently, or, when code of the paper ran within
    (a logging handler, a callback it registered), reported as at any checkpoint. An import the
    test script or a library makes with no paper code on the stack, or one inside a window, is
    not a window of its own. The function is reached only from the launcher's finder
    (``launch._import_windows``), called directly: no audited event opens or closes a window."""
    import _thread
    import gc

    setprofile, getprofile, get_ident = sys.setprofile, sys.getprofile, _thread.get_ident
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    roots, tstr, ttype = tuple(trusted_roots), str, type
    depth = [0]
    taken_at_end, papers = _audit_taken_at_end(take_new, take_named, paper if paper is not None else [None])

    def window(exec_module, module, library: bool = True, origin: str = ""):
        if depth[0] or not state["started"] or state["returned"]:
            return exec_module(module)
        if not library:
            return papers(exec_module, module, origin)
        _caller, stack = stack_origin()
        if "P" not in stack:
            return taken_at_end(exec_module, module)  # the test's or a library's own import
        checkpoint("import")  # what the paper's code changed before this import is its own
        tainted: list = []
        me = get_ident()

        def profile(frame, event, arg):
            if event != "call" or tainted:
                return
            before, busy[0] = busy[0], me  # reading f_code raises an event: ours, not reported
            try:
                name = frame.f_code.co_filename
            finally:
                busy[0] = before
            if ttype(name) is not tstr or not (name.startswith(roots) or name.startswith("<")):
                tainted.append(name)

        collecting = gc_enabled()
        previous = getprofile()
        depth[0] = 1
        before, busy[0] = busy[0], me  # our own sys.setprofile event
        try:
            setprofile(profile)
        finally:
            busy[0] = before
        if collecting:
            gc_disable()
        try:
            return exec_module(module)
        finally:
            replaced = getprofile() is not profile  # only code of the paper's would have taken it off
            before, busy[0] = busy[0], me
            try:
                setprofile(previous)
            finally:
                busy[0] = before
            if collecting:
                gc_enable()
            depth[0] = 0
            if tainted or replaced:
                checkpoint("import")  # code of the paper's ran within: reported as at any checkpoint
            else:
                take_in()

    return window


def _audit_taken_at_end(take_new, take_named, paper: list):
    """``(taken_at_end, papers)`` for ``_audit_import_window``: an import no window judges, its
    modules taken in (``take_new``) where the outermost such import ends; an import of a module that
    is not a library's, taken in by its name at its own end when it is a module of the paper's
    (``paper[0]``, the run's copy of it; ``take_named``: that module only, nothing else read, which
    costs a run that imports three of them no comparison of ``sys.modules``), plain otherwise."""
    from types import ModuleType

    tstr, ttype = str, type
    module_dict = ModuleType.__dict__["__dict__"].__get__
    plain = [0]  # imports in progress that no window judges, in this process

    def taken_at_end(exec_module, module):
        plain[0] += 1
        try:
            loaded = exec_module(module)
        finally:
            plain[0] -= 1
        if not plain[0] and take_new is not None:
            take_new()
        return loaded

    def papers(exec_module, module, origin):
        folder = paper[0]
        if folder is None or ttype(origin) is not tstr or not origin.startswith(folder):
            return exec_module(module)
        # a module of the paper's own: its import-time code is the paper's (the reference run's
        # too), judged at the next checkpoint; what it holds is watched from its import's end
        name = module_dict(module).get("__name__")  # as the import system set it, before its code runs
        plain[0], outer = 0, plain[0]  # (a library it imports is a window of its own)
        try:
            loaded = exec_module(module)
        finally:
            plain[0] = outer
        if ttype(name) is tstr and take_named is not None:
            take_named(name)
        return loaded

    return taken_at_end, papers


#: what ``costs`` holds, in order: seconds in the hook for audited events (checkpoints included),
#: those events, seconds in checkpoints (snapshot comparisons, the library guard), checkpoints,
#: seconds of the run's set-up (hook, wrappers, first checkpoint: a spare does it ahead), seconds
#: of the module report at the end, seconds of the watch of the paper's functions (``watch.py``)
COSTS_FIELDS = ("hook_s", "events", "checkpoint_s", "checkpoints", "prepare_s", "report_s", "watch_s")


def _timed(function, costs: list, slot: int):
    """``function`` adding its seconds to ``costs[slot]`` and one call to ``costs[slot + 1]``."""
    from time import perf_counter

    def timed(*args):
        started = perf_counter()
        try:
            return function(*args)
        finally:
            costs[slot] += perf_counter() - started
            costs[slot + 1] += 1

    return timed


def _audit_library(prepared: tuple | None, runner: str, protected: tuple[str, ...]) -> tuple:
    """``(take, check, busy, paper)`` of the library guard: a prepared snapshot's, a new one taken
    now, or (--no-library-guard: the bench's "before", bench/score_speed.py, never a scoring run)
    none. ``paper[0]``: the paper's folder, set when the run's test script is named."""
    if prepared is not None and len(prepared) > 2:
        return prepared[2]
    if LIBRARY_GUARD[0]:
        library = _library_guard(_library_roots(), runner, protected)
        library[0]()
        return library
    return (lambda fresh=None, settle=True: None), (lambda emit, report=True, full=True: None), [0], [None]


def _audit_emitter(fd: int, key: bytes, channel, script_cell: list, runner: str, trusted_roots: tuple):
    """``(emit, stack_origin)``: the one writer of the run's proof lines, each MAC'd with ``key``."""
    import _blake2
    import _thread
    import faulthandler

    write, fstat, exit_, dump = os.write, os.fstat, os._exit, faulthandler.dump_traceback
    pipe, read, close = os.pipe, os.read, os.close
    blake = _blake2.blake2b
    tlen, memview = len, memoryview
    proof_exit, stack_limit = PROOF_EXIT, _STACK_LIMIT
    memory_error = b"MemoryError\n"
    runner_dir = runner + "/"
    lock = _thread.RLock()
    sent: set = set()  # events already reported, with their origin

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
            if path == runner or path.startswith(runner_dir):
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
        except MemoryError:
            # the run's memory is spent (a test's own runaway allocation): it ends as a fresh
            # interpreter ends on an uncaught MemoryError, not as a lost channel. It still ends
            # here, before anything else runs: a run never goes on unreported, and no proof's
            # last line is written, so it cannot pass
            try:
                write(2, memory_error)
            except BaseException:  # noqa: BLE001
                pass
            exit_(1)
        except BaseException:  # noqa: BLE001 - a report that cannot be made ends the run
            exit_(proof_exit)

    return emit, stack_origin


#: the signals whose handlers a run's checkpoints compare (``_audit_process``), listed once
_SIGNALS: list = []


def _audit_process(emit, state: dict):
    """``(check_process, check_signals)``: what decides the published verdict besides the exit code.

    fds 1 and 2 (the output pipes), the few functions of sys that end the process or print its
    errors (sys itself is not watched: tests rebind sys.stdout and friends) and torch's global
    state (``rcb.framework``), compared at every checkpoint; and the signal handlers set since the
    hook went in, each reported once."""
    import _signal
    import signal as _signals

    fstat, tstr, tint, callable_ = os.fstat, str, int, callable
    # the C function: signal.getsignal's wrapper makes an enum of each answer (~10 us a signal)
    getsignal, default_int = _signal.getsignal, _signal.default_int_handler
    if not _SIGNALS:  # (once: valid_signals makes an enum of each, ~0.3 ms; a warm server's runs inherit it)
        _SIGNALS.extend(int(s) for s in _signals.valid_signals() if s not in (_signals.SIGKILL, _signals.SIGSTOP))
    signals = list(_SIGNALS)

    def stdio_ids() -> tuple:
        ids = []
        for std in (1, 2):
            try:
                now = fstat(std)
                ids.append((now.st_dev, now.st_ino))
            except OSError:
                ids.append(None)
        return tuple(ids)

    stdio = stdio_ids()
    sys_dict = sys.modules["sys"].__dict__
    sys_watched = ("exit", "excepthook", "displayhook", "audit", "addaudithook", "settrace", "setprofile",
                   "_getframe", "unraisablehook")
    sys_base = {name: sys_dict.get(name) for name in sys_watched}

    modules = sys.modules
    # torch's global state: its readers and the state at first sight, then the last one reported
    torch_state: list = [None, None, None]

    def torch_global_state():
        """What torch holds for every later call, once it is imported: its thread-local dispatch keys
        (the python dispatcher, whose ``py_impl`` kernels then run, entered for good), its mode
        stacks and its default saved-tensor hooks. (Its global hook tables are dicts: the library
        guard watches them, ``guard.GLOBAL_TABLES``.)"""
        torch_c = modules.get("torch._C")
        if torch_c is None:
            return None
        if torch_state[0] is None:
            try:
                torch_state[0] = (torch_c._dispatch_tls_local_include_set, torch_c._dispatch_tls_local_exclude_set,
                                  torch_c._len_torch_function_stack, torch_c._len_torch_dispatch_stack,
                                  torch_c._autograd._top_saved_tensors_default_hooks)
            except AttributeError:
                torch_state[0] = ()
        if not torch_state[0]:
            return None
        include, exclude, function_modes, dispatch_modes, saved_hooks = torch_state[0]
        try:
            return (f"include {include()} exclude {exclude()} function-modes {function_modes()} "
                    f"dispatch-modes {dispatch_modes()} saved-tensor-hooks {saved_hooks(False) is not None}")
        except Exception:  # noqa: BLE001 - a function of torch._C replaced (the guard reports that)
            return "?"

    def check_process() -> None:
        if stdio_ids() != stdio:
            emit("E", "rcb.stdio", "fd 1 or 2 replaced")
        for name, value in sys_base.items():
            if sys_dict.get(name) is not value:
                emit("E", "rcb.attr", "sys." + name + " changed")
                sys_base[name] = sys_dict.get(name)
        state_now = torch_global_state()
        if state_now is not None:
            if torch_state[1] is None:
                torch_state[1] = torch_state[2] = state_now
            elif state_now != torch_state[2]:
                torch_state[2] = state_now
                if state_now != torch_state[1]:
                    emit("E", "rcb.framework", "state:" + state_now)

    def check_signals() -> None:
        for sig in signals:
            handler = getsignal(sig)
            if callable_(handler) and handler is not default_int and sig not in state["handlers"]:
                state["handlers"].add(sig)
                emit("E", "rcb.signal-handler", tstr(tint(sig)))

    return check_process, check_signals


def _audit_describers():
    """``(text, safe_mod, snapshot_value, describe)``: how values and classes are named in proof lines."""
    from types import FunctionType, ModuleType

    tstr, ttype, tint, tbytes, issub, callable_ = str, type, int, bytes, issubclass, callable
    type_mod = type.__dict__["__module__"].__get__
    type_qual = type.__dict__["__qualname__"].__get__
    module_dict = ModuleType.__dict__["__dict__"].__get__

    def safe_mod(cls) -> str:
        try:
            mod = type_mod(cls)
        except Exception:  # noqa: BLE001 - a heap type without __module__
            return "?"
        return mod if ttype(mod) is tstr else "?"

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

    return text, safe_mod, snapshot_value, describe


def _audit_classes(classes: dict, emit, text, safe_mod, snapshot_value, unmoved=None):
    """``(check_classes, watch_classes)``: the protected classes (the test machinery) and their
    snapshot. A class that nothing wrote since its last comparison is not compared again
    (``_audit_unmoved``); the test script's own classes always are."""
    import unittest

    tstr, ttype, issub, list_ = str, type, issubclass, list
    type_qual = type.__dict__["__qualname__"].__get__
    class_dict = type.__dict__["__dict__"].__get__
    unittest_classes = [c for c in (unittest.TestCase, unittest.TestResult, unittest.TextTestResult,
                                    unittest.TextTestRunner, unittest.TestSuite, unittest.TestLoader,
                                    unittest.TestProgram, unittest.FunctionTestCase) if issub(ttype(c), type)]
    #: attributes classes gain on their own while tests run (caches, abc registries)
    benign_new = frozenset(("_abc_impl", "__abstractmethods__", "_is_protocol", "__parameters__",
                            "_longMessage", "__orig_bases__"))
    is_unmoved, settle = unmoved[:2] if unmoved is not None else (None, None)

    def check_classes(report: bool = True) -> None:
        """Compare the protected classes with their snapshot, reporting each change once; without
        ``report`` (absorb) the snapshot only takes the changes in, as a first sight would."""
        for cls, (label, attrs) in list_(classes.items()):
            mine = label.startswith("__main__.")
            if not mine and is_unmoved is not None and is_unmoved(cls, None):
                continue  # nothing written there since its last comparison
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
            if settle is not None and not mine:
                settle(cls, None, attrs)

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

    return check_classes, watch_classes


def _audit_unmoved(runner: str, trusted_roots: tuple, busy: list, tags: dict | None = None):
    """``(unmoved, settle)``, which spare a checkpoint comparing a protected module's or class's
    namespace that nothing wrote since it was last compared. ``settle(key, d, attrs)`` remembers
    the version tag of the module's dict ``d`` (for a class, ``d`` None and ``key`` the class: its
    dict is found once, as the guard finds it) (PEP 509: CPython moves it at every write, a value put back
    included; guard.py reads it) and the functions among its snapshot ``attrs`` whose code the hook
    does not watch (a library's and a ``*_ref`` module's ``__code__`` writes are audited events the
    hook reports: ``_audit_attrs``); ``unmoved(key, d)`` is True when the tag is where it was and
    none of those functions has other code, so that the full comparison would find nothing. Without
    a tag reader (another interpreter's dict layout) it is never True: every module is compared.
    Making a tag reader is an audited event (``ctypes.cdata``): it is made under ``busy`` (the
    library guard's flag, which the hook honours for this thread), as the guard makes its own.
    ``tags``: the record a warm server settled when it took its snapshot (``snapshot_prepare``),
    this process's copy since the fork; the third item returned is the record itself."""
    import _thread
    import gc

    reader = _dict_version_reader()
    tstr, ttype, tlen, get_ident, referents = str, type, len, _thread.get_ident, gc.get_referents
    class_proxy = type.__dict__["__dict__"].__get__
    runner_dir = runner + "/"
    # key -> (the dict's id, its tag reader, the tag, [(function, code)] to check)
    tags = tags if tags is not None else {}

    def settle(name, d, attrs: dict) -> None:
        if reader is None:
            return
        unwatched = []
        for value, code in attrs.values():
            if code is None:
                continue
            filename = code.co_filename
            if ttype(filename) is tstr and ((filename.startswith(trusted_roots) and filename != runner
                                             and not filename.startswith(runner_dir))
                                            or filename.endswith("_ref.py")):
                continue  # its __code__ writes are reported as they happen
            unwatched.append((value, code))
        known = tags.get(name)
        if known is not None and (d is None or known[0] == id(d)):
            tag = known[1]
        else:
            outer = busy[0]
            busy[0] = get_ident()
            try:
                if d is None:  # a class: its dict behind the mappingproxy (gc.get_referents, audited)
                    inner = referents(class_proxy(name))
                    if tlen(inner) != 1 or ttype(inner[0]) is not dict:
                        return  # never unmoved: compared every time
                    d = inner[0]
                tag = reader(d)
            finally:
                busy[0] = outer
        tags[name] = (None if known is not None and d is None else id(d), tag, tag.value, unwatched)

    def unmoved(name, d) -> bool:
        known = tags.get(name)
        if known is None or (d is not None and known[0] != id(d)) or known[1].value != known[2]:
            return False
        for function, code in known[3]:
            if function.__code__ is not code:
                return False
        return True

    return (unmoved, settle, tags) if reader is not None else None


def _audit_watched_names(protected: tuple, listed: list | None = None, busy: list | None = None):
    """``watched_names()``: the protected modules imported, the ``*_ref`` modules and ``__main__``.
    ``listed``: the ``*_ref`` names as a warm server's snapshot last listed them, with the version
    tag of ``sys.modules`` then (this process's copy since the fork): while that tag has not moved
    they are not listed again (a listing reads every name of ``sys.modules``: in a fork, a write to
    each one's page); once it moved, only the names added since are looked at, read from
    sys.modules' memory (``guard._modules_delta``, its state the third item of ``listed``), unless a
    name listed was removed or replaced there (then all are listed again, as before). ``busy``: the
    library guard's flag, under which the hook ignores the reads' own audited events."""
    tstr, ttype, list_, tlen, map_, tid = str, type, list, len, map, id
    modules = sys.modules
    # the reader is made here, before the hook is in place (PEP 509 tags: guard.py)
    reader = _dict_version_reader()
    modules_tag = reader(modules) if reader is not None else None
    ref_names: list = listed if listed is not None else [None, []]  # the tag when listed, the names
    if tlen(ref_names) < 3:  # what sys.modules held when they were listed, read from its memory
        ref_names.append({"modules_base": [None, 0, b"", 0], "watched_keys": set(),
                          "busy": busy if busy is not None else [0]})
    delta = ref_names[2]
    delta_rebase, delta_fresh = _modules_delta(delta)

    def watched_names() -> list:
        names = [n for n in protected if n in modules]
        tag = modules_tag.value if modules_tag is not None else None
        if tag is None or tag != ref_names[0]:
            found = delta_fresh()
            if found is None:
                listing = [n for n in list_(modules) if ttype(n) is tstr and n.endswith("_ref")]
                delta["watched_keys"].clear()
                delta["watched_keys"].update(map_(tid, listing))
            else:  # only names added (none listed removed or replaced): in sys.modules' order, after them
                listing = ref_names[1] + [n for n in found if ttype(n) is tstr and n.endswith("_ref")]
                delta["watched_keys"].update(map_(tid, listing[tlen(ref_names[1]):]))
            ref_names[1] = listing
            ref_names[0] = tag
            delta_rebase()
        names += ref_names[1]
        if "__main__" in modules:
            names.append("__main__")
        return names

    return watched_names


def _audit_modules(base: dict, protected: tuple, emit, describe, snapshot_value, check_classes, watch_classes,
                   unmoved=None, listed: list | None = None, busy: list | None = None):
    """``(absorb, first_sight, watched_names)``: the protected modules and their snapshot (each
    settled in ``unmoved``'s record, when given, as it is taken in); ``watched_names`` is
    ``_audit_watched_names(protected, listed, busy)``."""
    import _blake2
    from types import ModuleType

    tstr, ttype, list_, sorted_ = str, type, list, sorted
    modules = sys.modules
    module_dict = ModuleType.__dict__["__dict__"].__get__
    blake = _blake2.blake2b
    watched_class = _WatchedModule
    is_unmoved, settle = unmoved[:2] if unmoved is not None else (None, None)
    watched_names = _audit_watched_names(protected, listed, busy)

    def absorb() -> None:
        """Take in, without reporting, what changed in the prepared snapshot before any of the
        paper's code ran (the launcher's wrappers, the fork's own resets)."""
        check_classes(report=False)
        for name, (module, attrs) in list_(base.items()):
            if modules.get(name) is not module:
                del base[name]  # seen anew below, as a module first seen
                continue
            current = module_dict(module)
            if is_unmoved is not None and is_unmoved(name, current):
                watch(name, module)  # nothing written there since the server's snapshot
                continue
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
            if settle is not None:
                settle(name, current, attrs)

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
        if settle is not None and name != "__main__":
            settle(name, items, attrs)
        if name == "__main__" or name.endswith("_ref"):
            listing = "\n".join(k + "=" + describe(attrs[k][0]) for k in sorted_(attrs))
            emit("S", name, blake(listing.encode("utf-8", "backslashreplace"), digest_size=16).hexdigest())
        if watched:
            watch(name, module)

    return absorb, first_sight, watched_names


def _audit_snapshot(protected: tuple, base: dict, classes: dict, first_sight, library: tuple, check_classes,
                    unmoved, watched_names, listed: list):
    """The function building a warm server's prepared snapshot (``snapshot_prepare``): the
    protected modules and classes, the library guard's, and the version tags of the protected
    namespaces as taken (``_audit_unmoved``: a run's first checkpoint then compares only what moved
    since, its launcher's wrappers), and the ``*_ref`` names listed (``_audit_modules``' ``listed``)."""
    from types import ModuleType

    modules, ttype, issub = sys.modules, type, issubclass

    def snapshot() -> tuple:
        # the modules' class is swapped in the run, after its wrappers are in (absorb)
        for name in protected:
            module = modules.get(name)
            if issub(ttype(module), ModuleType):
                first_sight(name, module, watched=False)
        check_classes(report=False)  # each protected class's tag settled
        watched_names()  # the *_ref names listed now, with the tag of sys.modules: a run lists them again
        # only when that tag moved (``_audit_modules``' ``listed``)
        return base, classes, library, unmoved[2] if unmoved is not None else None, listed

    return snapshot


def _audit_checkpoint(state: dict, base: dict, prepared: bool, emit, library_check, check_process,
                      check_signals, snapshots: tuple, unmoved=None):
    """``checkpoint(where)``: the comparisons made at the launcher's start, each test's start and
    end, the script's return and the run's end (``rcb.checkpoint`` events). A protected module that
    nothing wrote since its last comparison is not compared again (``_audit_unmoved``); the test
    script's ``__main__`` always is."""
    from types import ModuleType

    absorb, check_classes, first_sight, watched_names, snapshot_value = snapshots
    is_unmoved, settle = unmoved[:2] if unmoved is not None else (None, None)
    modules, ttype, issub, mirror = sys.modules, type, issubclass, mirror_rebound
    module_dict = ModuleType.__dict__["__dict__"].__get__

    def checkpoint(where: str) -> None:
        if where == "returned":
            state["returned"] = True  # the script is over: no test starts after this
            return
        if where == "framework":
            # torch's own import just ended (launch._wrap_dispatcher): its global state is seen
            # first now, before any code of the paper's that imported it goes on
            check_process()
            return
        if where != "import":
            # (an import window opens inside a library call in progress: torch's thread-local keys
            # read there are the call's, functorch's layer pushed by torch.func.grad. Nothing the
            # window takes in touches what check_process compares: the next checkpoint reads it)
            check_process()
        if where == "test-start":
            # modules the test imported since, taken before the test's own code runs; version tags
            # keep every write, so the namespaces themselves are compared at the end only
            library_check(emit, full=False)
            if "__main__" in base:
                return  # between two tests nothing of the completion's runs: each test's end is checked
        # the launcher's first checkpoint of a run whose snapshot was prepared: nothing to compare
        # yet (once only: a "start" the paper's code raises later is compared like any other)
        first_start = where == "start" and not state["started"]
        prepared_start = first_start and prepared
        state["started"] = True
        if prepared_start:
            absorb()
        else:
            check_classes()
        # the launcher's first checkpoint: its own wrappers went in since the guard's snapshot.
        # A test's start and end take in new modules only (the first test's start did so above:
        # it gets here once, for the test script's first sight): a tag moved is kept until the
        # end, so a write made and put back before or within a test is still seen then, at one
        # comparison per run
        if where != "test-start":
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
                if name != "__main__" and is_unmoved is not None and is_unmoved(name, current):
                    continue  # nothing written there since its last comparison
                for attr, (value, code) in attrs.items():
                    now = current.get(attr, base)
                    if now is base:
                        emit("E", "rcb.attr", f"{name}.{attr} removed")
                    elif now is not value or (code is not None and value.__code__ is not code):
                        # torch.Storage rebound by torch.set_default_dtype: the setting, state
                        emit("E", "rcb.state" if mirror(name, attr, current, now) else "rcb.attr",
                             f"{name}.{attr} changed")
                        attrs[attr] = snapshot_value(now)  # report each change once
                if settle is not None and name != "__main__":
                    settle(name, current, attrs)
                continue
            if not issub(ttype(module), ModuleType):
                continue
            if name == "__main__" and where not in ("test", "test-start"):
                continue  # the test script's namespace, from its first test on (at the end it is ours again)
            first_sight(name, module)
        check_signals()

    def take_in() -> None:
        """A library's import the paper's code asked for ended and no code of the paper's ran
        within (``_audit_import_window``): what it changed is taken in as a first sight would hold
        it. Reached from that window only, never from an audited event (``rcb.checkpoint`` is
        anyone's to raise)."""
        absorb()
        library_check(emit, report=False, full=True)
        for name in watched_names():
            module = modules.get(name)
            if name not in base and name != "__main__" and issub(ttype(module), ModuleType):
                first_sight(name, module)

    def take_new() -> None:
        """An import no window judged ended (``_audit_import_window``): the modules it added are
        watched from now on, as they are (a write made since an earlier comparison stays in its
        dict's tag until the next). Reached from the import finder only, never from an event."""
        library_check(emit, report=True, full=False)

    return checkpoint, take_in, take_new


def _audit_hook(describe_event, emit, library_busy: list, costs: list | None = None):
    """The hook itself: an audited event's detail, reported with the stack that raised it (its cost
    added to ``costs``, when given)."""
    import _thread

    from time import perf_counter

    audited, get_ident = _AUDITED, _thread.get_ident
    clock = perf_counter if costs is not None else None
    costs = costs if costs is not None else [0.0, 0]

    def hook(event, args) -> None:
        if event not in audited and not event.startswith("ctypes."):
            return
        if library_busy[0] and library_busy[0] == get_ident():
            return  # the library guard's own reads (gc.get_referents, ctypes), in this thread only
        started = clock() if clock else 0.0  # timed here, not by a wrapper: no frame of ours added
        try:
            detail = describe_event(event, args)
        except Exception:  # noqa: BLE001 - an odd argument (a type without __module__): still reported
            detail = "?"
        if detail is not None:
            emit("E", event, detail, stack=True)
        if clock:
            costs[0] += clock() - started
            costs[1] += 1

    return hook


def _audit_events(state: dict, runner: str, trusted_roots: tuple, emit, stack_origin, checkpoint, text, safe_mod,
                  shipped_cell: list):
    """``describe_event(event, args)``: the detail reported for an audited event, or None when it
    is not worth reporting (the harness's own events, ``rcb.test`` and ``rcb.checkpoint``, are acted on)."""
    tlen = len
    describe_access = _audit_access(text, _audit_paper_files(shipped_cell, trusted_roots))
    describe_attr = _audit_attrs(trusted_roots, text, safe_mod)
    access_events, attr_events = _ACCESS_EVENTS, _ATTR_EVENTS

    def describe_event(event, args):
        if event in attr_events:
            return describe_attr(event, args)
        if event in access_events:
            return describe_access(event, args)
        detail = ""
        if event == "rcb.test":
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
        elif event == "rcb.framework":
            return "dispatch:" + text(args[0] if args else "?")  # <method>:<operator>:<key> (launch._wrap_dispatcher)
        elif event == "rcb.vacuous":
            return text(args[0] if args else "?")  # the check that compared something empty (launch._wrap_checks)
        elif event == "rcb.changed" or event == "rcb.watch":
            return text(args[0] if args else "?")  # <function>:<path> a call changed; the watch's own (watch.py)
        elif event == "compile" or event == "code.__new__":
            # code under a library's (or the import system's) name: its frames would pass for library code
            name = text(args[1]) if tlen(args) > 1 else "?"
            spoofed = name.startswith(trusted_roots) or name.startswith("<frozen")
            if event == "compile" and not spoofed:
                return None
            detail = ("spoof:" + name) if spoofed else ""
        return detail

    return describe_event


#: the events ``_audit_attrs`` describes, and those ``_audit_access`` does
_ATTR_EVENTS = frozenset(("object.__getattr__", "object.__setattr__", "object.__delattr__"))
_ACCESS_EVENTS = frozenset(("open", "os.listdir", "os.scandir", "import", "os.kill", "os.killpg", "rcb.modattr",
                            "os.exec", "os.posix_spawn", "os.spawn", "os.system", "pty.spawn", "os.rename",
                            "os.link", "os.symlink", "os.truncate"))


def _audit_attrs(trusted_roots: tuple, text, safe_mod):
    """``describe_attr(event, args)``: a frame taken from a traceback or generator, a protected
    class's attribute written, an object's class swapped, a library function's code replaced."""
    from types import FunctionType

    tstr, ttype, tlen, issub = str, type, len, issubclass
    frame_attrs, prefixes, watched_class = _FRAME_ATTRS, _PROTECTED_PREFIXES, _WatchedModule
    type_qual = type.__dict__["__qualname__"].__get__

    def special_write(target, attr, value):
        """The detail of a write to ``__class__`` (any object: our own module swap excepted) or to
        a library function's ``__code__``, ``__defaults__`` or ``__kwdefaults__``; None otherwise."""
        if attr == "__class__":
            if value is watched_class:
                return None
            cls = ttype(target)
            return "class:" + safe_mod(cls) + "." + text(type_qual(cls))
        if ttype(target) is FunctionType and attr in ("__code__", "__defaults__", "__kwdefaults__"):
            # a library's function, a *_ref module's, or the runner's own (the wrappers it puts in the
            # test machinery: numpy's assert_array_compare, unittest's startTest)
            filename = text(target.__code__.co_filename)
            if filename.startswith(trusted_roots) or filename.endswith("_ref.py"):
                return "func:" + text(target.__qualname__) + "@" + filename.rsplit("/", 1)[-1] + "." + attr
        return None

    def describe_attr(event, args):
        if event == "object.__getattr__":
            if tlen(args) < 2 or ttype(args[1]) is not tstr or args[1] not in frame_attrs:
                return None
            return args[1]
        target = args[0] if args else None
        if tlen(args) < 2:
            return None
        if not issub(ttype(target), type):
            return special_write(target, args[1], args[2] if tlen(args) > 2 else None)
        mod = safe_mod(target)
        if not (mod.startswith(prefixes) or mod.endswith("_ref")):
            return None
        return mod + "." + text(type_qual(target)) + "." + text(args[1])

    return describe_attr


def _audit_paper_files(shipped_cell: list, trusted_roots: tuple):
    """``paper_file(path, writing)``: the detail of a file event that touches the paper's code or
    files, or None. ``paper-write:<file>``: the run writes (opens for writing, renames, links or
    truncates onto) a file of the paper's folder that the paper ships, or code there (a ``.py``, a
    bytecode file): a module the test imports later, or the data file it reads its expected values
    from, would no longer be the paper's. ``unshipped-code:<file>``: the run reads code (a ``.py``,
    bytecode, a shared library, an archive) that is neither the interpreter's nor the paper's: a
    copy of the ``*_ref`` module under another name, imported (``<file>`` is ``elsewhere`` outside
    the paper's folder: code a library generates under ``/tmp`` is named the same in every run, so
    the reference run's own is matched). Paths are taken as the event gives them, made absolute
    with the working folder, never resolved through links: a link to the reference module is a file
    the paper does not ship. Bytecode under ``__pycache__`` of a shipped module may be read."""
    import os as _os

    tstr, tbytes, ttype = str, bytes, type
    getcwd, normpath, fsdecode = _os.getcwd, _os.path.normpath, _os.fsdecode
    code_suffixes = _CODE_SUFFIXES

    def paper_file(path, writing: bool):
        folder, shipped = shipped_cell
        if folder is None or shipped is None:
            return None  # before the test script is named: the harness's own files
        if ttype(path) is tbytes:
            path = fsdecode(path)
        elif ttype(path) is not tstr:
            return None
        code = path.endswith(code_suffixes)
        if not writing and not code:
            return None  # (most opens: a library's data, the test's own files)
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        if "/." in path or "//" in path:  # (the import system's paths are normal already)
            path = normpath(path)
        if path.startswith(trusted_roots):
            return None
        rel = path[len(folder):] if path.startswith(folder) else None
        if writing:
            return "paper-write:" + rel if rel is not None and (code or rel in shipped) else None
        if rel is not None:
            if rel in shipped:
                return None
            parent, _, name = rel.rpartition("/")
            if parent == "__pycache__" or parent.endswith("/__pycache__"):
                source = parent[:-len("__pycache__")] + name.split(".", 1)[0] + ".py"
                if source in shipped:
                    return None
            return "unshipped-code:" + rel
        return "unshipped-code:elsewhere"

    return paper_file


#: the bits of os.open's flags that make an open a write
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _audit_access(text, paper_file):
    """``describe_access(event, args)``: descriptors and /proc files opened, watched modules
    imported, signals sent, programs started, protected modules' attributes written, the paper's
    files written and code read that the paper does not ship (``paper_file``)."""
    import os as _os

    tstr, ttype, tint, tlen, getpid = str, type, int, len, _os.getpid
    watched_imports = _WATCHED_IMPORTS
    write_flags = _WRITE_FLAGS

    def describe_access(event, args):
        detail = ""
        if event == "open":
            path = args[0] if args else None
            if ttype(path) is tint:
                detail = "fd"
            else:
                mode = args[1] if tlen(args) > 1 else None
                flags = args[2] if tlen(args) > 2 else 0
                if ttype(mode) is tstr:
                    writing = "w" in mode or "a" in mode or "x" in mode or "+" in mode
                else:
                    writing = ttype(flags) is tint and bool(flags & write_flags)
                found = paper_file(path, writing)
                if found is not None:
                    return found
                path = text(path)
                if path.startswith("/dev/fd") or (path.startswith("/proc/") and (
                        "/mem" in path or "/fd" in path or "/map_files" in path or "/environ" in path)):
                    detail = path
                else:
                    return None
        elif event in ("os.rename", "os.link", "os.symlink", "os.truncate"):
            # onto: the second path (the first of os.truncate); a descriptor (ftruncate) is not a path
            target = args[0] if event == "os.truncate" else (args[1] if tlen(args) > 1 else None)
            return paper_file(target, True)
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
                return None  # signal 0 only asks whether a process exists
        elif event == "rcb.modattr":
            detail = text(args[0] if args else "?") + "." + text(args[1] if tlen(args) > 1 else "?")
        elif event in ("os.exec", "os.posix_spawn", "os.spawn", "os.system", "pty.spawn"):
            detail = text(args[0] if args else "?")
        return detail

    return describe_access
