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
# library class's dict at each checkpoint (a few thousand 8-byte reads, well under a millisecond
# with torch) and only looks into a dict whose tag moved. docs/sandboxes.md ("Library namespaces").

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
    """Where the interpreter's own library and its site-packages live (never the file system root):
    each prefix as written and resolved, since modules' ``__file__`` carry the prefix as ``sys.path``
    spells it (a venv reached through a symlink would otherwise have no library under watch)."""
    prefixes = [p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if p]
    roots = {f(p).rstrip("/") for p in prefixes for f in (os.path.abspath, os.path.realpath)}
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
    not reach it (the parts share one plain dict of parallel lists, reachable from their closures only)."""
    from types import ModuleType

    reader = _dict_version_reader()
    module_dict = ModuleType.__dict__["__dict__"].__get__
    # parallel lists: label, the watched dict, its copy, kind ("m" module, "c" class, "k" keyword
    # defaults, "d" a protected module's table), its owner class (None for a module's), its tag reader
    st = {"labels": [], "dicts": [], "copies": [], "kinds": [], "owners": [], "readers": [], "versions": [],
          "seen_modules": {},  # name -> module object watched under that name
          "seen_ids": set(),  # ids of the dicts watched (a module under two names is watched once)
          "classes_seen": set(),
          "busy": [0],  # the thread doing the guard's own audited work (gc, ctypes): the hook ignores it
          "sys_tag": [reader(module_dict(sys.modules["sys"])["modules"]) if reader else None, -1]}
    str_keys, is_library = _guard_filters(roots, runner)
    watch, watch_values, watch_classes = _guard_watchers(st, reader)
    protected_set = frozenset(protected)

    def watch_inside(name: str, d) -> None:
        """What a library module's dict holds that is watched too: the classes it defines, its
        functions' keyword defaults (a protected module's tables)."""
        watch_classes(name, d)
        watch_values(name, d, name in protected_set)

    take = _guard_take(st, is_library, watch, watch_inside)
    diff = _guard_diff(st, str_keys)
    check = _guard_check(st, reader, diff, take, str_keys, watch_inside)
    return take, check, st["busy"]


def _guard_filters(roots: tuple[str, ...], runner: str):
    """``(str_keys, is_library)``: which dicts may be looked into, which modules are the library's."""
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
        return (ttype(path) is tstr and path != runner and not path.startswith(runner_dir)
                and path.startswith(roots))

    return str_keys, is_library


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

    return watch, watch_values, watch_classes


def _guard_take(st: dict, is_library, watch, watch_inside):
    """``take()``: watch every library module (and the classes it defines) not watched yet."""
    import gc
    import threading as _threading
    from types import ModuleType

    tstr, ttype, list_ = str, type, list
    modules, seen_modules, busy, sys_tag = sys.modules, st["seen_modules"], st["busy"], st["sys_tag"]
    get_ident = _threading.get_ident
    gc_enabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable
    module_dict = ModuleType.__dict__["__dict__"].__get__

    def take(fresh=None) -> None:
        """Watch every library module (and the classes it defines) not watched yet, as it is now.
        ``fresh``: the names that may be such modules (``check`` finds them in C, where every key
        of ``sys.modules`` is an exact str and none of those watched was replaced); else all."""
        busy[0] = get_ident()
        # thousands of dict copies would start collections over every object of torch (half a
        # second); nothing here makes cycles
        collecting = gc_enabled()
        gc_disable()
        try:
            items = list_(modules.items()) if fresh is None else [(n, modules.get(n)) for n in fresh]
            for name, module in items:
                if ttype(name) is not tstr or seen_modules.get(name) is module or not is_library(name, module):
                    continue
                seen_modules[name] = module
                d = module_dict(module)
                watch(name, d, "m")
                watch_inside(name, d)
            if sys_tag[0] is not None:
                sys_tag[1] = sys_tag[0].value
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
    self_restoring, class_benign = _SELF_RESTORING, _CLASS_BENIGN
    missing = object()

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

    return diff


def _guard_check(st: dict, reader, diff, take, str_keys, watch_inside):
    """``check(emit, report=True, full=True)``: compare what moved since the last check."""
    import threading as _threading
    from operator import attrgetter, is_

    tlen, list_, dict_, map_, zip_, range_, any_, all_ = len, list, dict, map, zip, range, any, all
    labels, dicts, copies, readers, versions = st["labels"], st["dicts"], st["copies"], st["readers"], st["versions"]
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
            now = list_(map_(get_value, readers))
            if now != versions:
                for i in range_(tlen(now)):
                    if now[i] != versions[i]:
                        if report:
                            compare(i, emit)
                        else:
                            take_in(i)
                        versions[i] = now[i]
        else:  # no tags: identities, dict by dict
            for i in range_(tlen(dicts)):
                d, old = dicts[i], copies[i]
                if tlen(d) != tlen(old) or any_(a is not c or b is not e for (a, b), (c, e) in zip_(d.items(), old.items())):
                    if report:
                        compare(i, emit)
                    else:
                        take_in(i)
        if sys_tag[0] is None or sys_tag[0].value != sys_tag[1]:
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
