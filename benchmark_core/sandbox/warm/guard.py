"""The library-namespace guard of a run: every library module's and class's dict, watched by its
version tag (``library_guard``). Standard library only; runs inside the sandbox.

Each part is a small factory whose closures hold the references it needs, bound when the guard is
made (before any of the paper's code runs): see docs/sandboxes.md ("The runner in rooms")."""
from __future__ import annotations

import os
import sys
# A completion can reach any library module's namespace without an audited action (a function's
# __globals__, a module's __dict__, vars(), a class dict taken through mappingproxy comparison), so
# writes there are found by what they leave: CPython bumps a dict's version tag (PEP 509) at every
# change, a value put back included. The guard reads the tags of every library module's and
# library class's dict at each checkpoint (a few thousand 8-byte reads in one call, touching no
# object of the server's: _guard_bulk) and only looks into a dict whose tag moved.
# docs/sandboxes.md ("Library namespaces").

_DICT_VERSION_OFFSET = 24  # PyDictObject: ob_refcnt, ob_type, ma_used, then ma_version_tag
#: modules whose attributes libraries and tests set and put back as they work (warnings.catch_warnings,
#: contextlib.redirect_stdout): a value written and restored there is not reported (a lasting change is)
_SELF_RESTORING = frozenset(("warnings", "sys"))
#: names a class dict gains by itself (abc caches, copyreg's __slotnames__, typing)
#: frameworks' global tables (module: names): what is registered there runs for every later call, the
#: reference's and the test's check among them: torch's global module and optimizer hooks, jax's
#: lowering rules (a rule for ``dot_general`` on the CPU that gives zeros, used by whatever compiles
#: next) and differentiation rules. Watched by version tag, and the dicts a table holds too (jax's
#: rules per platform): any write, put back or not, is ``rcb.framework`` (``audit:framework-global``)
GLOBAL_TABLES = {
    "torch.nn.modules.module": frozenset((
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks",
        "_global_buffer_registration_hooks", "_global_module_registration_hooks",
        "_global_parameter_registration_hooks", "_global_forward_hooks_always_called",
        "_global_forward_hooks_with_kwargs")),
    "torch.optim.optimizer": frozenset(("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")),
    "jax._src.interpreters.mlir": frozenset(("_lowerings", "_platform_specific_lowerings")),
    "jax._src.interpreters.ad": frozenset(("primitive_jvps", "primitive_transposes", "fancy_transposes",
                                           "reducing_transposes")),
    "jax._src.interpreters.batching": frozenset(("fancy_primitive_batchers",)),
}
#: module attributes a framework's own C code rebinds to mirror a global setting of its own:
#: ``torch.set_default_dtype`` (and ``set_default_tensor_type``) rebinds ``torch.Storage`` to the
#: storage class of the new default (``torch.DoubleStorage``). Rebound to one of that module's own
#: classes of that kind, it is the setting changed, state (``rcb.state``: ``audit:library-state``),
#: as the setting itself is, not a patch: an honest completion setting the default dtype passes in
#: a fresh interpreter (anything else bound there is still ``rcb.attr``)
STATE_MIRRORS = {"torch": frozenset(("Storage",))}


def mirror_rebound(module: str, key: str, namespace, now, _type=type, _name=type.__dict__["__name__"].__get__,
                   _issub=issubclass, _tstr=str) -> bool:
    """Whether ``module.key``, a ``STATE_MIRRORS`` entry, was rebound to one of ``module``'s own
    classes of that kind (``namespace`` the module's dict): ``torch.Storage`` to
    ``torch.DoubleStorage``."""
    if key not in STATE_MIRRORS.get(module, ()) or not _issub(_type(now), _type):
        return False
    name = _name(now)
    return _type(name) is _tstr and name.endswith(key) and namespace.get(name) is now


_CLASS_BENIGN = frozenset(("_abc_impl", "__abstractmethods__", "_is_protocol", "__parameters__", "_longMessage",
                           "__orig_bases__", "__slotnames__", "__weakref__", "__annotations__",
                           # torch's RemovableHandle counter: every hook registered, an honest completion's
                           # own module's or tensor's among them, bumps it (a global hook is also a
                           # change of torch.nn.modules.module's hook tables: audit:library-state)
                           "next_id"))


#: the readers below as first made (their probes run once: in a warm server, before any run's fork)
_READERS: dict = {}


