"""The launcher: a run's test script run as ``__main__`` in this process, between the audit hook's
first checkpoint and the proof's last line. Standard library only; runs inside the sandbox."""
from __future__ import annotations

import os
import runpy  # the launcher's (a fresh run's too): in a warm server's snapshot, not imported by each run
import sys
import traceback
from time import perf_counter

from .audit import PROOF_EXIT, _install_audit, proof_mac
from .common import _exit_code
from .scan import import_testing
from .watch import HOOK


def _rooms() -> "tuple[str, ...] | None":
    """The runner's rooms (this folder's modules), or None when the folder cannot be listed."""
    try:
        names = os.listdir(os.path.dirname(os.path.abspath(__file__)))
    except OSError:
        return None
    return tuple(sorted(os.path.splitext(f)[0] for f in names if f.endswith(".py") and f != "__main__.py"))


#: the runner's rooms: a run removes them from ``sys.modules`` by name (``_launcher``)
ROOMS = _rooms()


def snapshot_prepare(previous: tuple | None = None) -> tuple:
    """The snapshot of the protected modules imported here, as a run's first checkpoint would take
    it: a warm server takes it once, before forking its runs (each run then only takes in what
    changed since, see ``_install_audit``). Call it after the preloads and ``import_testing``.

    ``previous``: a snapshot this process took before, or inherited from the process it was forked
    from (a warm parent's, taken before it forked the paper's server; the server's own, before it
    learned imports): it is brought up to date rather than built again, as one taken now would be
    (the library guard takes in the dicts that moved and the modules imported since, with what they
    define; the protected modules and classes are taken again, their version tags settled)."""
    if previous is not None and len(previous) > 3:
        previous[2][1](_no_report, report=False)
        return _install_audit(-1, b"", "", previous, prepare=True)()
    return _install_audit(-1, b"", "", prepare=True)()


def _no_report(*_fields, stack: bool = False) -> None:
    """The emitter of a snapshot taken outside any run: nothing to report to."""


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
    started = perf_counter()
    key = os.urandom(32)
    try:
        os.write(proof_fd, b"K " + key.hex().encode() + b"\n")
    except OSError:
        os._exit(PROOF_EXIT)
    import_testing()  # a warm server did it before forking; a fresh interpreter does it here
    costs = [0.0, 0, 0.0, 0, 0.0, 0.0, 0.0]  # audit.COSTS_FIELDS
    watched: list = []
    checkpoint, name_script, window = _install_audit(proof_fd, key, "", prepared, costs=costs, watched=watched)
    watch, watch_compile, watch_finish, watch_late = watched
    _wrap_harness(sys.audit, watch_late)
    import builtins

    builtins.__dict__[HOOK] = watch  # before the first checkpoint: a later write is a patch of builtins
    _import_windows(window, watch_compile)
    checkpoint("start")  # the snapshot of the test machinery, our wrappers in place
    # the set-up's seconds, the first checkpoint's among them; the run's own checkpoints come later
    # (each from the hook: ``hook_s`` holds them too)
    costs[:] = [0.0, 0, 0.0, 0, perf_counter() - started, 0.0, 0.0]
    return _launcher(proof_fd, key, name_script, costs, watch_finish)


def _wrap_harness(audit, late=None) -> None:
    """Wrap unittest's TestResult (every case any runner starts, stops or skips raises an audit
    event; ``late()``, the watch's look at what the last calls were handed, as each case stops) and
    ``_thread.start_new_thread`` (CPython 3.11 has no audit event for a new thread)."""
    import _thread
    import threading
    import unittest.result

    original_start = unittest.result.TestResult.startTest
    original_stop = unittest.result.TestResult.stopTest
    original_skip = unittest.result.TestResult.addSkip

    def start_test(self, test):  # counts every case any runner starts
        audit("rcb.test", "start")
        audit("rcb.checkpoint", "test-start")
        return original_start(self, test)

    def stop_test(self, test):
        if late is not None:
            late()
        audit("rcb.checkpoint", "test")
        return original_stop(self, test)

    def add_skip(self, test, reason):
        audit("rcb.test", "skip")
        return original_skip(self, test, reason)

    unittest.result.TestResult.startTest = start_test
    unittest.result.TestResult.stopTest = stop_test
    unittest.result.TestResult.addSkip = add_skip
    original_thread = _thread.start_new_thread

    def start_new_thread(function, args, kwargs=None):
        audit("rcb.thread")
        return original_thread(function, args, kwargs or {})

    _thread.start_new_thread = threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]
    pending: dict = {}  # what to wrap in a module this run imports later: one finder for all
    _wrap_dispatcher(audit, pending)
    _wrap_checks(audit, pending)
    if pending:
        _on_import(pending)


