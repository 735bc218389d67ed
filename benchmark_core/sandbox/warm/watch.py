"""What the paper's functions around the snippets are handed, watched across each call: the arrays
and tensors a call was given (its arguments, what they hold, what ``self`` keeps), fingerprinted
where the call starts and looked at again where the thread's next call starts, and, what that
next call is not handed, where the test case ends. Standard library only; runs inside the sandbox.

A completion that changes the test's inputs in place (``x[...] = 0`` on the array the test hands
to the reference after it) changes the expected answer with its own, and passes in a fresh
interpreter as here. The static reading names the forms it can see (``ast:mutates-argument``); a
path it does not follow (a helper of the paper's that writes, a mutator looked up by a built
name, an object reached through another) was not seen at all. Here the change itself is seen,
whatever wrote it: ``rcb.changed`` (``<function>:<path>``), compared with the reference run's as
every event is (a paper whose own code updates what it is handed, an optimizer's step, asks for it).

How a function is watched: when a module of the paper's file whose source holds snippet tags is
imported, its functions whose lines meet a snippet's (from a name's first tag line to its last:
the run's file keeps the tags, the completion's lines lie between two of them) are compiled with
a call of ``HOOK`` as their first statement and another in a ``finally`` around their body
(``instrument``): the same lines, the same names, no local variable, no extra frame while the
body runs. ``HOOK`` is a builtin whose name no source can spell (a dot in it), put in place before
the run's first checkpoint (a write to it later is a write to ``builtins``: ``tampering:patch``).
Each call of it checks that it was made by an instrumented function at one of the places this
module compiled (``sys._getframe(1)``: code object and instruction offset), so that code of the
completion's that calls it (to pop the watch before it writes) is reported, ``rcb.watch``.

What a run compiles: the paper's server compiles each annotated file of the paper once, watched,
before its runs are forked (``prepare``). A run's import of the file then compiles it as a plain
import does, parses and watches only the statements around the lines its completion changed (in
the classes that hold them), and takes every other watched function's code from the server's,
moved to its lines, once that function's plain code is found equal to the server's
(``_instrument_changed``); where anything cannot be matched, the whole file is parsed as before.
"""
from __future__ import annotations

import __future__
import ast
import dis
import gc
import marshal
import os
import opcode as _opcode_module
import re
import sys
from types import CodeType

from .scan import STATEMENT_FIELDS

#: the builtin the instrumented functions call (not an identifier: no source spells it)
HOOK = "_rcb.watch"
#: a snippet's tag line (``annotation.TAG_RE``: the host's copy, kept equal by a test)
SNIPPET_TAG = re.compile(
    r"""^(?P<indent>[ \t]*)\#\s*<(?P<close>/?)\s*paper2code\s+name\s*=\s*(?P<q>["'])(?P<name>.*?)(?P=q)\s*/?>\s*$"""
)
#: decorators under which a function is compiled as written (others may read its bytecode: numba's
#: ``njit``, ``torch.compile(fullgraph=True)``; such a function is left as it is)
SAFE_DECORATORS = frozenset(("staticmethod", "classmethod", "property", "setter", "getter", "deleter",
                             "abstractmethod", "wraps", "no_grad", "enable_grad", "inference_mode",
                             "lru_cache", "cache", "cached_property", "overload", "override"))
#: what one run fingerprints at the most: outermost calls of one function, bytes, objects of a call
CALLS_MAX = 2000
BYTES_MAX = 128 << 20
OBJECTS_MAX = 512
PLAIN_MAX = 4096  # places of a list or dict whose plain values are watched
#: what earlier calls of a test case were handed, held by the watch until the case ends (bytes)
KEEP_MAX = 32 << 20
_LINE = re.compile(r"\r\n|\r|\n")
#: where a torch module keeps its parameters, buffers and submodules (named as attributes in a path)
TORCH_SLOTS = frozenset(("_parameters", "_buffers", "_modules"))


def snippet_regions(text: str) -> list[tuple[int, int]]:
    """(first, last) line of each snippet name's tags in ``text``: from its first tag line to its
    last, so that tags a completion writes between its own two cannot narrow its snippet's. Lines
    are numbered as the interpreter numbers them (``\r\n``, ``\r`` and ``\n`` end one); only the
    lines that mention a tag are looked at."""
    lines: dict[str, list[int]] = {}
    if "\r" in text:
        numbered = [(n, line) for n, line in enumerate(_LINE.split(text), 1) if "paper2code" in line]
    else:
        numbered, at, counted, number = [], text.find("paper2code"), 0, 1
        while at >= 0:
            start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
            end = len(text) if end < 0 else end
            number += text.count("\n", counted, start)  # (counted on from the last tag line)
            counted = start
            numbered.append((number, text[start:end]))
            at = text.find("paper2code", end)
    for number, line in numbered:
        found = SNIPPET_TAG.match(line)
        if found is not None:
            lines.setdefault(found.group("name"), []).append(number)
    return [(min(v), max(v)) for v in lines.values()]


def instrument(source: bytes, filename: str):
    """``(code, genuine)`` of a module whose source holds snippet tags: its code with the functions
    that meet a snippet watched, and ``{code object: (entry offsets, exit offsets)}`` of those
    functions; None when there is nothing to watch (no tag, no such function, code that does not
    parse: the import then goes as it would). Where the paper's server compiled the file ahead
    (``prepare``), only what differs from it is parsed (``_instrument_changed``)."""
    if b"paper2code" not in source:
        return None
    text = source.decode("utf-8", "replace")
    regions = snippet_regions(text)
    if not regions:
        return None
    # the tree's thousands of nodes (no cycle among them) would start collections of a warm
    # process's heap (3-40 ms a run, measured); freed as the tree goes, they are never collected
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            prepared = _prepared_for(filename)
            made = _instrument_changed(source, regions, filename, prepared) if prepared is not None else None
        except Exception:  # noqa: BLE001 - (never seen) the whole file is parsed then, as without the server's
            made = None
        if made is None:
            made = _instrument_whole(source, text, regions, filename)
    finally:
        if collecting:
            gc.enable()
    return made