def _reader_once(name: str, make):
    """The reader ``name`` as ``make()`` first made it (None included)."""
    if name not in _READERS:
        _READERS[name] = make()
    return _READERS[name]


def _dict_version_reader():
    """A function making a reader of a dict's version tag (``reader(d).value``), or None where
    this interpreter's dict layout is not the one known (the guard then compares identities)."""
    return _reader_once("version", _dict_version_reader_make)


def _dict_version_reader_make():
    """``_dict_version_reader``'s function, made and probed."""
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


def _dict_entries_reader():
    """``entries(d) -> (keys, used, raw)`` of a dict whose keys are all exact str, read from the
    dict's own memory: the address of its keys table, its live entries, and the bytes of every
    entry slot so far, each the addresses of a key and its value (0 and 0 once removed). Reading it
    touches no key or value object: counting a reference to each (iterating the dict) writes to
    the page it lives on, which in a forked run is a page copied (~1,300 pages for sys.modules
    with scipy, pandas and matplotlib: ~4 ms a run). None for a dict of another kind; no function at
    all where a probe does not find CPython 3.11-3.12's layout (PyDictObject: ma_used at 16,
    ma_keys at 32; its keys table: dk_log2_index_bytes at 9, dk_kind at 10, dk_nentries at 24, the
    entries after 32 bytes and 2**dk_log2_index_bytes of indices). Each call is three
    ``ctypes.string_at`` reads (audited events: the caller holds the guard's ``busy``)."""
    return _reader_once("entries", _dict_entries_reader_make)


def _dict_entries_reader_make():
    """``_dict_entries_reader``'s function, made and probed."""
    try:
        import ctypes
        import struct
    except Exception:  # noqa: BLE001 - an interpreter without them
        return None
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in ((3, 11), (3, 12)):
        return None
    string_at, unpack_from, tid = ctypes.string_at, struct.unpack_from, id

    def table(d) -> tuple:
        used, _tag, keys = unpack_from("qQQ", string_at(tid(d) + 16, 24))
        head = string_at(keys, 32)
        return keys, used, head[9], head[10], unpack_from("q", head, 24)[0]

    try:
        key_a, key_b, key_c, value_a, value_b = "rcb_probe_a", "rcb_probe_b", "rcb_probe_c", object(), object()
        probe = {key_a: value_a, key_b: value_b}
        keys, used, index_log2, kind, count = table(probe)
        first = string_at(keys + 32 + (1 << index_log2), 32)
        del probe[key_a]
        after = table(probe)
        second = string_at(keys + 32 + (1 << index_log2), 32)
        other = table({1: value_a})
        ok = (used == 2 and count == 2 and first == struct.pack("4Q", tid(key_a), tid(value_a), tid(key_b), tid(value_b))
              and after == (keys, 1, index_log2, kind, 2) and second == bytes(16) + first[16:] and other[3] != kind
              and table({key_c: value_a})[3] == kind)
    except Exception:  # noqa: BLE001
        return None
    if not ok:
        return None
    unicode_kind = kind

    def entries(d) -> "tuple | None":
        keys, used, index_log2, kind, count = table(d)
        if kind != unicode_kind or not 0 <= count <= 1 << 24 or index_log2 > 40:
            return None
        return keys, used, string_at(keys + 32 + (1 << index_log2), 16 * count)

    return entries


def _library_roots() -> tuple[str, ...]:
    """Where the interpreter's own library and its site-packages live (never the file system root):
    each prefix as written and resolved, since modules' ``__file__`` carry the prefix as ``sys.path``
    spells it (a venv reached through a symlink would otherwise have no library under watch)."""
    prefixes = [p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p]
    roots = {f(p).rstrip("/") for p in prefixes for f in (os.path.abspath, os.path.realpath)}
    return tuple(sorted(r + "/" for r in roots if r))