#: the comparisons a test's check goes through, by module: every ``numpy.testing`` assertion on
#: arrays (``assert_allclose``, ``assert_array_equal``, ``assert_array_almost_equal``, ``assert_equal``
#: and ``assert_almost_equal`` of arrays) calls ``assert_array_compare``, a module global there;
#: ``np.allclose`` calls ``isclose``, a global of its own module (``numpy._core.numeric``; numpy
#: 1's ``numpy.core.numeric``), wrapped there and never as ``np.isclose``. Not wrapped: the functions
#: a dispatch protocol hands to an object (``np.isclose`` and ``np.allclose`` themselves under
#: ``__array_function__``, ``torch.allclose`` under ``__torch_function__``), which objects compare
#: by identity (``func is torch.isclose``): wrapped, such an object (a tensor subclass in a paper, a
#: duck array) would be handed a function it does not know, and its verdict would change. torch's
#: are C functions whose table (``torch._C._VariableFunctions``) cannot be written
#: (what to wrap, and the module whose import must have ended first: the package whose
#: ``__init__`` re-exports the module's names, so that ``np.isclose`` stays numpy's own)
_CHECKS = {
    "numpy.testing._private.utils": (("assert_array_compare",), "numpy.testing._private.utils"),
    "numpy._core.numeric": (("isclose",), "numpy"),
    "numpy.core.numeric": (("isclose",), "numpy"),
}


def _wrap_checks(audit, pending: dict) -> None:
    """Raise ``rcb.vacuous`` (``<module>.<name>``) when a check compares something empty with
    something that is not: numpy's assertions broadcast, so an empty array against a scalar answer
    (a loss) passes whatever its values (``np.testing.assert_allclose(np.array([]), 2.5)``). A
    completion returning one passed, in a fresh interpreter as here, unflagged
    (``audit:vacuous-check``). The wrapper calls the function it wraps with what it was given and
    answers what it answers; an operand's size is read through the C getters of its base type (no
    code of the operand's runs). A module imported already is wrapped now, another when the import
    of the package that re-exports its names ends (added to ``pending``, the hooks ``_on_import``
    runs); that package imported already without it, it is not this version's (numpy 2 has no
    ``numpy.core.numeric`` of its own)."""
    sizer = _operand_sizer()

    def checked(original, label: str):
        # (what it calls is held in its closure, not in defaults a completion could change in place)
        def check(*args, **kwargs):
            sizes = sizer(args, kwargs)
            if 0 in sizes and any(n > 0 for n in sizes):
                audit("rcb.vacuous", label)
            return original(*args, **kwargs)

        check.__name__, check.__qualname__, check.__doc__ = original.__name__, original.__qualname__, original.__doc__
        check._rcb_check = True  # type: ignore[attr-defined]
        return check

    def wrap(name: str) -> None:
        module = sys.modules.get(name)
        for attr in _CHECKS[name][0] if module is not None else ():
            original = getattr(module, "__dict__", {}).get(attr)
            if callable(original) and not getattr(original, "_rcb_check", False):
                setattr(module, attr, checked(original, f"{name}.{attr}"))

    def wrap_after(package: str, _module) -> None:
        for name, (_attrs, after) in _CHECKS.items():
            if after == package:
                wrap(name)

    for name, (_attrs, after) in _CHECKS.items():
        if after in sys.modules:
            wrap(name)
        else:
            pending[after] = wrap_after