def _instrument_whole(source: bytes, text: str, regions: list, filename: str):
    tree = ast.parse(source, filename)
    # (a generator is told by its body; a file that says neither yield nor await has none)
    marker = _Watcher(regions, _LINE.split(text) if "yield" in text or "await" in text else None)
    marker.visit(tree)
    code = compile(tree, filename, "exec", dont_inherit=True) if marker.watched else None
    del tree
    return (code, _genuine_calls(code, marker.watched)) if code is not None else None


class _Watcher:
    """Adds the watch to each function whose lines meet a region (its qualified name as its label).
    Only statements are walked (a function is defined by a statement; expressions are not looked
    into): a module's tree is walked in a run, before its first line runs."""

    def __init__(self, regions: list[tuple[int, int]], lines: list[str] | None):
        self.regions, self.lines = regions, lines
        self.watched: set[tuple[str, int]] = set()

    def visit(self, tree: ast.Module) -> None:
        self._body(tree.body, [])

    def _body(self, body: list, scope: list) -> None:
        for node in body:
            kind = type(node)
            if kind is ast.ClassDef:
                self._body(node.body, scope + [node.name])
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                self._body(node.body, scope + [node.name, "<locals>"])
                if kind is ast.FunctionDef:  # a coroutine is not watched: its body suspends
                    self._function(node, ".".join(scope + [node.name]))
            else:
                for field in STATEMENT_FIELDS:
                    inner = getattr(node, field, None)
                    if inner:
                        self._body(inner if field != "handlers" and field != "cases" else
                                   [s for h in inner for s in h.body], scope)

    def _function(self, node: ast.FunctionDef, label: str) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        if not any(first <= end and node.lineno <= last for first, last in self.regions):
            return
        if not all(_safe_decorator(d) for d in node.decorator_list):
            return
        text = self.lines[node.lineno - 1:end] if self.lines is not None else ()
        if any("yield" in line or "await" in line for line in text) and _suspends(node):
            return  # a generator's body says yield (or await) somewhere
        _watch_body(node, label)
        # (the line its code starts at: its first decorator's, as the compiler numbers it)
        self.watched.add((node.name, min([node.lineno] + [d.lineno for d in node.decorator_list])))


def _safe_decorator(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        node = node.func
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in SAFE_DECORATORS


def _suspends(node: ast.FunctionDef) -> bool:
    """Whether the function is a generator (a ``yield`` of its own scope)."""
    todo = list(node.body)
    while todo:
        item = todo.pop()
        if isinstance(item, (ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(item))
    return False


def _watch_body(node: ast.FunctionDef, label: str) -> None:
    body = list(node.body)
    head = []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        head = [body.pop(0)]  # the docstring stays the function's first constant
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    names += [args.vararg.arg] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    names += [args.kwarg.arg] if args.kwarg else []
    first = body[0] if body else node
    last = body[-1] if body else node
    enter = ast.Expr(ast.Call(ast.Name(HOOK, ast.Load()), [
        ast.Constant(label), ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()),
        ast.Constant(tuple(names))], []))
    leave = ast.Expr(ast.Call(ast.Name(HOOK, ast.Load()), [], []))
    ast.copy_location(enter, first)
    for part in ast.walk(enter):
        ast.copy_location(part, first)
    end = getattr(last, "end_lineno", None) or last.lineno
    for part in ast.walk(leave):
        part.lineno, part.end_lineno, part.col_offset, part.end_col_offset = end, end, 0, 0
    guarded = ast.Try(body=body or [ast.copy_location(ast.Pass(), first)], handlers=[], orelse=[], finalbody=[leave])
    ast.copy_location(guarded, first)
    node.body = head + [enter, guarded]


def _genuine_calls(code, watched: set) -> dict:
    """``{code: (entry offsets, exit offsets)}``: where each watched function's code calls ``HOOK``
    (the ``CALL`` after each ``LOAD_GLOBAL`` of it; an entry call has arguments, an exit call none).
    A frame's ``f_lasti`` during the call is the CALL's last code unit (3.11: its inline cache's),
    the one before the next instruction; both offsets are kept."""
    found: dict = {}
    todo = [code]
    while todo:
        item = todo.pop()
        todo.extend(c for c in item.co_consts if isinstance(c, type(code)))
        if (item.co_name, item.co_firstlineno) not in watched or HOOK not in item.co_names:
            continue
        entry: set = set()
        leave: set = set()
        for call, arg, after in _hook_calls(item):
            (entry if arg else leave).update((call, after - 2))
        if entry or leave:
            found[item] = (frozenset(entry), frozenset(leave))
    return found


def _hook_calls(code) -> list:
    """(offset, argument count, next instruction's offset) of each CALL of ``HOOK`` in ``code``: read
    from its bytes (CPython 3.11's layout: two-byte units, inline caches after an instruction), or
    through ``dis`` where that layout is not this interpreter's."""
    caches = getattr(_opcode_module, "_inline_cache_entries", None)
    load, call, extended = dis.opmap.get("LOAD_GLOBAL"), dis.opmap.get("CALL"), dis.opmap.get("EXTENDED_ARG")
    calls: list = []
    if not isinstance(caches, list) or None in (load, call, extended):
        loaded, pending = False, None
        for instruction in dis.get_instructions(code):
            if pending is not None:
                calls.append((pending.offset, pending.arg, instruction.offset))
                pending = None
            if instruction.opname == "LOAD_GLOBAL" and instruction.argval == HOOK:
                loaded = True
            elif loaded and instruction.opname == "CALL":
                pending, loaded = instruction, False
        return calls
    raw, names, size = code.co_code, code.co_names, len(code.co_code)
    offset, arg, loaded = 0, 0, False
    while offset < size:
        op = raw[offset]
        arg = (arg << 8) | raw[offset + 1]
        after = offset + 2 + 2 * caches[op]
        if op == extended:
            offset = after
            continue
        if op == load:
            loaded = 0 <= arg >> 1 < len(names) and names[arg >> 1] == HOOK
        elif op == call and loaded:
            calls.append((offset, arg, after))
            loaded = False
        arg = 0
        offset = after
    return calls


#: the paper's annotated files as its server compiled them (``prepare``), by their path in the
#: paper's folder: a run's import of one compiles the file as a plain import does and parses only
#: the statements its completion changed (``_instrument_changed``)
PREPARED: dict = {}
PREPARE_BYTES = 4 << 20  # a larger file is compiled whole in each run
_BLINE = re.compile(rb"\r\n|\r|\n")
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]")
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def prepare(folder: str, files) -> None:
    """Compile the paper's annotated files (``files``: paths in ``folder``) once, in its server
    before its runs are forked: of each, its lines, its statements' spans (``_blocks``), its
    snippets' regions, the first lines of the functions it watches, its code objects that hold a
    watched function, plain and watched (by qualified name and first line), and the watch's places
    in them (``_genuine_calls``, by the code object's id)."""
    PREPARED.clear()
    for rel in sorted(files):
        if not rel.endswith(".py") or rel.endswith("_ref.py"):
            continue
        path = os.path.join(folder, rel)
        try:
            if os.path.islink(path) or os.path.getsize(path) > PREPARE_BYTES:
                continue
            with open(path, "rb") as fh:
                source = fh.read()
            made = _prepared(source, path)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if made is not None:
            PREPARED[rel] = made