def _library_guard(roots: tuple[str, ...], runner: str, protected: tuple[str, ...] = ()):
    """The library-namespace guard: ``(take, check, busy, paper)``.

    ``take()`` takes in modules and classes not watched yet (every library module of
    ``sys.modules``: under ``roots``, built in, frozen, a paper's ``*_ref`` module, or a module of
    the paper's folder once ``paper[0]`` names it (a run's launcher does, when its test script is
    known: in a module both the completion's and the reference's code import, ``helpers.act = ...``
    changes what the reference computes), with the classes each defines); ``check(emit, report)``
    compares every watched dict whose version tag moved with its copy and emits, once per change:
    ``rcb.attr`` for a function, class, module or other callable changed or removed, a builtin's
    name added to a module (it shadows the builtin), a class attribute changed, removed or added
    over an inherited one; ``rcb.state`` for a plain value (number, string, bytes, None) changed;
    ``rcb.rewrite`` for a dict written and put back as it was. The keyword defaults of every
    library module's functions (a dict that ``f.__kwdefaults__[name] = x`` changes in place:
    ``torch.testing.assert_close``'s ``atol``) are watched too (any change: ``rcb.attr``), and so
    are the dicts held by the ``protected`` modules, the ``*_ref`` modules and the paper's own
    (tolerance tables such as torch.testing's dtype precisions; any change: ``rcb.state``).
    Everything it uses is bound here: later rebinding of this module's globals or of builtins does
    not reach it (the parts share one plain dict of parallel lists, reachable from their closures only)."""
    from types import ModuleType

    reader = _dict_version_reader()
    module_dict = ModuleType.__dict__["__dict__"].__get__
    # parallel lists: label, the watched dict, its copy, kind ("m" module, "c" class, "k" keyword
    # defaults, "d" a protected module's table, "h" a framework's global table), its owner class (None for
    # a module's), its tag reader
    st = {"labels": [], "dicts": [], "copies": [], "kinds": [], "owners": [], "readers": [], "versions": [],
          "seen_modules": {},  # name -> module object watched under that name
          "seen_ids": set(),  # ids of the dicts watched (a module under two names is watched once)
          "classes_seen": set(),
          "busy": [0],  # the thread doing the guard's own audited work (gc, ctypes): the hook ignores it
          "sys_tag": [reader(module_dict(sys.modules["sys"])["modules"]) if reader else None, -1],
          # sys.modules as last taken in, read from its memory (``_modules_delta``): its keys table, live
          # entries, entries' bytes; the addresses of the names watched and of the "__main__" key
          "modules_base": [None, 0, b"", 0], "watched_keys": set(),
          # the tags of the first dicts watched, read at once (``_guard_bulk``): how many, the getter,
          # the memory it reads, their versions as last compared (an array of them)
          "bulk": [0, None, None, None]}
    paper: list = [None]  # the paper's folder as the run sees it, with a "/" after it (set by the launcher)
    str_keys, is_library, label_of = _guard_filters(roots, runner, paper)
    watch, watch_values, watch_classes = _guard_watchers(st, reader)
    protected_set = frozenset(protected)
    tstr, ttype = str, type

    def watch_inside(label: str, d) -> None:
        """What a library module's dict holds that is watched too: the classes it defines, its
        functions' keyword defaults (the tables of a protected module, a ``*_ref`` module and the
        paper's own modules: ``helpers.TABLE['gain'] = 0`` is read by the reference too)."""
        own = label.startswith("paper:")
        name = d.get("__name__") if own and str_keys(d) else label  # (its classes' __module__)
        watch_classes(name if ttype(name) is tstr else label, d, label)
        watch_values(label, d, label in protected_set or label.endswith("_ref") or own)

    rebase, fresh = _modules_delta(st)
    bulk = _guard_bulk(st) if reader is not None else None
    take = _guard_take(st, is_library, label_of, watch, watch_inside, rebase, bulk)
    diff = _guard_diff(st, str_keys)
    check = _guard_check(st, reader, diff, take, str_keys, watch_inside, fresh)
    return take, check, st["busy"], paper