def _operand_sizer():
    """``sizes(args, kwargs)``: the number of elements of each operand (positional, or by one of
    the compared's keywords: ``x``, ``y``, ``actual``, ``desired``) that is a numpy array, a plain
    torch tensor, a list or tuple, or a number (1); other arguments (the comparison function, the
    options: ``verbose=True``) are left out. Read through C getters only: a tensor subclass (whose ``__torch_function__``
    would run for ``numel``) is left out too."""
    tint, tfloat, tcomplex, tbool, tlist, ttuple, ttype, issub = int, float, complex, bool, list, tuple, type, issubclass
    numbers = (tint, tfloat, tcomplex)
    operands = frozenset(("x", "y", "actual", "desired", "a", "b"))  # by keyword: the compared, not the options
    base: list = [None, None, None, None, None]  # ndarray, its size getter, torch.Tensor, TensorBase's numel, np.generic

    def sizes(args, kwargs) -> list:
        if base[0] is None and "numpy" in sys.modules:
            nd = getattr(sys.modules["numpy"], "ndarray", None)
            if isinstance(nd, type):
                base[0], base[1], base[4] = nd, nd.__dict__["size"].__get__, getattr(sys.modules["numpy"], "generic", None)
        if base[2] is None and "torch" in sys.modules and "torch._C" in sys.modules:
            tensor, tb = getattr(sys.modules["torch"], "Tensor", None), getattr(sys.modules["torch._C"], "TensorBase", None)
            if isinstance(tensor, type) and isinstance(tb, type):
                base[2], base[3] = tensor, tb.__dict__.get("numel")
        found = []
        for value in (*args, *(v for k, v in kwargs.items() if k in operands)):
            kind = ttype(value)
            try:
                if (issub(kind, numbers) and kind is not tbool) or (base[4] is not None and issub(kind, base[4])):
                    found.append(1)  # a number, a numpy scalar (np.float64(2.5))
                elif kind is tlist or kind is ttuple:
                    found.append(len(value))
                elif base[1] is not None and issub(kind, base[0]):
                    found.append(base[1](value))
                elif base[3] is not None and kind is base[2]:
                    found.append(base[3](value))
            except Exception:  # noqa: BLE001 - an operand that cannot say: not counted
                continue
        return found

    return sizes


def _on_import(hooks: dict) -> None:
    """Call ``hooks[name](name, module)`` when the import of module ``name`` ends (its code run,
    before the code that imported it goes on): a finder, first on ``sys.meta_path``, lets the
    others find it and runs the hook after the loader's ``exec_module``."""
    meta_path = sys.meta_path
    finder = None
    others_find = _others_find
    asking: set = set()

    def find_spec(fullname, path=None, target=None):
        hook = hooks.get(fullname)
        if hook is None or fullname in asking:
            return None
        asking.add(fullname)
        try:
            spec = others_find(meta_path, finder, fullname, path, target)
        finally:
            asking.discard(fullname)
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_hook(module):
            exec_module(module)
            hooks.pop(fullname, None)
            if not hooks:
                try:
                    meta_path.remove(finder)
                except ValueError:
                    pass
            hook(fullname, module)

        loader.exec_module = exec_then_hook
        return spec

    finder = _Finder(find_spec)
    meta_path.insert(0, finder)


#: the methods of torch's dispatcher handle (``torch._C._DispatchModule``: what every
#: ``torch.library.Library`` holds, torch's own among them) that register, define or remove kernels
_DISPATCH_METHODS = ("impl", "impl_t_t", "impl_with_aoti_compile", "fallback", "fallback_fallthrough",
                     "register_ad_inplace_or_view_fallback", "define", "def_", "def_legacy", "def_name_t_t",
                     "def_schema_t_t", "reset")


def _wrap_dispatcher(audit, pending: dict) -> None:
    """Raise ``rcb.framework`` (``<method>:<operator>:<dispatch key>``) at every registration in
    torch's dispatcher. A kernel registered for an existing operator (``aten::isclose`` answering
    True inside ``torch.testing.assert_close``, ``aten::gelu`` giving the reference zeros) changes
    what the test's check and the reference compute, and writes nothing a namespace guard sees:
    the kernel table is C++'s. The methods of the handle class are wrapped (a ``Library`` torch
    made at its import is one more handle: its ``impl`` is reachable from any module global).

    torch imported already (a warm server's preload): wrapped now. Otherwise once the test imports
    it (added to ``pending``, the hooks ``_on_import`` runs): when torch's own ``__init__`` is done,
    so its ~1,900 registrations of its own are not reported, as the preloaded torch's were not."""
    torch_c = sys.modules.get("torch._C")
    if torch_c is not None:
        _wrap_dispatch_module(torch_c, audit)
        return

    def wrap_then_look(_name: str, _module) -> None:
        imported = sys.modules.get("torch._C")
        if imported is not None:
            _wrap_dispatch_module(imported, audit)
            audit("rcb.checkpoint", "framework")  # torch's global state as its import leaves it

    pending["torch"] = wrap_then_look