#: the paper's other modules its runs import (a ``*_ref.py`` copy of the reference, helpers), as its
#: server compiled them once its reference run named them (``prepare_plain``): (path in the paper's
#: folder, source, marshalled code) each, in a tuple no run can change in place. A run whose import
#: of one reads that source takes its code (``_plain_taker``), as CPython takes a module's cached
#: bytecode while its source is unchanged; any other source is compiled as a plain import does.
PLAIN: tuple = ()
PLAIN_FILES = 64  # files compiled ahead, at the most
PLAIN_BYTES = 16 << 20  # and their sources' bytes


def prepare_plain(folder: str, files, names) -> None:
    """Compile, once, the files of ``files`` (paths in ``folder``) that hold modules of ``names``
    (what a run of the paper's own code imported, its proof's ``M`` lines: ``a.b`` is ``a/b.py`` or
    ``a/b/__init__.py``, or any file whose dotted path ends in it) and that the server did not
    compile watched (``PREPARED``); the test script is run, not imported. Sets ``PLAIN``."""
    global PLAIN
    wanted = {n for n in names if type(n) is str} if names else set()
    made, total = [], 0
    for rel in sorted(files):
        if len(made) >= PLAIN_FILES:
            break
        if not rel.endswith(".py") or rel in PREPARED or os.path.basename(rel) == "paper2code_test.py":
            continue
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        if not parts or not any(".".join(parts[i:]) in wanted for i in range(len(parts))):
            continue
        path = os.path.join(folder, rel)
        try:
            if os.path.islink(path):
                continue
            size = os.path.getsize(path)
            if size > PREPARE_BYTES or total + size > PLAIN_BYTES:
                continue
            with open(path, "rb") as fh:
                source = fh.read()
            data = marshal.dumps(compile(source, path, "exec", dont_inherit=True))
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # (its runs' imports fail or compile it as they would)
        total += len(source)
        made.append((rel, source, data))
    PLAIN = tuple(made)


def _plain_taker(plain: tuple):
    """``(entry_of, code_of)`` over ``plain`` (``PLAIN`` as a run's set-up finds it, before any of the
    paper's code runs), everything they use bound now: a later rebinding of this module's globals
    (``PLAIN``, these functions, ``_moved``, ``_in_paper``) changes no code a run's import takes. ``entry_of(file)``:
    the entry of the file (the longest path in the paper's folder it ends with), or None;
    ``code_of(entry, source, file)``: its code at ``file`` when ``source`` is the source it was
    compiled from, else None (the import then compiles the file as it would)."""
    loads, moved, in_paper, ttype, tbytes = marshal.loads, _moved, _in_paper, type, bytes
    entries = tuple((entry[0], entry) for entry in plain)

    def entry_of(filename: str):
        return in_paper(filename, entries)

    def code_of(entry, source, filename: str):
        if ttype(source) is not tbytes or source != entry[1]:
            return None
        return moved(loads(entry[2]), 0, filename, None)

    return entry_of, code_of


def _prepared(source: bytes, filename: str):
    if b"paper2code" not in source or not _plain_utf8(source):
        return None
    text = source.decode("utf-8", "replace")
    regions = snippet_regions(text)
    if not regions:
        return None
    tree = ast.parse(source, filename)
    lines = _BLINE.split(source)
    blocks = _blocks(tree.body, lines)
    marker = _Watcher(regions, _LINE.split(text))
    marker.visit(tree)
    watched = compile(tree, filename, "exec", dont_inherit=True)
    plain = compile(source, filename, "exec", dont_inherit=True)
    if plain.replace(co_consts=watched.co_consts) != watched:
        return None  # (never seen: the watch changes functions only)
    codes: dict = {}
    genuine = {id(code): offsets for code, offsets in _genuine_calls(watched, marker.watched).items()}
    if not _pair(plain, watched, codes):
        return None
    watched_at = [line for _name, line in marker.watched]
    return lines, blocks, regions, watched_at, codes, genuine