def _guard_filters(roots: tuple[str, ...], runner: str, paper: list):
    """``(str_keys, is_library, label_of)``: which dicts may be looked into, which modules are the
    library's (the paper's own modules among them once ``paper[0]``, its folder, is known), and
    what a module's changes are reported under: its name, or for a module of the paper's
    ``paper:<its file in the paper>`` (the host leaves out the completion's own file, whatever name
    the test imported it under, ``tamper.audit_verdict``; a module named ``paper:...`` in
    ``sys.modules`` that is not the paper's is reported as ``?paper:...``)."""
    from itertools import repeat
    from operator import is_
    from types import ModuleType

    tstr, ttype, issub, all_, map_ = str, type, issubclass, all, map
    module_dict = ModuleType.__dict__["__dict__"].__get__
    builtin_modules = frozenset(sys.builtin_module_names)
    stdlib_names = frozenset(getattr(sys, "stdlib_module_names", ()))
    runner_dir = runner + "/"

    def str_keys(d) -> bool:
        """Whether every key of ``d`` is an exact str: only then may it be looked up here (a key
        of another type could run its own __eq__ in our lookup, where the hook looks away). Read
        in C (the keys' types compared by identity): no code of a key's runs, no frame of ours."""
        return all_(map_(is_, map_(ttype, d), repeat(tstr)))

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
        if ttype(path) is not tstr or path == runner or path.startswith(runner_dir):
            return False
        return path.startswith(roots) or (paper[0] is not None and path.startswith(paper[0]))

    def label_of(name: str, d) -> str:
        path = d.get("__file__") if str_keys(d) else None
        if (paper[0] is not None and ttype(path) is tstr and path.startswith(paper[0])
                and not name.endswith("_ref")):
            return "paper:" + path[len(paper[0]):]
        return "?" + name if name.startswith("paper:") else name

    return str_keys, is_library, label_of


def _guard_watchers(st: dict, reader):
    """``(watch, watch_values, watch_classes)``: what puts a dict under watch."""
    from types import FunctionType

    import gc

    tstr, ttype, tlen, issub, tid, list_, dict_ = str, type, len, issubclass, id, list, dict
    labels, dicts, copies, kinds, owners = st["labels"], st["dicts"], st["copies"], st["kinds"], st["owners"]
    readers, versions, seen_ids, classes_seen = st["readers"], st["versions"], st["seen_ids"], st["classes_seen"]
    referents = gc.get_referents
    type_mod = type.__dict__["__module__"].__get__
    type_qual = type.__dict__["__qualname__"].__get__
    class_proxy = type.__dict__["__dict__"].__get__
    function_kwdefaults = FunctionType.__dict__["__kwdefaults__"].__get__

    global_tables = GLOBAL_TABLES

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
        """The keyword defaults of the functions in ``d`` (and with ``inner_dicts`` its dicts), and
        the frameworks' global tables it holds (``GLOBAL_TABLES``, with the dicts they hold)."""
        tables = global_tables.get(label, ())
        for key, value in list_(d.items()):
            if ttype(key) is not tstr:
                continue
            if ttype(value) is FunctionType:
                kwd = function_kwdefaults(value)
                if ttype(kwd) is dict:
                    watch(label + "." + key + ".__kwdefaults__", kwd, "k")
            elif inner_dicts and ttype(value) is dict:
                watch(label + "." + key, value, "d")
            elif key in tables and issub(ttype(value), dict):
                watch(label + "." + key, value, "h")
                for inner_key, inner in list_(value.items()):
                    if issub(ttype(inner), dict):
                        watch(label + "." + key + "[" + tstr(inner_key)[:40] + "]", inner, "h")

    def watch_classes(name: str, d, label: str | None = None) -> None:
        """The classes ``d`` holds that its module ``name`` defines, each reported under
        ``<label>.<qualname>`` (``label``: the module's, its name by default)."""
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
                watch((label or name) + "." + tstr(type_qual(value)), inner[0], "c", value)

    return watch, watch_values, watch_classes