def _import_windows(window, watch_compile=None) -> None:
    """A finder, first on ``sys.meta_path``, that lets the others find each module and runs the
    import of each module of a file (a source, bytecode or extension file) in ``window``
    (``audit._audit_import_window``): a library's (under the environment's prefix) import-time
    writes to other libraries are judged as the library's when the paper's code asked for it and
    ran nowhere within; any other import's modules are watched from where it ends. A source file
    that is no library's is run as ``watch_compile`` makes it: its functions around the snippets
    watched, what it holds fingerprinted with their calls (``watch.py``)."""
    import _thread
    import importlib.machinery as machinery

    meta_path = sys.meta_path
    loaders = (machinery.SourceFileLoader, machinery.SourcelessFileLoader, machinery.ExtensionFileLoader)
    source_loader = machinery.SourceFileLoader
    roots = tuple(sorted({p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p}))
    tstr, isinstance_, get_ident, others_find = str, isinstance, _thread.get_ident, _others_find
    finder = None
    asking: set = set()  # the threads whose find_spec is asking the other finders now

    def find_spec(fullname, path=None, target=None):
        me = get_ident()
        if me in asking:
            return None  # asked again by a finder we asked (torch's own, which asks every other)
        asking.add(me)
        try:
            spec = others_find(meta_path, finder, fullname, path, target)
        finally:
            asking.discard(me)
        if spec is None:
            return None
        loader, origin = spec.loader, spec.origin
        if not isinstance_(loader, loaders) or type(origin) is not tstr:
            return spec
        library = origin.startswith(roots)
        exec_module = loader.exec_module  # torch's own finder's wrapper, when it made this spec
        if watch_compile is not None and not library and isinstance_(loader, source_loader) and origin.endswith(".py"):
            exec_module = watch_compile(exec_module, loader, origin)

        def exec_in_window(module):
            try:
                return window(exec_module, module, library, origin)
            finally:
                loader.__dict__.pop("exec_module", None)  # this loader's only: its class's again

        loader.exec_module = exec_in_window
        return spec

    finder = _Finder(find_spec)
    meta_path.insert(0, finder)


def _others_find(meta_path: list, finder, fullname: str, path, target):
    """The spec the finders of ``meta_path`` other than ``finder`` find for ``fullname`` (None: none)."""
    for other in list(meta_path):
        if other is finder:
            continue
        found = getattr(other, "find_spec", None)
        spec = found(fullname, path, target) if found is not None else None
        if spec is not None:
            return spec
    return None


class _Finder:
    """A meta path finder made of one function."""

    __slots__ = ("find_spec",)

    def __init__(self, find_spec):
        self.find_spec = find_spec


def _wrap_dispatch_module(torch_c, audit) -> None:
    cls = getattr(torch_c, "_DispatchModule", None)
    if not isinstance(cls, type) or cls.__dict__.get("_rcb_wrapped"):
        return
    tstr, tlen = str, len

    def wrapped(name, original):
        def method(self, *args, **kwargs):
            op = args[0] if args else kwargs.get("name", "")
            key = args[1] if tlen(args) > 1 and isinstance(args[1], str) else kwargs.get("dispatch", "")
            audit("rcb.framework", name + ":" + tstr(op)[:200] + ":" + tstr(key)[:60])
            return original(self, *args, **kwargs)
        method.__name__ = method.__qualname__ = name
        return method

    for name in _DISPATCH_METHODS:
        original = cls.__dict__.get(name)
        if original is not None:
            setattr(cls, name, wrapped(name, original))
    cls._rcb_wrapped = True