def _plain_utf8(source: bytes) -> bool:
    """Whether ``source`` is UTF-8 with no mark and no coding line: a file in another encoding is
    compiled whole (its lines are not UTF-8 text, which a part parsed alone would be read as)."""
    return not source.startswith(b"\xef\xbb\xbf") and not any(
        _CODING.match(line) for line in source.split(b"\n", 2)[:2])


def _blocks(body: list, lines: list) -> list:
    """(first line, last line, class) of each statement of ``body``; ``class``, for a class's:
    (its name, its line's indentation, its body's first line, its body's blocks), else None."""
    found = []
    for node in body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        inner = None
        if type(node) is ast.ClassDef and node.body:
            line, head = lines[node.lineno - 1], node.body[0]
            body_first = min([head.lineno] + [d.lineno for d in getattr(head, "decorator_list", ())])
            inner = (node.name, line[:len(line) - len(line.lstrip(b" \t\f"))], body_first, _blocks(node.body, lines))
        found.append((first, node.end_lineno or node.lineno, inner))
    return found


def _pair(plain, watched, codes: dict) -> bool:
    """``codes[(qualname, first line)] = (plain, watched)`` for ``watched`` and every code object in
    it that the watch changed; False where the two trees do not pair up."""
    if plain == watched:
        return True
    codes[(plain.co_qualname, plain.co_firstlineno)] = (plain, watched)
    inner = [c for c in plain.co_consts if type(c) is CodeType]
    made = [c for c in watched.co_consts if type(c) is CodeType]
    if len(inner) != len(made):
        return False
    for a, b in zip(inner, made):
        if (a.co_qualname, a.co_firstlineno) != (b.co_qualname, b.co_firstlineno) or not _pair(a, b, codes):
            return False
    return True


def _prepared_for(filename: str):
    return _in_paper(filename, PREPARED.items())


def _in_paper(filename: str, entries):
    """The value of ``entries`` ((path in the paper's folder, value) pairs) whose path is the longest
    that ``filename`` is or ends with (a run's copy of the paper lies in a folder of its own), or None."""
    best, size, sep = None, -1, os.sep
    for rel, value in entries:
        native = rel.replace("/", sep)
        if (filename == native or filename.endswith(sep + native)) and len(native) > size:
            best, size = value, len(native)
    return best


def _changed_lines(old: list, new: list) -> tuple[int, int, int]:
    """(lo, hi, delta): the original's lines ``lo..hi`` became others (none when ``hi < lo``:
    lines were put after line ``hi``), the lines after them moved by ``delta``."""
    size = min(len(old), len(new))
    low, high = 0, size  # the most leading lines alike (lists compared in C, halving)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if old[:middle] == new[:middle] else (low, middle - 1)
    p, low, high = low, 0, size - low  # and trailing, of those left
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if old[len(old) - middle:] == new[len(new) - middle:] else (low, middle - 1)
    s = low
    return p + 1, len(old) - s, len(new) - len(old)


def _fragment_lines(blocks: list, lo: int, hi: int) -> tuple[int, int, list]:
    """(first, last, headers): the original's lines a run parses anew (whole statements, with a
    line on each side of the change: a statement a changed line could continue or decorate), and
    the classes they lie in (their header lines, to parse them in)."""
    headers: list = []
    while True:
        hit = [b for b in blocks if b[0] <= hi + 1 and b[1] >= lo - 1]
        if len(hit) == 1 and hit[0][2] is not None and hit[0][2][2] <= lo - 1 and hi <= hit[0][1]:
            name, indent, _first, inner = hit[0][2]
            headers.append(indent + b"class " + name.encode() + b":")
            blocks = inner
            continue
        return min([lo] + [b[0] for b in hit]), max([hi] + [b[1] for b in hit]), headers


def _instrument_changed(source: bytes, regions: list, filename: str, prepared):
    """``instrument`` of a file its server compiled ahead: the file compiled as a plain import does;
    the statements around the lines that differ from the server's file parsed and watched alone
    (in the classes that hold them); every other code object that holds a watched function is the
    server's, moved to its lines and file once its plain code is found equal. None where any of
    it does not hold (the whole file is then parsed: ``_instrument_whole``)."""
    old, blocks, old_regions, watched_at, codes, genuine_old = prepared
    if not _plain_utf8(source):
        return None
    try:
        plain = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    lines = _BLINE.split(source)
    lo, hi, delta = _changed_lines(old, lines)
    first, last, count = len(old) + 1, len(old), 0  # the original's lines parsed anew (none)
    fresh: dict = {}
    genuine: dict = {}
    if lo <= hi or delta:
        first, last, headers = _fragment_lines(blocks, lo, hi)
        if first - len(headers) < 1:
            return None
        part = b"\n" * (first - 1 - len(headers)) + b"\n".join(headers + lines[first - 1:max(first - 1, last + delta)])
        made = _instrument_part(part, regions, filename, plain.co_flags & _FUTURE_FLAGS, first, last + delta)
        if made is None:
            return None
        fresh, genuine, count = made
    # the functions not parsed anew are watched as before: the regions that reach them are the same
    kept = []
    for a, b in old_regions:
        if first <= a and b <= last:
            continue  # (only the fragment's functions meet it)
        if lo <= a <= hi or lo <= b <= hi:
            return None
        kept.append((a if a < lo else a + delta, b if b < lo else b + delta))
    if sorted(kept) != sorted(r for r in regions if not (first <= r[0] and r[1] <= last + delta)):
        return None
    count += sum(1 for line in watched_at if not first <= line <= last)
    code = _assembled(plain, (first, last + delta, delta, filename, fresh, codes, genuine_old, genuine))
    if code is None or fresh or len(genuine) != count:
        return None  # (a function the whole file's parse would watch is not: never seen)
    return code, genuine