def _modules_delta(st: dict):
    """``(rebase, fresh)``: the names added to ``sys.modules`` since its last ``rebase()``, found from
    its memory (``_dict_entries_reader``) instead of by comparing every name and module with those
    watched, which touches each (in a forked run, a page copied per object: about as much as the
    rest of the library guard's work in a run). The guard rebases at the end of each take, the
    audit's listing of ``*_ref`` modules at each listing (``audit._audit_modules``), each with a
    state of its own (``st``: ``modules_base``, ``watched_keys``: the addresses of the names
    watched, ``busy``: the guard's). ``fresh()`` gives the names added since, in order, or None
    when only the full comparison can tell: no such reader, its table rebuilt (grown or made
    general), an entry of a watched name removed or given another module, an entry of any other
    name given another module but ``"__main__"``'s (runpy's, for the test script: watched by
    neither). An unwatched name removed (the launcher's own modules) changes nothing."""
    import _thread
    from struct import unpack_from

    entries = _dict_entries_reader()
    modules, base, watched_keys, busy = sys.modules, st["modules_base"], st["watched_keys"], st["busy"]
    tlen, tid, range_, reversed_, list_ = len, id, range, reversed, list
    get_ident = _thread.get_ident
    empty = bytes(16)

    def read() -> "tuple | None":
        outer = busy[0]
        busy[0] = get_ident()  # string_at's events are the guard's own
        try:
            return entries(modules)
        except Exception:  # noqa: BLE001 - unreadable: compared in full
            return None
        finally:
            busy[0] = outer

    def rebase() -> None:
        now = read() if entries is not None else None
        if now is None:
            base[0] = None
            return
        if not base[3]:  # once, in the process that took the guard in first (every key an exact str)
            base[3] = next((tid(k) for k in list_(modules) if k == "__main__"), 0)
        base[0], base[1], base[2] = now

    def fresh() -> "list | None":
        if base[0] is None:
            return None
        now = read()
        if now is None:
            return None
        keys, used, raw = now
        _keys, was_used, was, main = base
        size = tlen(was)
        if keys != base[0] or tlen(raw) < size:
            return None
        gone = 0
        if raw[:size] != was:
            for start in range_(0, size, 1024):  # blocks of 64 entries, each compared in C first
                if raw[start:start + 1024] == was[start:start + 1024]:
                    continue
                for i in range_(start, min(size, start + 1024), 16):
                    then, now_entry = was[i:i + 16], raw[i:i + 16]
                    if then == now_entry:
                        continue
                    key = unpack_from("Q", then)[0]
                    if key in watched_keys:
                        return None
                    if now_entry == empty and then != empty:
                        gone += 1
                    elif key != main or now_entry[:8] != then[:8]:
                        return None
        added = used - (was_used - gone)
        if added <= 0:
            return [] if added == 0 else None
        names: list = []
        try:
            for name in reversed_(modules):  # the entries added are the last ones
                names.append(name)
                if tlen(names) == added:
                    break
        except RuntimeError:  # changed while read (another thread): compared in full
            return None
        names.reverse()
        return names

    return rebase, fresh


def _guard_bulk(st: dict):
    """``build()``: the version tags of every dict watched so far read in one call (``st["bulk"]``):
    an ``operator.itemgetter`` of their places in a memoryview of the memory the dicts lie in. Each
    tag reader is an object of its own, made before the fork; reading them one by one counts a
    reference to each, a write to the page it lives on, which a forked run copies (~500 pages, ~2 ms
    a run for scipy, pandas and matplotlib's 6,000 dicts). The getter writes to none of them. The
    memoryview is held by the guard's closures only, as the readers are. Without it (dicts not
    8-byte apart, ctypes refusing the view) the readers are read one by one, as before."""
    import _thread
    import ctypes
    from array import array
    from operator import itemgetter

    dicts, readers, versions, bulk, busy = st["dicts"], st["readers"], st["versions"], st["bulk"], st["busy"]
    tid, tuple_, tlen, min_, max_, any_, get_ident = id, tuple, len, min, max, any, _thread.get_ident
    c_char = ctypes.c_char

    def build() -> None:
        count = tlen(readers)
        if count < 2 or count != tlen(dicts):
            return
        places = [tid(d) + _DICT_VERSION_OFFSET for d in dicts]
        low = min_(places)
        span = max_(places) + 8 - low
        if any_((p - low) & 7 for p in places) or span > 1 << 46:
            return
        outer = busy[0]
        busy[0] = get_ident()  # (a ctypes view of memory is an audited event: ours)
        try:
            view = memoryview((c_char * span).from_address(low)).cast("B").cast("Q")
        except Exception:  # noqa: BLE001 - no view: the readers one by one
            return
        finally:
            busy[0] = outer
        getter = itemgetter(*[(p - low) >> 3 for p in places])
        if getter(view) != tuple_(r.value for r in readers):  # it reads what the readers read, or is not used
            return
        # the versions as last compared (a dict moved since is still compared at the next check)
        bulk[:] = [count, getter, view, array("Q", versions[:count])]

    return build