def _launcher(proof_fd: int, key: bytes, name_script, costs: list, watch_finish=None):
    """``go(script)``: run the script once, then write the proof's last line (after the ``C`` line of
    what the detections cost, ``audit.COSTS_FIELDS``) and exit."""
    import atexit
    import threading

    # everything used once the paper's code has run is bound now: it may rebind any global or
    # module attribute it can reach (os.write, the runner's functions: the wrappers' __globals__)
    # but not these locals
    write, exit_, mac, audit, getpid, clock = os.write, os._exit, proof_mac, sys.audit, os.getpid, perf_counter
    ttype = type
    exit_code, print_exception, proof_exit = _exit_code, traceback.print_exception, PROOF_EXIT
    run_path, shutdown, run_exitfuncs = runpy.run_path, threading._shutdown, atexit._run_exitfuncs  # type: ignore[attr-defined]
    main_file = getattr(sys.modules.get("unittest.main"), "__file__", None) or ""
    package = __package__ or ""
    # named, not looked for: iterating sys.modules in a fork counts a reference to each of its
    # ~1,500 names, a write to each one's page (~750 pages copied, ~2 ms a run)
    own = ([package] + [package + "." + room for room in ROOMS]) if package and ROOMS is not None else None
    report_modules = _module_reporter(proof_fd, key)
    gone = []

    def go(script: str) -> None:
        if gone:
            exit_(proof_exit)  # a second start of the same run: only paper code would make one
        gone.append(True)
        script = os.path.abspath(script)
        name_script(script)
        sys.argv = [os.path.basename(script)]
        sys.path[0] = os.path.dirname(script)
        # the runner's own modules are no module of the test's (as the lone runner script's
        # __main__ was not while runpy ran the test)
        modules = sys.modules
        if own is None:  # (the folder could not be listed: looked for)
            own_names = [n for n in modules if package and (n == package or n.startswith(package + "."))]
        for name in own if own is not None else own_names:
            modules.pop(name, None)
        last = next(reversed(modules), None)  # the test's modules come after it
        completed, code = False, 0
        try:
            run_path(script, run_name="__main__")
            completed = True
        except SystemExit as exc:
            code = exit_code(exc)
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
            print_exception(type(exc), exc, tb or exc.__traceback__)
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        if watch_finish is not None:
            watch_finish()  # a watch left open, the watch's builtin shadowed in a watched module
        audit("rcb.checkpoint", "returned")
        # like interpreter shutdown: wait for non-daemon threads, run atexit handlers, flush
        try:
            shutdown()
        except BaseException:  # noqa: BLE001
            pass
        try:
            run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                code = code or 120  # what the interpreter reports when it cannot flush stdout
        audit("rcb.checkpoint", "end")
        reported = clock()
        report_modules(last)
        costs[5] = clock() - reported
        try:  # figures only (the completion can reach the list): a number each, or the line is dropped
            body = ("C\t" + "\t".join(repr(c) if ttype(c) in (int, float) else "0" for c in costs[:7])).encode()
            write(proof_fd, body + b"\t" + mac(key, body) + b"\n")
        except BaseException:  # noqa: BLE001
            pass
        body = f"F\t{int(completed)}\t{code}\t{getpid()}".encode()
        try:
            write(proof_fd, body + b"\t" + mac(key, body) + b"\n")
        except OSError:
            pass
        exit_(code)

    return go


#: modules a run reports (``M`` lines), at the most
REPORT_MAX = 4096


def _module_reporter(proof_fd: int, key: bytes):
    """``report(last)``: the names the test added to ``sys.modules`` after ``last`` (the name last
    in it when the test started: a dict keeps its keys in the order they were added, a name removed
    and added again comes last), as MAC'd ``M`` lines (space-separated names, each line under
    PIPE_BUF: one atomic write). They are read from the end back to ``last``, so that no name of
    the server's is touched. Hints for the server's import learning (``learn``), which checks every
    name itself: here only exact strings made of letters, digits, ``_`` and ``.`` are kept (a name
    is never looked into beyond that); when ``last`` is gone (the test removed it), none is sent."""
    write, mac, modules = os.write, proof_mac, sys.modules
    tstr, ttype, tlen, reversed_ = str, type, len, reversed
    limit = REPORT_MAX

    def report(last) -> None:
        try:
            added: list = []
            for name in reversed_(modules):
                if name is last:
                    break
                added.append(name)
            else:
                if last is not None:
                    return  # the name the test started after is gone: which names are new is unknown
            added.reverse()
            names = [n for n in added if ttype(n) is tstr and tlen(n) <= 200
                     and n.isascii() and n.replace(".", "a").replace("_", "a").isalnum()][:limit]
            line: list = []
            size = 0
            for name in names + [None]:
                if name is None or size + tlen(name) > 3000:
                    if line:
                        body = ("M\t" + " ".join(line)).encode()
                        write(proof_fd, body + b"\t" + mac(key, body) + b"\n")
                    line, size = [], 0
                if name is not None:
                    line.append(name)
                    size += tlen(name) + 1
        except BaseException:  # noqa: BLE001 - a hint lost: the run's verdict does not depend on it
            pass

    return report