def _instrument_part(part: bytes, regions: list, filename: str, flags: int, first: int, last: int):
    """``({(qualname, first line): code}, genuine, functions watched)`` of the code objects a
    fragment's lines ``first..last`` define, watched; None when it does not parse."""
    try:
        tree = ast.parse(part, filename)
    except (SyntaxError, ValueError):
        return None
    text = part.decode("utf-8", "replace")
    marker = _Watcher(regions, _LINE.split(text) if "yield" in text or "await" in text else None)
    marker.visit(tree)
    code = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    del tree
    fresh: dict = {}
    todo = [code]
    while todo:
        for item in todo.pop().co_consts:
            if type(item) is CodeType:
                if first <= item.co_firstlineno <= last:
                    fresh[(item.co_qualname, item.co_firstlineno)] = item
                else:
                    todo.append(item)  # (a class's header, given to parse its method in)
    return fresh, _genuine_calls(code, marker.watched), len(marker.watched)


def _assembled(code, context):
    """``code`` with each code object in it taken from the fragment (``fresh``, popped) or the
    server's (``codes``) where it holds a watched function; None where one cannot be matched."""
    first, last, delta, filename, fresh, codes, genuine_old, genuine = context
    consts, changed = list(code.co_consts), False
    for index, item in enumerate(consts):
        if type(item) is not CodeType:
            continue
        key = (item.co_qualname, item.co_firstlineno)
        if first <= key[1] <= last:
            made = fresh.pop(key, None)
            if made is None:
                return None
        else:
            moved = 0 if key[1] < first else delta
            entry = codes.get((key[0], key[1] - moved))
            if entry is not None and _moved(entry[0], moved, None, None) == item:
                now: dict = {}
                made = _moved(entry[1], moved, filename, now)
                for was, offsets in genuine_old.items():
                    if was in now:
                        genuine[now[was]] = offsets
            else:
                made = _assembled(item, context)  # (a class whose method changed) or nothing watched
                if made is None:
                    return None
        changed = changed or made is not item
        consts[index] = made
    return code.replace(co_consts=tuple(consts)) if changed else code


def _mover():
    """``_moved``, made as a closure: its recursion and the names it uses are bound here, not looked
    up in this module's globals at each call (``_plain_taker`` holds it from a run's set-up on)."""
    code_type, ttype, ttuple, tid, tany, tzip = CodeType, type, tuple, id, any, zip

    def moved_(code, delta: int, filename: "str | None", moved: "dict | None"):
        """``code`` and the code objects in it ``delta`` lines further, in ``filename``;
        ``moved[id(old)] = new``."""
        consts = code.co_consts
        inner = ttuple(moved_(c, delta, filename, moved) if ttype(c) is code_type else c for c in consts)
        changes: dict = {}
        if delta:
            changes["co_firstlineno"] = code.co_firstlineno + delta
        if filename is not None and code.co_filename != filename:
            changes["co_filename"] = filename
        if tany(a is not b for a, b in tzip(inner, consts)):
            changes["co_consts"] = inner
        made = code.replace(**changes) if changes else code
        if moved is not None:
            moved[tid(code)] = made
        return made

    return moved_


_moved = _mover()


def watcher(audit, busy: list, costs: list | None = None):
    """``(watch, compile_for, finish, late)`` of one run: ``watch`` is ``HOOK``; ``compile_for``
    an ``exec_module`` running the module's watched code (``_modules_watched``); ``late()`` at each
    test case's end; ``finish()`` at the test's: a watch left open in this thread, or ``HOOK`` in a
    watched module's namespace (shadowing the builtin), is ``rcb.watch``. ``costs[6]``: seconds."""
    import _thread
    from time import perf_counter

    get_ident, getframe, clock = _thread.get_ident, sys._getframe, perf_counter
    tid, ttype, tlen, tstr, trange = id, type, len, str, range
    genuine: dict = {}  # id(code) -> (code, entry offsets, exit offsets)
    stacks: dict = {}  # thread -> watches in progress (None: a nested call, not fingerprinted)
    last: dict = {}  # thread -> (label, held) of its last outermost call, as it returned
    #: thread -> {id: (object or a weak reference to it, fingerprint, label, path)}: what earlier
    #: calls of the test case were handed that the calls after them were not (``_looks.keep``)
    earlier: dict = {}
    calls: dict = {}  # label -> outermost calls fingerprinted
    reported: set = set()
    costs = costs if costs is not None else [0.0] * 7
    (known_kinds, digest_of, held_kind, over, count), tracing = _digests(), _tracing()
    compile_for, namespaces, held_by_modules = _modules_watched(genuine, costs, busy)
    take = _taker(known_kinds, _walker(held_kind), digest_of, count, held_by_modules)

    def report(event: str, detail: str) -> None:
        if (event, detail) not in reported:
            reported.add((event, detail))
            audit(event, detail)

    after, keep, late, finish = _looks(last, earlier, stacks, namespaces, digest_of, report, costs, tracing)

    def watch(*args):
        started = clock()
        try:
            me = get_ident()
            before, busy[0] = busy[0], me  # our own sys._getframe: not reported
            try:
                frame = getframe(1)  # who called: a watched function, at a place we compiled?
                code, offset = frame.f_code, frame.f_lasti
                del frame
            finally:
                busy[0] = before
            known = genuine.get(tid(code))
            entering = tlen(args) == 3
            if known is None or known[0] is not code or offset not in known[1 if entering else 2]:
                report("rcb.watch", "forged")
            else:
                watch_call(me, entering, args)
        except Exception:  # noqa: BLE001 - ours: reported, never raised into the paper's function
            report("rcb.harness", "watch failed")
        costs[6] += clock() - started

    def watch_call(me, entering: bool, args) -> None:
        stack = stacks.get(me)
        if stack is None:
            stack = stacks[me] = []
        if not entering:
            if not stack:
                report("rcb.watch", "unbalanced")
                return
            top = stack.pop()
            if top is not None:
                last[me] = top  # looked at later: after a finalizer of the call's frame ran too
            return
        label, values, names = args
        if stack or ttype(label) is not tstr:
            stack.append(None)
            return
        if tracing():  # torch.jit.trace records every tensor op: reading bytes would warn and be traced
            stack.append(None)
            return
        unchanged = after(me)  # the last call's objects, looked at now: their fingerprints reused
        count = calls.get(label, 0) + 1
        calls[label] = count
        if count > CALLS_MAX or over[0]:
            report("rcb.watch", "spent:" + (label if count > CALLS_MAX else "bytes"))
            stack.append(None)
            return
        held = take(values, names, unchanged)
        keep(me, unchanged, held)
        if over[0]:
            report("rcb.watch", "spent:bytes")
        stack.append((label, held))

    return watch, compile_for, finish, late