def _guard_take(st: dict, is_library, label_of, watch, watch_inside, rebase, bulk=None):
    """``take()``: watch every library module (and the classes it defines) not watched yet."""
    import gc
    import threading as _threading
    from types import ModuleType

    tstr, ttype, list_ = str, type, list
    modules, seen_modules, busy, sys_tag = sys.modules, st["seen_modules"], st["busy"], st["sys_tag"]
    watched_keys, tid, tlen = st["watched_keys"], id, len
    named: set = set()  # names taken without settling (``settle`` False), their keys not read yet
    get_ident = _threading.get_ident
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    module_dict = ModuleType.__dict__["__dict__"].__get__

    def take(fresh=None, settle: bool = True) -> None:
        """Watch every library module (and the classes it defines) not watched yet, as it is now.
        ``fresh``: the names that may be such modules (``check`` finds them in C, where every key
        of ``sys.modules`` is an exact str and none of those watched was replaced); else all.
        ``settle`` False: only those, ``sys.modules`` not taken as read (a module of the paper's
        at its import's end: the names added before it are still found at the next check)."""
        busy[0] = get_ident()
        # thousands of dict copies would start collections over every object of torch (half a
        # second); nothing here makes cycles
        collecting = gc_enabled()
        gc_disable()
        try:
            items = list_(modules.items()) if fresh is None else [(n, modules.get(n)) for n in fresh]
            for name, module in items:
                if ttype(name) is not tstr:
                    continue
                if seen_modules.get(name) is module:
                    if named and name in named:  # taken by name before: its key itself, now found
                        watched_keys.add(tid(name))
                    continue
                if not is_library(name, module):
                    continue
                seen_modules[name] = module
                if settle:
                    watched_keys.add(tid(name))
                else:
                    named.add(name)
                d = module_dict(module)
                label = label_of(name, d)
                watch(label, d, "m")
                watch_inside(label, d)
            if not settle:
                return
            named.clear()
            if sys_tag[0] is not None:
                sys_tag[1] = sys_tag[0].value
            rebase()
            if bulk is not None and tlen(st["readers"]) - st["bulk"][0] >= 256:
                bulk()  # many dicts watched since (a server's preloads): read at once from now on
        finally:
            if collecting:
                gc_enable()
            busy[0] = 0

    return take


def _guard_diff(st: dict, str_keys):
    """``diff(index, emit)``: one watched dict compared with its copy, each change emitted."""
    from types import ModuleType

    import builtins as _builtins

    tstr, ttype, tlen, issub, list_, dict_, zip_, callable_, any_ = (
        str, type, len, issubclass, list, dict, zip, callable, any)
    labels, dicts, copies, kinds, owners = st["labels"], st["dicts"], st["copies"], st["kinds"], st["owners"]
    modules = sys.modules
    module_dict = ModuleType.__dict__["__dict__"].__get__
    class_proxy = type.__dict__["__dict__"].__get__
    type_mro = type.__dict__["__mro__"].__get__
    scalar_types = (int, float, bool, str, bytes, complex, type(None))
    builtin_names = frozenset(module_dict(_builtins))
    self_restoring, class_benign, global_tables, mirror = _SELF_RESTORING, _CLASS_BENIGN, GLOBAL_TABLES, mirror_rebound
    missing = object()

    def diff(index: int, emit) -> None:
        label, d, old, kind = labels[index], dicts[index], copies[index], kinds[index]
        copies[index] = dict_(d)  # (a dict copy hashes nothing)
        if kind == "h":  # a framework's global table: any write counts, put back or not (a hook that
            # removes itself once it has changed the reference's output leaves the table as it was)
            emit("E", "rcb.framework", "table:" + label + (" changed" if tlen(d) != tlen(old) else " written"))
            return
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
                if key in class_benign:
                    continue
                if ttype(before) in scalar_types and now is not missing and ttype(now) in scalar_types:
                    # a plain value of a class changed for another plain value: a library's own
                    # counter (torch's RemovableHandle.next_id, bumped by every hook an honest
                    # completion registers) or cache (torch.utils.checkpoint's DefaultDeviceType,
                    # None until its first use), as a module's plain value is: state, not a patch
                    if now != before:
                        emit("E", "rcb.state", label + "." + key)
                else:
                    emit("E", "rcb.attr", label + "." + key + (" removed" if now is missing else " changed"))
            elif key in global_tables.get(label, ()):
                emit("E", "rcb.framework", "table:" + label + "." + key + (" removed" if now is missing else " replaced"))
            elif ttype(before) in scalar_types:
                if now is missing or ttype(now) is not ttype(before) or now != before:
                    emit("E", "rcb.state", label + "." + key)
            elif kind == "m" and mirror(label, key, d, now):
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

    return diff