def _looks(last: dict, earlier: dict, stacks: dict, namespaces: list, digest_of, report, costs: list, tracing):
    """``(after, keep, late, finish)`` for ``watcher`` (no look while torch traces: ``tracing()``)."""
    import _thread
    import _weakref
    from time import perf_counter

    get_ident, clock, weak, tid = _thread.get_ident, perf_counter, _weakref.ref, id
    weak_type, kept_bytes = _weakref.ReferenceType, [0]

    def after(me) -> dict:
        """What the last outermost call of thread ``me`` was handed, changed since it started (in
        the call, or after it by a finalizer of an object of the call's, run as its frame went):
        ``<label>:<path>``. Returns ``{id: (object, fingerprint, size, label, path)}`` of those
        unchanged (the next call's fingerprints of the same objects, taken right after, are these)."""
        top = last.pop(me, None)
        unchanged: dict = {}
        for path, value, digest, size in top[1] if top is not None else ():
            now = digest_of(value, False)
            if now is None or now[0] != digest:
                report("rcb.changed", top[0] + ":" + path)
            else:
                unchanged[tid(value)] = (value, digest, size, top[0], path)
        return unchanged

    def keep(me, unchanged: dict, held: list) -> None:
        """What the last call was handed and the next one (``held``) was not stays watched until
        the test case's end (``late``): a later call could change it (the test may read it after);
        one a later call is handed again is compared there (a list's or dict's plain values by the
        container: looked at again by their earlier places)."""
        kept = earlier.get(me)
        if kept:
            for path, value, digest, _size in held:
                was = kept.pop(key_of(value), None)
                old = alive(was[0]) if was is not None else None
                if old is None or (old is not value and type(old) is not Plain):
                    continue  # (gone, or another object at the same address)
                now = digest_of(old, False) if old is not value else (digest,)
                if now is None or now[0] != was[1]:
                    report("rcb.changed", was[2] + ":" + was[3])
        taken = {key_of(item[1]) for item in held}
        for value, digest, size, label, path in unchanged.values():
            key = key_of(value)
            if key not in taken:
                if kept_bytes[0] + size <= KEEP_MAX:
                    kept_bytes[0] += size  # held until the case ends: the test's locals are gone then
                else:
                    try:
                        value = weak(value)  # (past that, only while the test holds it)
                    except TypeError:
                        pass
                earlier.setdefault(me, {})[key] = (value, digest, label, path)

    def key_of(value) -> int:
        return tid(value.of) if type(value) is Plain else tid(value)

    def alive(held):
        """The object ``held`` is, or refers to weakly (None once it is gone)."""
        return held() if type(held) is weak_type else held

    def late() -> None:
        """At a test case's end (and the run's): ``after`` for every thread, and what earlier calls
        of the test case were handed (``keep``), looked at once more and let go."""
        started = clock()
        try:
            for me in list(last) if not tracing() else ():
                after(me)
            for me in list(earlier) if not tracing() else ():
                kept_bytes[0] = 0
                for value, digest, label, path in earlier.pop(me).values():
                    value = alive(value)
                    now = digest_of(value, False) if value is not None else None
                    if value is not None and (now is None or now[0] != digest):
                        report("rcb.changed", label + ":" + path)
        except Exception:  # noqa: BLE001
            report("rcb.harness", "watch failed")
        costs[6] += clock() - started

    def finish() -> None:
        late()
        try:
            if stacks.get(get_ident()):
                report("rcb.watch", "open")
            for namespace in namespaces:
                if HOOK in namespace:
                    report("rcb.watch", "shadowed")
        except Exception:  # noqa: BLE001
            report("rcb.harness", "watch failed")

    return after, keep, late, finish


def _taker(known_kinds, collect, digest_of, count, held_by_modules: list):
    """``take(values, names, unchanged)``: (path, object, fingerprint, size) of every array and
    tensor a call was handed (its arguments by name) and the paper's other modules hold at their top
    level; a fingerprint in ``unchanged`` (taken a moment ago, ``_looks.after``) is reused, its size
    counted as one taken (``count``)."""
    ttype, tlen, tstr, trange = type, len, str, range

    def take(values, names, unchanged: dict) -> list:
        known_kinds()
        found: list = []
        seen: set = set()
        for i in trange(min(tlen(values), tlen(names))):
            collect(values[i], tstr(names[i]), found, seen, 0)
        for name, namespace in held_by_modules:  # what the paper's other modules hold (a helper hands it out)
            for key, item in list(dict.items(namespace))[:1024]:
                if ttype(key) is tstr and not key.startswith("__"):
                    collect(item, name + "." + key, found, seen, 4)
        held = []
        for path, value in found:
            again = unchanged.get(id(value))
            if again is not None and again[0] is value and count(again[2]):
                held.append((path, value, again[1], again[2]))
                continue
            made = digest_of(value, True)
            if made is not None:
                held.append((path, value, made[0], made[1]))
        return held

    return take


def _digests():
    """``(known_kinds, digest_of, held_kind, over, count)``: the fingerprint of a numpy array or a
    plain torch tensor (``digest_of(value, counted)``: (its shape, strides, dtype and a SHA-256 of
    its bytes, their size); None when it cannot be read, or, ``counted``, when the run's ``BYTES_MAX``
    is spent, which sets ``over[0]``; ``count(size)`` counts a fingerprint reused), the kinds it
    reads (``held_kind(type)``; ``known_kinds()`` looks them up once their modules are imported). A
    tensor is read as numpy sees its CPU storage (no code of a subclass's runs: none is held).
    SHA-256 through OpenSSL (1.3 GB/s with the CPU's SHA instructions here; BLAKE2b, 0.77 GB/s, where
    the interpreter has no OpenSSL)."""
    try:
        from _hashlib import openssl_sha256 as hasher
    except ImportError:
        from _blake2 import blake2b as hasher

    modules, ttype, tlen, tstr = sys.modules, type, len, str
    plain, gone = (int, float, str, bool, bytes, complex, type(None)), object()
    kinds: list = [None, None, None, None, None]  # ndarray, (Tensor, Parameter), TensorBase.detach, uint8, strided
    spent, over = [0], [False]

    def known_kinds() -> None:
        if kinds[0] is None and "numpy" in modules:
            nd = getattr(modules["numpy"], "ndarray", None)
            kinds[0] = nd if isinstance(nd, type) else None
        if kinds[1] is None and "torch" in modules and "torch.nn" in modules:
            torch = modules["torch"]
            tensor, base = getattr(torch, "Tensor", None), getattr(modules.get("torch._C"), "TensorBase", None)
            parameter = getattr(getattr(torch.nn, "parameter", None), "Parameter", None)
            if isinstance(tensor, type) and isinstance(base, type) and isinstance(parameter, type):
                kinds[1], kinds[2] = (tensor, parameter), base.__dict__.get("detach")
                kinds[3], kinds[4] = getattr(torch, "uint8", None), getattr(torch, "strided", None)

    def held_kind(kind) -> bool:
        return kind is kinds[0] or (kinds[1] is not None and kind in kinds[1])

    def count(size: int) -> bool:
        if spent[0] + size > BYTES_MAX:
            over[0] = True
            return False
        spent[0] += size
        return True

    def array_digest(array, counted: bool, extra: str = ""):
        try:
            data = memoryview(array) if array.flags.c_contiguous else array.tobytes()
            size = data.nbytes if ttype(data) is memoryview else tlen(data)
            if counted and not count(size):
                return None
            head = (tstr(array.shape) + tstr(array.strides) + array.dtype.str + extra).encode()
            return hasher(head).digest() + hasher(data).digest(), size
        except Exception:  # noqa: BLE001 - an array that cannot be read as bytes (objects): not watched
            return None

    def tensor_digest(tensor, counted: bool):
        try:
            plain = kinds[2](tensor)
            if plain.layout is not kinds[4] or plain.device.type != "cpu":
                return None
            if plain.is_conj() or plain.is_neg():
                plain = plain.resolve_conj().resolve_neg()
            try:
                array = plain.numpy()
            except Exception:  # noqa: BLE001 - a dtype numpy has not (bfloat16): its bytes
                array = plain.contiguous().view(kinds[3]).numpy()
            return array_digest(array, counted, tstr(tuple(plain.shape)))
        except Exception:  # noqa: BLE001
            return None

    def plain_digest(part, counted: bool):
        try:
            of, text = part.of, []
            if issubclass(ttype(of), list):
                size = list.__len__(of)
                for i in part.places:
                    item = list.__getitem__(of, i) if i < size else gone
                    text.append(ttype(item).__name__ + ":" + (repr(item) if ttype(item) in plain else ""))
            else:
                for key in part.places:
                    item = dict.get(of, key, gone)
                    text.append(ttype(item).__name__ + ":" + (repr(item) if ttype(item) in plain else ""))
            data = "\x00".join(text).encode("utf-8", "surrogatepass")
            if counted and not count(tlen(data)):
                return None
            return hasher(data).digest(), tlen(data)
        except Exception:  # noqa: BLE001 - a value whose text cannot be made (an int of 10,000 digits)
            return None

    def digest_of(value, counted: bool):
        kind = ttype(value)
        if kind is kinds[0]:
            return array_digest(value, counted)
        return plain_digest(value, counted) if kind is Plain else tensor_digest(value, counted)

    return known_kinds, digest_of, held_kind, over, count


def _tracing():
    """``tracing()``: whether ``torch.jit.trace`` is recording (each tensor read would be traced,
    and warn: "Converting a tensor to a NumPy array might cause the trace to be incorrect")."""
    modules, found = sys.modules, [None]

    def tracing() -> bool:
        state = found[0]
        if state is None and "torch._C" in modules:
            state = found[0] = getattr(modules["torch._C"], "_get_tracing_state", False)
        try:
            return bool(state) and state() is not None
        except Exception:  # noqa: BLE001
            return False

    return tracing


class Plain:
    """The plain values a list or dict (an object's namespace among them) holds at ``places``."""

    __slots__ = ("of", "places")

    def __init__(self, of, places: tuple):
        self.of, self.places = of, places