def _guard_check(st: dict, reader, diff, take, str_keys, watch_inside, fresh=None):
    """``check(emit, report=True, full=True)``: compare what moved since the last check."""
    import threading as _threading
    from array import array as array_
    from itertools import compress
    from operator import attrgetter, is_, ne

    tlen, list_, dict_, map_, zip_, range_, any_, all_ = len, list, dict, map, zip, range, any, all
    labels, dicts, copies, readers, versions = st["labels"], st["dicts"], st["copies"], st["readers"], st["versions"]
    bulk = st["bulk"]
    kinds = st["kinds"]
    modules, seen_modules, busy, sys_tag = sys.modules, st["seen_modules"], st["busy"], st["sys_tag"]
    get_value = attrgetter("value")
    get_ident = _threading.get_ident

    def check(emit, report: bool = True, full: bool = True) -> None:
        """Compare what moved since the last check (``report`` False: take it in silently, as a
        guard made now would hold it: a moved module's new classes and functions watched too);
        with ``full`` False only take in modules imported since (and report replaced entries)."""
        if not full:
            pass
        elif reader is not None:
            first = bulk[0]
            if first:  # the first dicts' tags in one read (``_guard_bulk``), kept in a typed array:
                # comparing them counts no reference to an int of the server's
                head = array_("Q", bulk[1](bulk[2]))
                if head != bulk[3]:
                    for i in list_(compress(range_(first), map_(ne, head, bulk[3]))):
                        if report:
                            compare(i, emit)
                        else:
                            take_in(i)
                        versions[i] = head[i]
                    bulk[3] = head
            if tlen(readers) > first:
                now = list_(map_(get_value, readers[first:]))
                if now != versions[first:]:
                    for j in range_(tlen(now)):
                        i = first + j
                        if now[j] != versions[i]:
                            if report:
                                compare(i, emit)
                            else:
                                take_in(i)
                            versions[i] = now[j]
        else:  # no tags: identities, dict by dict
            for i in range_(tlen(dicts)):
                d, old = dicts[i], copies[i]
                if tlen(d) != tlen(old) or any_(a is not c or b is not e for (a, b), (c, e) in zip_(d.items(), old.items())):
                    if report:
                        compare(i, emit)
                    else:
                        take_in(i)
        if sys_tag[0] is None or sys_tag[0].value != sys_tag[1]:
            found = fresh() if fresh is not None else None
            # only names added (read from sys.modules' memory): those taken in, unless one of them
            # is a name watched before (removed at an earlier checkpoint) given another module now
            if found is not None and all_(seen_modules.get(n) in (None, modules.get(n)) for n in found):
                take(found)
                return
            if not str_keys(modules):
                emit("E", "rcb.modules", "sys.modules given a key that is not a string")
                sys_tag[1] = sys_tag[0].value if sys_tag[0] is not None else -1
                return
            # every key an exact str: looked up in C. Names watched and their modules, compared by
            # identity; the names new since (in sys.modules' order, as a full take would meet them)
            names, watched = list_(seen_modules), list_(seen_modules.values())
            if all_(map_(is_, map_(modules.get, names, watched), watched)):
                new = modules.keys() - seen_modules.keys()
                take([n for n in list_(modules) if n in new] if new else ())
                return
            for name, module in list_(seen_modules.items()):
                if modules.get(name, module) is not module and report:
                    emit("E", "rcb.modules", name + " replaced")
            take()

    def take_in(index: int) -> None:
        """One moved dict taken in silently: its copy anew, and for a module's, what it defines now
        (``watch_inside``: gc's referents, an audited event the hook ignores under ``busy``)."""
        outer = busy[0]
        busy[0] = get_ident()
        try:
            copies[index] = dict_(dicts[index])
            if kinds[index] == "m":
                watch_inside(labels[index], dicts[index])
        finally:
            busy[0] = outer

    def compare(index: int, emit) -> None:
        """One watched dict's comparison: whatever goes wrong in it is reported, never swallowed."""
        busy[0] = get_ident()
        try:
            diff(index, emit)
        except BaseException:  # noqa: BLE001 - a dict made to break the comparison is a patch itself
            emit("E", "rcb.attr", labels[index] + " could not be compared")
        finally:
            busy[0] = 0

    return check