def _walker(held_kind):
    """``collect(value, path, out, seen, depth)``: the arrays and tensors ``value`` holds, appended to
    ``out`` as (path, object): itself, what its lists, tuples and dicts hold, an object's attributes
    read through the C descriptor of its instance namespace (a class's own ``__dict__`` property is
    never asked: no code of the object's runs; a torch module's parameters, buffers and submodules
    named as its attributes), six levels deep, ``OBJECTS_MAX`` at the most; and the plain values
    its lists, dicts and namespaces hold (``Plain``: ``cfg.lr``, ``steps[0]``)."""
    from types import (BuiltinFunctionType, FunctionType, GetSetDescriptorType, MemberDescriptorType, MethodType,
                       ModuleType)

    tid, ttype, tlen, tstr, issub, trange = id, type, len, str, issubclass, range
    mro_of, dict_of = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__
    c_descriptors = (GetSetDescriptorType, MemberDescriptorType)
    opaque = (type, ModuleType, FunctionType, MethodType, BuiltinFunctionType)
    plain = (int, float, str, bool, bytes, complex)
    plain_or_none = (*plain, type(None))

    def instance_dict(value):
        kind = ttype(value)
        for klass in mro_of(kind):
            found = dict_of(klass).get("__dict__")
            if found is not None:
                return found.__get__(value, kind) if ttype(found) in c_descriptors else None
        return None

    def plain_part(container, path: str, out: list) -> None:
        """The plain values (numbers, strings, None) a list or dict holds now, watched by their
        places: one changed or gone is a change (a place added is not: a history appended to)."""
        if issub(ttype(container), list):
            places = [i for i in trange(min(list.__len__(container), PLAIN_MAX))
                      if ttype(list.__getitem__(container, i)) in plain_or_none]
        else:
            places = [k for k, v in list(dict.items(container))[:PLAIN_MAX] if ttype(k) is tstr and ttype(v) in plain_or_none]
        if places:
            out.append((path, Plain(container, tuple(places))))

    def collect(value, path: str, out: list, seen: set, depth: int) -> None:
        if tlen(out) >= OBJECTS_MAX or tlen(seen) > 8 * OBJECTS_MAX or tid(value) in seen:
            return
        kind = ttype(value)
        if held_kind(kind):
            seen.add(tid(value))
            out.append((path, value))
            return
        if depth >= 6 or kind in plain or value is None:
            return
        seen.add(tid(value))
        if issub(kind, (list, tuple)):
            items = list.__getitem__(value, slice(0, 64)) if issub(kind, list) else tuple.__getitem__(value, slice(0, 64))
            for i in trange(tlen(items)):
                collect(items[i], path + "[" + tstr(i) + "]", out, seen, depth + 1)
            if issub(kind, list):
                plain_part(value, path, out)
        elif issub(kind, dict):
            for key, item in list(dict.items(value))[:256]:
                if ttype(key) is tstr:
                    collect(item, path + "[" + repr(key)[:60] + "]", out, seen, depth + 1)
            plain_part(value, path, out)
        elif not issub(kind, opaque):
            own = instance_dict(value)
            if ttype(own) is dict:
                plain_part(own, path, out)  # a configuration's own values: cfg.lr
            for key, item in list(dict.items(own))[:256] if ttype(own) is dict else ():
                if ttype(key) is not tstr:
                    continue
                if key in TORCH_SLOTS and issub(ttype(item), dict):  # a module's parameters: self.lin.weight
                    seen.add(tid(item))
                    for name, held in list(dict.items(item))[:256]:
                        if ttype(name) is tstr:
                            collect(held, path + "." + name, out, seen, depth + 1)
                else:
                    collect(item, path + "." + key, out, seen, depth + 1)

    return collect


def _modules_watched(genuine: dict, costs: list, busy: list):
    """``(compile_for, namespaces, held_by_modules)``: ``compile_for`` (``watcher``) registers the
    watched functions' calls in ``genuine`` and the module's namespace in ``namespaces``; a module it
    does not watch (no tags, a ``*_ref`` module: the reference's) goes into ``held_by_modules``
    (name, namespace), whose top level each watched call fingerprints. The compile runs under
    ``busy`` (no code but ours runs in it: its ``compile`` and ``code.__new__`` events are ours)."""
    import _thread

    from importlib._bootstrap import _call_with_frames_removed as frames_removed
    from time import perf_counter

    tid, ttype, tstr, clock, get_ident = id, type, str, perf_counter, _thread.get_ident
    namespaces: list = []
    held_by_modules: list = []
    # the server's code of the paper's other modules, held from the run's set-up on (``_plain_taker``)
    plain_entry, plain_code = _plain_taker(PLAIN)

    def compile_for(exec_module, loader, origin: str):
        def exec_watched(module):
            started = clock()
            plain = None
            try:
                ref = origin.endswith("_ref.py")
                entry = plain_entry(origin) if ttype(origin) is tstr else None
                source = loader.get_data(origin) if not ref or entry is not None else None
                made = None
                if ttype(source) is bytes and ttype(origin) is tstr:  # (no method of a subclass runs under busy)
                    before, busy[0] = busy[0], get_ident()
                    try:
                        made = instrument(source, origin) if not ref else None
                        if made is None and entry is not None:  # (marshal.loads, code.replace: ours)
                            plain = plain_code(entry, source, origin)
                    finally:
                        busy[0] = before
            except Exception:  # noqa: BLE001 - not read, or not code: the import goes (and fails) as it would
                made = plain = None
            costs[6] += clock() - started  # (what a plain import would spend compiling it is counted too)
            if made is None:
                if plain is not None:  # the module's code as the server compiled it from the same source
                    frames_removed(exec, plain, module.__dict__)
                    loaded = None
                else:
                    loaded = exec_module(module)
                space = module.__dict__
                if ttype(space) is dict and ttype(space.get("__name__")) is tstr:
                    held_by_modules.append((space["__name__"], space))
                return loaded
            code, calls_at = made
            for item, (entry, leave) in calls_at.items():
                genuine[tid(item)] = (item, entry, leave)
            namespace = module.__dict__
            namespaces.append(namespace)
            # the module's own code, run as its loader runs it (the import system's frames are
            # left out of a traceback of an error it raises)
            frames_removed(exec, code, namespace)
            return None

        return exec_watched

    return compile_for, namespaces, held_by_modules
