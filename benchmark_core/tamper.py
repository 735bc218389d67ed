"""Tampering detection: a static reading of a completion and the verdict on what its run did.

Two sources, one vocabulary of flags (``<source>:<reason>`` slugs, kept in every results.json row):

- ``ast:*`` — ``static_reading`` reads the completion's code where it runs: in its inserted file,
  as the interpreter parses it (a fragment that only parses joined to its file is read all the same,
  and flagged ``ast:scope`` for reaching out of its snippet). Dynamic names and built strings
  do not dodge it: it flags the *capabilities* used (``getattr`` with a non-literal name, dunder
  attributes, imports of process-level modules, fd-level ``os`` calls), not text patterns. AST
  flags never fail a run on their own, but like every flag they keep its evaluation off the ranked
  board until a reviewer clears them (``review_flags``).
- ``tampering:*`` and ``audit:*`` — ``audit_verdict`` compares what the run's audit hook reported
  (sandbox/warm.py) with what the paper's reference run did in the same environment. A departure
  that can forge or bend the verdict is ``tampering:*`` (the run fails, category ``tampering``);
  one that may be honest is an ``audit:*`` flag (the run may pass; a flagged evaluation is not
  ranked until a reviewer clears it).
"""
from __future__ import annotations

import ast
import contextvars
import functools
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["StaticReading", "static_reading", "indent_column", "parser_gives_up", "NESTED_TOO_DEEP", "audit_verdict",
           "review_flags", "TAMPERING_FLAGS", "AUDIT_FLAGS"]

#: flags that fail a run (category ``tampering``)
TAMPERING_FLAGS = (
    "tampering:forged-proof",  # a line on the proof channel without the run's MAC
    "tampering:proof-channel",  # the proof pipe was closed or replaced (the hook ended the run)
    "tampering:no-proof",  # the run's proof is missing or unauthenticated although it passed
    "tampering:exec",  # the process replaced itself (os.exec*)
    "tampering:ctypes",
    "tampering:gc",  # gc.get_objects / get_referrers / get_referents
    "tampering:frame",  # frames reached from the completion (sys._getframe, tb_frame, inspect ...)
    "tampering:trace",  # sys.settrace / sys.setprofile
    "tampering:audithook",
    "tampering:signal",  # a signal sent to another process
    "tampering:proc-mem",  # /proc/*/mem, /proc/*/fd, /dev/fd or a raw fd opened
    "tampering:setattr",  # a special attribute of a protected class written by the completion
    "tampering:patch",  # a function, class or module of any library namespace (or *_ref, __main__) changed
    "tampering:snapshot",  # a *_ref module or the test's namespace differs from the reference run's
    "tampering:skip",  # more skipped test cases than the reference run
    "tampering:code-spoof",  # code compiled under a file name of the interpreter's own library
    "tampering:stdio",  # fd 1 or 2 (the output the published rule reads) replaced
    "tampering:count",  # a test start reported from the completion's code or after the script ended
)
#: flags that keep a passing run off the ranked board until a reviewer clears it
AUDIT_FLAGS = (
    "audit:spawn", "audit:fork", "audit:thread", "audit:signal-self", "audit:signal-handler",
    "audit:frame-library", "audit:fd-list", "audit:environ", "audit:import-ctypes", "audit:code-object",
    "audit:overflow", "audit:other",
    "audit:rewritten",  # a library namespace written and put back between two checkpoints
    "audit:library-state",  # a plain value (number, string) of a library module changed
    "audit:ref-module",  # the completion's code names the paper's *_ref module (static reading)
    "audit:paper-write",  # a file the paper ships, or code in the paper's folder, written by the run
    "audit:unshipped-code",  # code read that neither the paper nor the environment ships (a copy of *_ref)
    "audit:framework-global",  # a kernel registered in torch's dispatcher; its modes or global hooks left changed
    "audit:vacuous-check",  # a check compared something empty with something that is not (it passes whatever the values)
)


def review_flags(flags: Iterable[str]) -> list[str]:
    """The flags that keep an evaluation off the ranked board until a reviewer clears them: all.

    ast:* flags too: a capability the completion's code uses (built attribute names, dunder
    attributes, process-level modules, fd calls) is how the cheats the audit trail cannot see in
    time work (a module's dict patched and restored between two checkpoints, say); honest code
    rarely needs one, and a reviewer clears it in one click."""
    return [f for f in flags if f]


_PROCESS_MODULES = {"os", "sys", "ctypes", "gc", "inspect", "subprocess", "signal", "unittest", "builtins",
                    "importlib", "posix", "_thread", "threading", "multiprocessing", "pty", "mmap", "atexit",
                    "_posixsubprocess", "faulthandler", "resource", "types", "runpy", "traceback", "marshal",
                    "pickle", "code", "codeop", "_ctypes", "socket", "shutil", "numpy.testing", "torch.testing",
                    # the test script's namespace (it holds the reference, under whatever name the test
                    # imported it), and what imports by a string (pkgutil.resolve_name("__main__:r"))
                    "__main__", "pkgutil", "imp", "zipimport"}
_DUNDERS = {"__globals__", "__code__", "__closure__", "__builtins__", "__subclasses__", "__dict__", "__class__",
            "__bases__", "__mro__", "__base__", "__import__", "__loader__", "__spec__", "__self__", "__func__",
            "__defaults__", "__kwdefaults__", "__getattribute__", "__setattr__", "__delattr__", "__reduce__",
            "__reduce_ex__", "__traceback__", "__frame__", "__main__", "__module__", "__qualname__"}
#: dunders a class may define without a flag: how objects are made, shown, called, indexed and
#: iterated. Every other one the completion defines (``def __eq__``, ``__torch_function__ = ...``,
#: a ``"__array_ufunc__"`` key of a class built by ``type()``) is a protocol through which the test's
#: own check can be answered by the completion's object instead of computed: an ``__eq__`` that says
#: True to ``assertEqual``, a tensor subclass whose ``__torch_function__`` answers ``torch.allclose``,
#: an ``__array_function__`` or ``__sub__`` that hands back zeros (``ast:protocol:<name>``).
_PLAIN_DUNDERS = {"__init__", "__post_init__", "__repr__", "__str__", "__call__", "__getitem__", "__setitem__",
                  "__len__", "__iter__", "__next__", "__enter__", "__exit__", "__getstate__", "__setstate__",
                  "__hash__", "__slots__", "__all__", "__doc__", "__version__", "__annotations__", "__name__",
                  "__match_args__", "__author__"}
#: calls that change how the process treats floating-point errors and warnings: the test's own
#: ``np.errstate(over="raise")`` around a call is undone by the completion's ``errstate(over="ignore")``
#: inside it (``ast:error-state:<name>``)
_ERROR_STATE_CALLS = {"errstate", "seterr", "seterrcall", "filterwarnings", "simplefilter", "catch_warnings",
                      "resetwarnings"}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame",
                "ag_frame", "f_builtins", "co_code", "cell_contents"}
_FD_CALLS = {"write", "dup", "dup2", "close", "closerange", "open", "fdopen", "execv", "execve", "execl",
             "execlp", "execvp", "execvpe", "_exit", "kill", "killpg", "fork", "forkpty", "system", "popen",
             "posix_spawn", "posix_spawnp", "spawnv", "spawnve", "pipe", "set_inheritable", "setsid", "abort",
             "putenv", "chroot", "unshare", "setns", "memfd_create", "pidfd_open", "sendfile", "readlink"}
_DYNAMIC_CALLS = {"getattr": "dynamic-getattr", "setattr": "dynamic-setattr", "delattr": "dynamic-delattr",
                  "hasattr": "dynamic-getattr", "__import__": "dynamic-import"}
_CODE_CALLS = {"eval": "eval", "exec": "exec", "compile": "compile", "globals": "globals", "vars": "vars",
               "locals": "locals", "breakpoint": "breakpoint"}


#: names through which a framework is changed for every later call, the reference's and the test's
#: check among them: torch (a kernel registered for ``aten::isclose``, the python dispatcher entered
#: with a ``py_impl`` kernel, a mode pushed for good, a global module or optimizer hook) and jax (a
#: lowering or differentiation rule of an existing primitive, its eager implementation): as
#: attributes, imported names or modules (``ast:framework:<name>``); what the run registers is also
#: in its audit trail (``audit:framework-global``)
_FRAMEWORK_NAMES = {"py_impl", "_dispatch_library", "_EnablePythonDispatcher", "enable_python_dispatcher",
                    "_push_on_torch_function_stack", "_push_on_torch_dispatch_stack", "_meta_registrations",
                    "_python_dispatcher", "_python_dispatch", "_DispatchModule",
                    "_dispatch_tls_set_dispatch_key_included", "_dispatch_tls_set_dispatch_key_excluded",
                    "_push_saved_tensors_default_hooks", "register_module_forward_hook",
                    "register_module_forward_pre_hook", "register_module_full_backward_hook",
                    "register_module_full_backward_pre_hook", "register_module_backward_hook",
                    "register_optimizer_step_pre_hook", "register_optimizer_step_post_hook",
                    "register_lowering", "_lowerings", "_platform_specific_lowerings", "primitive_jvps",
                    "primitive_transposes", "fancy_transposes", "reducing_transposes", "primitive_batchers",
                    "fancy_primitive_batchers", "def_impl", "interpreters"}
#: ... and these when they are a module's attribute (``torch.library``, ``T.library.impl``), not an
#: object's own (``self.library``)
_FRAMEWORK_MODULE_ATTRS = {"library", "Library", "custom_op", "register_kernel", "register_fake",
                            "register_torch_dispatch"}
#: process-level modules as libraries re-export them (``torch.sys``, ``numpy.os``: a module that
#: imported ``sys`` holds it): looked up on a module the file imports, they are ``ast:import:<name>``
_REEXPORTED = {"sys", "os", "gc", "ctypes", "inspect", "builtins", "importlib", "subprocess", "pkgutil", "posix",
               "_thread", "__main__"}
#: ways to raw memory without ctypes' audited calls: an array made over any address (an object whose
#: ``__array_interface__`` names it: ``ast:protocol``; ``x.ctypes.data`` hands out a buffer's
#: address, ``id()`` an object's) or over memory past an array's own (numpy's ``as_strided``, which
#: checks no bounds; torch's checks its storage's). Written through, such an array changes any
#: object in place, a constant of the test's code, the test's inputs, a library function's code,
#: with no write the guard or the hook sees (``ast:raw-memory:<name>``)
_RAW_MEMORY_ATTRS = {"ctypes", "ctypeslib"}
#: allocators that hand out memory as they find it (``np.empty_like``, ``torch.empty``, ``x.new_empty``,
#: a storage made or grown without being cleared): what it held before, a temporary the reference or the
#: test freed, can be the expected answer itself (numpy's ``np.empty`` after a reference that returned
#: a copy of its result gets that result's old block), so a completion returning it unwritten passes
#: (``ast:uninitialized:<name>``; ``empty`` only as a module's: ``df.empty`` is a pandas frame's test)
_UNINITIALIZED = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "resize_",
                  "UntypedStorage", "TypedStorage"}
#: numpy's masked arrays: every ``numpy.testing`` assertion (``assert_allclose``, ``assert_array_equal``,
#: ``assert_equal`` ...) takes a masked element as equal to anything, so ``np.ma.masked_all(shape)``
#: passes any such check (``ast:lenient:<name>``): the module by any path (``np.ma``,
#: ``matplotlib.cbook.np.ma``, ``from numpy import ma``), its constructors, scipy's ``mstats`` (which
#: answer with them) and ``usemask=True`` (``np.genfromtxt``)
_LENIENT_NAMES = {"ma", "MaskedArray", "MaskedConstant", "mstats", "mvoid", "masked", "masked_all", "masked_all_like",
                  "masked_array", "masked_equal", "masked_greater", "masked_greater_equal", "masked_inside",
                  "masked_invalid", "masked_less", "masked_less_equal", "masked_not_equal", "masked_object",
                  "masked_outside", "masked_values", "masked_where", "masked_singleton"}


def _lenient(name: str) -> bool:
    """Whether ``name`` reaches numpy's masked arrays (``_LENIENT_NAMES``; not torch's ``masked_fill``,
    ``masked_select``, nor a helper of the code's own such as ``masked_softmax``)."""
    return name in _LENIENT_NAMES


#: constructors that do the same when given sizes (``np.ndarray((5, 7))``, ``torch.Tensor(5, 7)``, ``x.new(5, 7)``)
_UNINITIALIZED_CONSTRUCTORS = {"ndarray", "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor",
                               "new"}
#: functions that look an attribute up, or call a method, by a name given as a string
_ATTR_BY_NAME = {"attrgetter", "methodcaller"}


def _literal_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


@dataclass(frozen=True)
class StaticReading:
    """What the static reading of an inserted file found: ``flags`` (sorted ``ast:*`` and
    ``audit:ref-module`` slugs), why (``notes``, flag -> explanation) and whether the interpreter's
    parser read the file at all (``parsed``: a file it cannot read fails its run)."""

    flags: list[str]
    notes: dict[str, str]
    parsed: bool


def static_reading(source: str, span: tuple[int, int], *, code: str, reference: tuple[str, tuple[int, int], str],
                   ref_modules: Iterable[str] = ()) -> StaticReading:
    """Read the inserted file ``source`` as the interpreter will, the completion ``code`` on its lines
    ``span`` (first, last: 1-based and inclusive as the interpreter numbers them; last = first - 1
    when it is empty).

    Every node that starts or ends on one of the completion's lines is checked, with all it holds (``ast:*`` flags,
    ``audit:ref-module`` when it names one of the paper's ``*_ref`` modules: the reference copy the
    test compares with, which an honest completion never needs). ``ast:scope`` says the completion
    reaches out of its snippet: it does not parse on its own, a statement of it is indented below
    its snippet's block or goes on past its last line (a backslash, an open bracket or string), or
    it declares the file's encoding. ``reference`` is the paper's own file, span and code at the same
    place: they give the snippet's block column, and what they do themselves is never held against a
    completion (a tag placed inside a bracket, say).

    Callers hold ``sandbox.warm.AST_LOCK``. The parser's own limits (MemoryError, RecursionError on
    code nested thousands deep) are raised to the caller: such a completion cannot be read, and the
    interpreter that would run it cannot compile it either."""
    column, allowed, expected = _reference_scope(*reference)
    nodes, problems = _scope_problems(source, span, code, column)
    problems = {kind: why for kind, why in problems.items() if kind not in allowed}
    if nodes is None:
        return StaticReading([], {}, parsed=False)
    flags: set[str] = set()
    refs = set(ref_modules)
    around = _around(nodes)
    for node, inside in nodes:
        if inside:
            _node_flags(node, flags, refs, around)
    mutated = _argument_mutations(nodes, span)
    if mutated:
        flags.add("ast:mutates-argument")
    flags -= expected
    notes = {}
    for flag in sorted(flags):
        if flag.startswith(("ast:protocol:", "ast:error-state:", "ast:framework:", "ast:raw-memory:",
                            "ast:uninitialized:", "ast:lenient:")) or flag == "ast:dynamic-class":
            notes[flag] = _SHAPED_NOTES[flag.split(":")[1]].format(name=flag.split(":")[-1])
    if "ast:mutates-argument" in flags:
        notes["ast:mutates-argument"] = _SHAPED_NOTES["mutates-argument"].format(name=", ".join(mutated))
    if problems:
        flags.add("ast:scope")
        notes["ast:scope"] = "; ".join(problems.values())
    return StaticReading(sorted(flags), notes, parsed=True)


#: what becomes of code nested past the interpreter's parser's limits (about 3,000 levels in CPython
#: 3.11, where it gives up with MemoryError or RecursionError; brackets stop at 200 with a plain
#: SyntaxError): neither the host nor the sandbox can read it
NESTED_TOO_DEEP = "it is nested too deeply for the interpreter's parser"
#: no code shorter than this reaches those limits (every level takes at least one character)
PARSER_LIMIT_CHARS = 1000


def parser_gives_up(code: str) -> bool:
    """Whether the interpreter's parser gives up on a completion's ``code`` (nested past its limits),
    rather than reading it or finding a plain syntax error; only code long enough is parsed (under
    ``sandbox.warm.AST_LOCK``)."""
    if len(code) < PARSER_LIMIT_CHARS:
        return False
    from .sandbox.warm import AST_LOCK  # noqa: PLC0415 - the host's one parser lock

    try:
        with AST_LOCK:
            _parse_alone(code)
    except (MemoryError, RecursionError):
        return True
    return False


#: a PEP 263 encoding declaration (honoured on a file's first two lines)
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def indent_column(line: str) -> int:
    """The column the interpreter's tokenizer gives a line's indentation (tabs to the next multiple
    of 8, a form feed back to 0)."""
    column = 0
    for char in line:
        if char == " ":
            column += 1
        elif char == "\t":
            column = (column // 8 + 1) * 8
        elif char == "\f":
            column = 0
        else:
            break
    return column


def _parse_alone(code: str) -> bool:
    """Whether a snippet body parses on its own (as a module, or as a function's body: it may hold a
    bare ``return`` or ``yield``)."""
    source = textwrap.dedent(code)
    for text in (source, "def _completion():\n" + textwrap.indent(source, "    ")):
        try:
            ast.parse(text)
            return True
        except (SyntaxError, ValueError):
            continue
    return False


def _scope_problems(source: str, span: tuple[int, int], code: str,
                    column: int) -> tuple[list[tuple[ast.AST, bool]] | None, dict[str, str]]:
    """The file's nodes that reach the completion's lines (None when the file does not parse) and
    each way the completion leaves its scope."""
    first, last = span
    problems: dict[str, str] = {}
    lines = _LINE_BREAK.split(source)
    for number in range(first, min(last, 2) + 1):
        if _CODING.match(lines[number - 1]):
            problems["encoding"] = f"completion line {number - first + 1} declares the file's encoding"
    data = source.encode("utf-8")  # the bytes the sandbox writes (UnicodeEncodeError: it cannot write them)
    try:
        tree = ast.parse(data)  # as the interpreter reads them: an encoding line counts
    except (SyntaxError, ValueError):  # ValueError: NUL bytes (older CPython 3.11 releases)
        return None, problems
    if last >= first and not _parse_alone(code):
        problems["alone"] = "the completion does not parse on its own (it only parses joined to the lines around it)"
    nodes = _nodes_reaching(tree, first, last)
    for node, _inside in nodes:
        if not isinstance(node, ast.stmt) or not first <= node.lineno <= last:
            continue
        line = node.lineno - first + 1
        indent = indent_column(lines[node.lineno - 1])
        if indent < column and "dedent" not in problems:
            problems["dedent"] = (f"completion line {line} is indented to column {indent}, below its snippet's "
                                  f"block (column {column}): it leaves the snippet's block")
        if (node.end_lineno or node.lineno) > last and "continued" not in problems:
            problems["continued"] = (f"the statement on completion line {line} goes on past the completion's last "
                                     f"line, to line {node.end_lineno} of the file (a backslash, an open bracket "
                                     "or an open string)")
    return nodes, problems


def _nodes_reaching(tree: ast.AST, first: int, last: int) -> list[tuple[ast.AST, bool]]:
    """The nodes whose lines (a definition's decorators included) meet ``first``..``last``, each with
    whether it came from those lines: it or an enclosing node starts or ends on one of them (the
    definitions around a snippet only span it). No recursion (a tree may be thousands deep), no visit
    of the rest of the file."""
    found: list[tuple[ast.AST, bool]] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        start = getattr(node, "lineno", None)
        if start is not None and not inside:
            start = min([start] + [d.lineno for d in getattr(node, "decorator_list", ())])
            end = getattr(node, "end_lineno", None) or start
            if end < first or start > last:
                continue
            inside = first <= getattr(node, "lineno", start) <= last or first <= end <= last
        found.append((node, inside))
        stack.extend((child, inside) for child in ast.iter_child_nodes(node))
    return found


#: what the interpreter's tokenizer takes for the end of a line
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


#: why each flag a completion earns only by what its code defines or sets is given (``flag_notes``)
_SHAPED_NOTES = {
    "protocol": ("the completion defines {name}: an object of its own could answer the test's comparison "
                 "or conversion instead of the values being compared"),
    "error-state": ("the completion calls {name}: it changes how floating-point errors or warnings are "
                    "treated, which the test may rely on"),
    "dynamic-class": "the completion builds a class with type(name, bases, namespace): its methods are not read",
    "framework": ("the completion uses {name}: through it torch or jax can be made to run other code for every "
                  "later call, the reference's and the test's check among them"),
    "raw-memory": ("the completion uses {name}: it gives an array over raw memory (any address, or past an "
                   "array's own), through which any object can be changed in place unseen"),
    "lenient": ("the completion uses {name}: numpy's masked arrays, whose masked elements every numpy.testing "
                "assertion takes as equal to anything"),
    "uninitialized": ("the completion uses {name}: it allocates memory without clearing it, and what that memory "
                      "held before (a temporary the reference or the test freed) can be the expected answer"),
    "mutates-argument": ("the completion changes in place what its function was given ({name}): the test may "
                         "hand the same objects to the reference afterwards"),
}

#: names modules are imported under, whose view functions take the object first (np.asarray(x))
_MODULE_NAMES = {"np", "numpy", "torch", "jnp", "jax", "F", "nn"}
#: the names that are modules in the code being read (``_MODULE_NAMES`` and what its imports bind:
#: ``import torch as T``), set by ``_argument_mutations`` for the reading it makes
_MODULES: contextvars.ContextVar[frozenset] = contextvars.ContextVar("modules", default=frozenset(_MODULE_NAMES))
#: methods that change their object in place (beyond torch's ``*_`` convention)
_MUTATING_METHODS = {"fill", "resize", "put", "itemset", "partition", "setflags", "byteswap", "append",
                     "extend", "insert", "pop", "remove", "clear", "reverse", "update", "setdefault", "popitem"}
#: functions that write into their first argument
_MUTATING_FUNCTIONS = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis", "shuffle",
                       "at"}  # a ufunc's unbuffered in-place form: np.multiply.at(x, i, 0)
#: the keywords that name what those functions write into (``np.copyto(dst=x, ...)``)
_WRITTEN_KEYWORDS = {"dst", "a", "arr", "x"}
#: numpy's ufuncs by how many inputs they take: a positional argument after those is their output,
#: written in place (``np.multiply(x, 0, x)``, ``np.exp(x, x)``)
_UFUNC_INPUTS = dict.fromkeys((
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "power", "float_power", "maximum",
    "minimum", "fmax", "fmin", "logaddexp", "logaddexp2", "arctan2", "hypot", "copysign", "mod", "remainder",
    "fmod", "heaviside", "nextafter", "ldexp", "greater", "less", "equal", "not_equal", "greater_equal",
    "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"), 2)
_UFUNC_INPUTS.update(dict.fromkeys((
    "negative", "positive", "absolute", "fabs", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
    "square", "cbrt", "reciprocal", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "arcsinh", "arccosh", "arctanh", "sign", "floor", "ceil", "trunc", "rint", "logical_not", "invert", "isnan",
    "isinf", "isfinite", "deg2rad", "rad2deg"), 1))
#: calls that hand back (a view of) the object they are given: a write to the result writes to it
_VIEWS = {"view", "view_as", "reshape", "detach", "transpose", "permute", "squeeze", "unsqueeze", "expand",
          "expand_as", "narrow", "select", "diagonal", "numpy", "ravel", "flatten", "unflatten", "swapaxes",
          "moveaxis", "movedim", "t", "T", "mT", "data", "real", "imag", "asarray", "asanyarray", "as_tensor",
          "from_numpy", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_to", "as_strided", "unfold",
          "split", "chunk", "unbind", "values", "items", "frombuffer", "cast", "memoryview", "nditer",
          # the object itself when it already is what is asked for (a contiguous float32 tensor's
          # .contiguous(), .float(), .to(its dtype)), its memory, or its buffer handed on
          "contiguous", "to", "float", "double", "half", "bfloat16", "cpu", "type_as", "resolve_conj",
          "resolve_neg", "storage", "untyped_storage", "_typed_storage", "__array__", "__dlpack__",
          "from_dlpack", "ascontiguousarray", "asfortranarray", "require", "asarray_chkfinite"}


def _argument_mutations(nodes: list[tuple[ast.AST, bool]], span: tuple[int, int]) -> list[str]:
    """The parameters (of the function the snippet lies in, or of functions and methods it defines)
    that the completion's code changes in place: a subscript or attribute written, an augmented
    assignment, a mutating method (torch's ``x.zero_()``, ``x.fill(0)``, ``lst.append``) or
    function (``np.copyto(x, ...)``, an ``out=`` argument, ``operator.imul(x, 0)``) applied to the
    parameter or to a view of it (``x.view(-1)``, ``x[0]``, ``np.asarray(x)``, a row of it in a
    ``for``, each of ``(x, w)`` in a ``for`` or a comprehension, a name bound to one of those); a
    helper the completion defines (a local function, a lambda) that changes its own parameter in
    place, called with one; a mutator handed on uncalled to a call that is also handed the
    parameter (``map(torch.Tensor.zero_, [x])``, ``map(lambda t: t.zero_(), (x,))``). A name bound
    again at the completion's top level to something else, before, no longer counts (``x =
    x.copy()``); a container the parameter is put in (``store = [x]``, ``d["a"] = x``, ``box.v = x``,
    ``store.append(x)``), an element taken out of it later (``store[0]``, ``store.pop()``,
    ``d["a"]``, ``box.v``, each of a ``for`` over it) or the container handed to a mutator or a
    helper (``torch._foreach_zero_(store)``). A reading of code, not of behaviour: a parameter
    reached through a module imported under another name, an object's method that stores it, or a
    global, is not seen."""
    first, last = span
    if last < first:
        return []
    # the functions around the snippet and those the completion defines (every one here meets its lines)
    defs = [node for node, _inside in nodes if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def within(outer: ast.AST, inner: ast.AST) -> bool:
        return outer is not inner and outer.lineno <= inner.lineno and (  # type: ignore[attr-defined]
            inner.end_lineno or inner.lineno) <= (outer.end_lineno or outer.lineno)  # type: ignore[attr-defined]

    # a function the completion defines inside a function is a local helper: its parameters are its
    # own; one at module or class level is what the test calls
    local = sorted((d for d in defs if first <= d.lineno <= last and any(within(o, d) for o in defs)),
                   key=lambda d: (d.lineno, d.col_offset))  # in order: a helper calling an earlier one
    params = {name for d in defs if not any(d is h for h in local) for name in _parameters(d)}
    if not params:
        return []
    statements = sorted((node for node, _inside in nodes if isinstance(node, ast.stmt) and first <= node.lineno <= last),
                        key=lambda n: (n.lineno, n.col_offset))
    imported = {alias.asname or alias.name.partition(".")[0] for node, _inside in nodes
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    token = _MODULES.set(frozenset(_MODULE_NAMES | imported))  # T.from_dlpack(x) under import torch as T
    try:
        return _read_mutations(statements, local, params)
    finally:
        _MODULES.reset(token)


def _read_mutations(statements: list[ast.stmt], local: list, params: set[str]) -> list[str]:
    """``_argument_mutations``' reading of the completion's ``statements``, its ``local`` helpers
    and the parameters ``params``."""
    # the local helpers that change a parameter of their own in place: name -> its positions and names
    helpers: dict[str, set] = {}
    for helper in local:
        names = [a.arg for a in helper.args.posonlyargs + helper.args.args]
        body = sorted((n for n in ast.walk(helper) if isinstance(n, ast.stmt) and n is not helper),
                      key=lambda n: (n.lineno, n.col_offset))
        changed = _mutations_of(body, set(names), helpers, _top_level(body))
        if changed:
            helpers[helper.name] = {i for i, n in enumerate(names) if n in changed} | changed
    return sorted(_mutations_of(statements, params, helpers, _top_level(statements)))


def _mutations_of(statements: list[ast.stmt], params: set[str], helpers: dict[str, set], top: set[int]) -> set[str]:
    """Which of ``params`` the ``statements`` (in order; ``top`` the ids of their top level) change
    in place, ``helpers`` the local functions known to change their own parameters (by position and
    name)."""
    tracked = {name: name for name in params}  # a name -> the parameter it is (a view or part of)
    # names that are the object itself or a view of it (y = x, y = x.view(-1)), not a part of it
    # (n = x.shape[0]): an augmented assignment to one of these writes in place
    whole = dict(tracked)
    helpers = dict(helpers)
    found: set[str] = set()
    held: frozenset = frozenset()  # the markers of containers holding a parameter (``_held_markers``)
    for stmt in statements:
        bound: list[tuple[ast.AST, ast.AST, bool]] = []
        # a container the statement puts a parameter into holds it: what is taken out of it later
        # is that parameter (``store = [x]; store[0].zero_()``, ``box.v = x; box.v[:] = 0``)
        if isinstance(stmt, ast.Assign) and id(stmt) in top:
            # a name bound again at the top level no longer holds what it held (store = [x.copy()])
            rebound = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            gone = {m for m in held if _marker_owner(m) in rebound}
            held -= gone
            for marker in gone:
                tracked.pop(marker, None)
                whole.pop(marker, None)
        for marker, names in _stored(stmt, functools.partial(_view_roots, held=held)):
            names = sorted(n for n in names if n in tracked)
            if names:
                tracked[marker] = whole[marker] = tracked[names[0]]
                held = held | {marker}
        if isinstance(stmt, ast.Assign):
            bound = [(target, stmt.value, False) for target in stmt.targets]
            if (isinstance(stmt.value, ast.Lambda) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                changed = _lambda_mutations(stmt.value, helpers)
                if changed:
                    helpers[stmt.targets[0].id] = changed  # z = lambda t: t.zero_(); z(x)
            elif len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and _unbound_mutator(stmt.value, helpers):
                helpers[stmt.targets[0].id] = {0}  # z = torch.Tensor.zero_; z(x): changes its first argument
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:  # from numpy import copyto as cp; cp(x, 0)
                if alias.asname and (alias.name in _MUTATING_FUNCTIONS | _OPERATOR_INPLACE | _OPERATOR_WRITES
                                     or (alias.name.endswith("_") and not alias.name.startswith("_"))):
                    helpers[alias.asname] = {0}
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):  # with np.nditer(x, ...) as it
            bound = [(item.optional_vars, item.context_expr, False) for item in stmt.items if item.optional_vars]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            bound = [(stmt.target, stmt.iter, True)]  # the rows of a tensor are views of it
        # a comprehension's variable: each of what it walks (``[t.zero_() for t in (x,)]``)
        bound += [(node.target, node.iter, True) for node in _own_nodes(stmt) if isinstance(node, ast.comprehension)]
        for target, value, walked in bound:
            names = [t for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
                     if isinstance(t, ast.Name)]
            if isinstance(stmt, ast.Assign) and len(names) == 1 and names[0] is target and _container(target.id, value):
                # store = [x]: a container holding it (above), not a view of it (store.append(y)
                # changes the list, not x); bound to something else from here on
                if id(stmt) in top:
                    tracked.pop(target.id, None)
                    whole.pop(target.id, None)
                continue
            roots = [r for r in sorted(_view_roots(value, held=held)) if r in tracked]
            full = [r for r in sorted(_view_roots(value, whole=True, held=held)) if r in whole]
            if walked and isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                # for t in (x, w): t is each of them, whole
                full = [r for elt in value.elts for r in sorted(_view_roots(elt, whole=True, held=held)) if r in whole]
            elif walked:
                # for t in store (store.values()): each element of a container holding a parameter may be it
                inside = sorted(m for m in held if _marker_owner(m) in _view_roots(value) and m.startswith("[]"))
                full += inside
                roots += inside
            for t in names:
                if roots:
                    tracked[t.id] = tracked[roots[0]]  # an alias of a parameter (or of a view or part of one)
                    if len(names) == 1 and full and (walked or isinstance(stmt, ast.Assign)):
                        whole[t.id] = whole[full[0]]
                elif id(stmt) in top and isinstance(stmt, ast.Assign):
                    tracked.pop(t.id, None)  # bound to something else from here on
                    whole.pop(t.id, None)
        for name, in_place in _mutated_roots(stmt, helpers, held):
            names_of = tracked if in_place else whole
            if name in names_of:
                found.add(names_of[name])
    return found


def _lambda_mutations(node: ast.Lambda, helpers: dict[str, set]) -> set:
    """The positions and names of the parameters a lambda changes in place (``lambda t: t.zero_()``)."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    changed = _mutations_of([ast.Expr(value=node.body, lineno=node.lineno, col_offset=node.col_offset)],
                            set(names), helpers, set())
    return ({i for i, n in enumerate(names) if n in changed} | changed) if changed else set()


#: the operator module's functions that change their first argument (in place for arrays, tensors
#: and lists: ``operator.imul(x, 0)``; ``setitem``/``delitem`` always)
_OPERATOR_INPLACE = {"iadd", "isub", "imul", "imatmul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior",
                     "ixor", "ilshift", "irshift", "iconcat"}
_OPERATOR_INPLACE |= {f"__{name}__" for name in _OPERATOR_INPLACE}
_OPERATOR_WRITES = {"setitem", "delitem", "__setitem__", "__delitem__"}


#: owners whose attributes are unbound methods (``torch.Tensor.zero_``, ``np.ndarray.fill``,
#: ``list.append``) or module functions (``torch.nn.init.zeros_``, ``np.copyto``): handed on, they
#: change what they are later given
_UNBOUND_OWNERS = {"list", "dict", "set", "bytearray", "ndarray", "operator", "init", "functional"} | _MODULE_NAMES
#: torch's in-place methods that a completion may take bound and call later (``f = x.mul_; f(0)``);
#: other names ending in ``_`` on an object are as often plain attributes (a fitted ``model.coef_``)
_BOUND_INPLACE = {"zero_", "fill_", "copy_", "set_", "resize_", "add_", "sub_", "mul_", "div_", "neg_", "abs_",
                  "clamp_", "clamp_min_", "clamp_max_", "masked_fill_", "masked_scatter_", "index_fill_",
                  "index_copy_", "index_add_", "index_put_", "scatter_", "scatter_add_", "put_", "uniform_",
                  "normal_", "exp_", "log_", "pow_", "sqrt_", "sigmoid_", "tanh_", "relu_", "addcmul_",
                  "addcdiv_", "lerp_", "apply_", "map_", "requires_grad_", "detach_", "t_", "transpose_",
                  "squeeze_", "unsqueeze_", "resize_as_", "copysign_", "floor_", "ceil_", "round_", "sign_",
                  "where_", "nan_to_num_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
                  "log_normal_"}


def _unbound_mutator(node: ast.AST, helpers: dict[str, set]) -> bool:
    """Whether ``node``, handed on uncalled, is a function that changes what it is later given:
    ``torch.Tensor.zero_``, ``np.ndarray.fill``, ``np.copyto``, ``operator.imul``, a local helper or
    a lambda that changes its parameter, a ``functools.partial`` of one of those."""
    if isinstance(node, ast.Lambda):
        return bool(_lambda_mutations(node, helpers))
    if isinstance(node, ast.Name):
        return node.id in helpers or node.id in _OPERATOR_INPLACE | _OPERATOR_WRITES
    if isinstance(node, ast.Attribute):
        name, owner = node.attr, node.value
        last = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
        if not (last[:1].isupper() or last in _UNBOUND_OWNERS or last in _MODULES.get()):
            return False  # an object's own method or attribute (``out.append``, ``model.coef_``)
        return ((name.endswith("_") and not name.endswith("__") and not name.startswith("_"))
                or name in _MUTATING_METHODS or name in _MUTATING_FUNCTIONS
                or name in _OPERATOR_INPLACE | _OPERATOR_WRITES)
    if isinstance(node, ast.Call) and node.args and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "partial")
            or (isinstance(node.func, ast.Name) and node.func.id == "partial")):
        return _unbound_mutator(node.args[0], helpers)  # functools.partial(torch.Tensor.mul_, ...)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and _literal_str(node.args[1])):
        # getattr(torch.Tensor, "zero_"): the attribute by its literal name
        return _unbound_mutator(ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Load()), helpers)  # type: ignore[attr-defined]
    return False


def _parameters(node: ast.AST) -> list[str]:
    args = node.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if names and names[0] in {"self", "cls"}:
        names = names[1:]
    return names


def _top_level(statements: list[ast.stmt]) -> set[int]:
    """The statements no other statement of the list holds (the completion's own top level)."""
    held = {id(child) for stmt in statements for child in ast.walk(stmt) if child is not stmt}
    return {id(stmt) for stmt in statements if id(stmt) not in held}




def _view_roots(node: ast.AST, whole: bool = False, held: frozenset = frozenset()) -> set[str]:
    """Every name ``node`` may be (a view or a part of): ``x``, ``x.data``, ``x.weight``, ``x[0]``,
    ``x.view(-1)``, ``np.asarray(x)``, either of ``x.copy() if c else x``, ``[a, x][1]``; nothing for
    what a call makes anew (``x.sum()``). With ``whole``, only the object itself or a view of all of
    it (no attribute, no subscript but a slice, no container). ``held``: the holders' markers
    (``_held_markers``): an element taken out of a container holding a parameter (``store[0]``,
    ``store.pop()``, ``box.v``) is named by its marker."""
    found: set[str] = set()
    stack = [node]
    while stack:
        node = stack.pop()
        if held:
            found |= _held_markers(node, held)
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and whole and node.attr not in _VIEWS:
            continue
        elif isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred, ast.NamedExpr)):
            if whole and isinstance(node, ast.Subscript) and not _slices(node.slice):
                continue  # x[0] may be a number; x[:], x[...], x[1:, ::2] are views
            stack.append(node.value)
        elif isinstance(node, ast.IfExp):
            stack.extend((node.body, node.orelse))
        elif isinstance(node, ast.BoolOp):
            stack.extend(node.values)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not whole:
            stack.extend(node.elts)
        elif isinstance(node, ast.Dict) and not whole:
            stack.extend(v for v in node.values if v is not None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEWS:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in _MODULES.get():
                stack.extend(node.args[:1])
            else:
                stack.append(owner)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
              and node.func.id in {"enumerate", "reversed", "iter", "zip"} and not whole):
            stack.extend(node.args)  # for i, row in enumerate(x): the rows of x
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "memoryview":
            stack.extend(node.args[:1])  # memoryview(x): its buffer, written through
    return found


#: a container's methods that take what they are handed in (``store.append(x)``: ``store`` holds ``x``)
_STORING_METHODS = {"append", "appendleft", "insert", "extend", "extendleft", "add", "setdefault", "update",
                    "put", "put_nowait", "__setitem__"}
#: a container's methods that give one of its elements back (``store.pop().zero_()``)
_TAKING_METHODS = {"pop", "popleft", "popitem", "get", "setdefault", "__getitem__"}


def _key_marker(name: str, key: ast.AST | None) -> str:
    """The marker of a container's element: ``[]d['a']`` under a literal key of a dict (a key the
    completion spelled), ``[]d`` for any other (a list's, whose places move)."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return f"[]{name}[{key.value!r}]"
    return "[]" + name


def _held_markers(node: ast.AST, held: frozenset) -> set[str]:
    """The markers of ``held`` (containers holding a parameter) that ``node`` may take an element
    of: ``store[i]``, ``store.pop()``, ``store.get(k)``, ``d["a"]`` (only what is under ``"a"`` or
    under no known key), ``box.v`` (that attribute)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return {node.value.id + "." + node.attr} & held
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        name, key = node.value.id, node.slice
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
          and node.func.attr in _TAKING_METHODS):
        name, key = node.func.value.id, node.args[0] if node.args else None
    else:
        return set()
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return {"[]" + name, _key_marker(name, key)} & held
    return {m for m in held if m == "[]" + name or m.startswith("[]" + name + "[")}


def _marker_owner(marker: str) -> str:
    """The name of the container a marker is of (``[]d['a']``, ``box.v``: ``d``, ``box``)."""
    return re.split(r"[.\[]", marker.removeprefix("[]"), maxsplit=1)[0]


def _slices(node: ast.AST) -> bool:
    """Whether a subscript's index takes a slice of every element it reaches (``:``, ``...``,
    ``1:, ::2``): what it gives is a view, never a number."""
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    return bool(parts) and all(isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and p.value is Ellipsis)
                               for p in parts)


#: calls that make a container of what they are handed (``list(x)``: the rows of ``x``; ``dict(a=x)``)
_CONTAINER_CALLS = {"list", "tuple", "dict", "set", "deque", "OrderedDict", "defaultdict", "SimpleNamespace"}


def _container(name: str, node: ast.AST) -> list[tuple[str, ast.AST]]:
    """What a new container ``node`` bound to ``name`` holds, by marker: ``[x, w]``, ``list(x)``
    (the rows of ``x``) under ``[]name``; ``{"a": x}``, ``dict(a=x)`` under ``[]name['a']``;
    ``SimpleNamespace(v=x)`` under ``name.v``. Nothing when it is not a container."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [("[]" + name, node)]
    if isinstance(node, ast.Dict):
        return [(_key_marker(name, k), v) for k, v in zip(node.keys, node.values)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONTAINER_CALLS:
        by_keyword = (lambda k: f"{name}.{k}") if node.func.id == "SimpleNamespace" else (lambda k: f"[]{name}[{k!r}]")
        return ([("[]" + name, arg) for arg in node.args]
                + [(by_keyword(k.arg) if k.arg else "[]" + name, k.value) for k in node.keywords]
                or [("[]" + name, node)])
    return []


def _stored(stmt: ast.stmt, roots_of) -> list[tuple[str, set[str]]]:
    """What ``stmt`` puts into a named container, as (the marker of where it is put, the names put
    there): ``store = [x]``, ``store[k] = x``, ``box.v = x``, ``store.append(x)``,
    ``setattr(box, "v", x)``, ``operator.setitem(store, k, x)``."""
    out: list[tuple[str, set[str]]] = []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            if isinstance(target, ast.Name):
                out.extend((marker, roots_of(part)) for marker, part in _container(target.id, stmt.value))
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                out.append((target.value.id + "." + target.attr, roots_of(stmt.value)))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                out.append((_key_marker(target.value.id, target.slice), roots_of(stmt.value)))
    for node in _own_nodes(stmt):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        handed = [*node.args, *(k.value for k in node.keywords)]
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.attr in _STORING_METHODS):
            out.append(("[]" + func.value.id, {r for arg in handed for r in roots_of(arg)}))
        elif (isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) == 3
              and isinstance(node.args[0], ast.Name) and _literal_str(node.args[1])):
            out.append((node.args[0].id + "." + node.args[1].value, roots_of(node.args[2])))  # type: ignore[attr-defined]
        elif (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "") in (
                "setitem", "__setitem__") and len(node.args) == 3 and isinstance(node.args[0], ast.Name):
            out.append((_key_marker(node.args[0].id, node.args[1]), roots_of(node.args[2])))
    return out


def _mutated_roots(stmt: ast.stmt, helpers: dict[str, set] | None = None,
                   held: frozenset = frozenset()) -> list[tuple[str, bool]]:
    """The names this statement (not the statements it holds) changes, as ``_view_roots`` names them,
    each with whether the change is in place whatever the name holds (``x[0] = 1``, ``x.zero_()``)
    or only when it holds an array, tensor or list (``x += 1``). ``helpers``: the local functions
    that change their own parameters (name -> positions and names), and what a call hands to them
    or to a mutator it is handed uncalled (``map(torch.Tensor.zero_, [x])``)."""
    helpers = helpers or {}
    roots_of = functools.partial(_view_roots, held=held)

    def handed_roots(arg: ast.AST) -> set[str]:
        """What an argument may be, a container holding a parameter with its elements (a helper or
        a mutator handed ``store`` may change what it holds: ``torch._foreach_zero_(store)``)."""
        found = roots_of(arg)
        if isinstance(arg, ast.Name):
            found |= {m for m in held if _marker_owner(m) == arg.id}
        return found

    roots: list[tuple[str | None, bool]] = []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete)):
        targets = stmt.targets if isinstance(stmt, (ast.Assign, ast.Delete)) else [stmt.target]
        for target in targets:
            for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(t, (ast.Subscript, ast.Attribute)):
                    roots.extend((r, True) for r in roots_of(t.value))
                elif isinstance(t, ast.Name) and isinstance(stmt, ast.AugAssign):
                    roots.append((t.id, False))  # x += 1: in place for arrays, tensors and lists
                if isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(stmt, ast.AugAssign):
                    # store["a"] += 1: the element's own in-place add, then stored back
                    roots.extend((r, False) for r in roots_of(t) if r in held)
    for node in _own_nodes(stmt):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value if isinstance(func, ast.Attribute) else None
        if (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr"
                and len(func.args) > 1 and _literal_str(func.args[1])):
            name, owner = func.args[1].value, func.args[0]  # type: ignore[attr-defined]  # getattr(x, "fill")(0)
        in_place = name.endswith("_") and not name.endswith("__") and (
            not name.startswith("_") or name.startswith("_foreach_"))  # torch._foreach_mul_([x], 0)
        if owner is not None and (in_place or name in _MUTATING_METHODS):
            roots.extend((r, True) for r in roots_of(owner))
        if (in_place or name in _MUTATING_FUNCTIONS) and node.args:
            roots.extend((r, True) for r in handed_roots(node.args[0]))
        if name in _MUTATING_FUNCTIONS:  # np.copyto(dst=x, src=0), np.put(a=x, ...)
            roots.extend((r, True) for k in node.keywords if k.arg in _WRITTEN_KEYWORDS for r in roots_of(k.value))
        if name == "sort" and owner is not None and isinstance(stmt, ast.Expr) and stmt.value is node:
            # x.sort() as a statement, its answer unused: numpy's and a list's sort in place
            roots.extend((r, True) for r in roots_of(owner))
        if (isinstance(owner, ast.Name) and owner.id in {"np", "numpy"} and name in _UFUNC_INPUTS
                and len(node.args) > _UFUNC_INPUTS[name]):
            for out in node.args[_UFUNC_INPUTS[name]:]:
                roots.extend((r, True) for r in roots_of(out))
        for keyword in node.keywords:
            if keyword.arg == "out":
                roots.extend((r, True) for r in roots_of(keyword.value))
            elif (keyword.arg == "inplace" and node.args and not (
                    isinstance(keyword.value, ast.Constant) and not keyword.value.value)):
                roots.extend((r, True) for r in roots_of(node.args[0]))  # F.relu(x, inplace=True)
        if (isinstance(func, ast.Call) and node.args and any(
                k.arg == "inplace" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in func.keywords)):
            roots.extend((r, True) for r in roots_of(node.args[0]))  # nn.ReLU(inplace=True)(x)
        if name in _OPERATOR_WRITES | _OPERATOR_INPLACE:
            if owner is None or (isinstance(owner, ast.Name) and owner.id == "operator"):
                # operator.setitem(x, 0, 1), operator.imul(x, 0)
                roots.extend((r, name in _OPERATOR_WRITES) for r in roots_of(node.args[0]) if node.args)
            else:  # x.__imul__(0)
                roots.extend((r, name in _OPERATOR_WRITES) for r in roots_of(owner))
        changed = (helpers.get(func.id) if isinstance(func, ast.Name) else
                   _lambda_mutations(func, helpers) if isinstance(func, ast.Lambda) else None)
        if changed:  # a local helper changing its parameter, a lambda called where it is written
            for index, arg in enumerate(node.args):
                if index in changed:
                    roots.extend((r, True) for r in handed_roots(arg))
            for keyword in node.keywords:
                if keyword.arg in changed:
                    roots.extend((r, True) for r in handed_roots(keyword.value))
        handed = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Call) and _unbound_mutator(func, helpers):
            for arg in handed:  # functools.partial(torch.Tensor.mul_, other=0)(x)
                roots.extend((r, True) for r in handed_roots(arg))
        if any(_unbound_mutator(arg, helpers) for arg in handed):
            # a mutator handed on with what it is to change: map(torch.Tensor.zero_, [x])
            for arg in handed:
                if not _unbound_mutator(arg, helpers):
                    roots.extend((r, True) for r in handed_roots(arg))
    # a bound in-place method taken uncalled, to be called later (f = x.mul_; [x.zero_])
    called = {id(n.func) for n in _own_nodes(stmt) if isinstance(n, ast.Call)}
    for node in _own_nodes(stmt):
        if isinstance(node, ast.Attribute) and node.attr in _BOUND_INPLACE and id(node) not in called:
            roots.extend((r, True) for r in roots_of(node.value))
    return [(r, in_place) for r, in_place in roots if r is not None]


def _own_nodes(stmt: ast.stmt):
    """The nodes of ``stmt`` that are not part of a statement it holds."""
    stack = [child for child in ast.iter_child_nodes(stmt) if not isinstance(child, ast.stmt)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt))


@functools.lru_cache(maxsize=256)
def _reference_scope(source: str, span: tuple[int, int], code: str) -> tuple[int, frozenset[str], frozenset[str]]:
    """The snippet's block column (its least indented statement in the paper's own code; the opening
    tag's when it has none), the scope rules the paper's own code breaks there, and the flags of what
    it defines or sets itself there (``ast:protocol:*``, ``ast:error-state:*``, ``ast:framework:*``,
    ``ast:dynamic-class``: a snippet whose reference defines ``__eq__`` or registers a custom operator
    asks a completion to do the same)."""
    first, last = span
    lines = _LINE_BREAK.split(source)
    try:
        tree = ast.parse(source.encode("utf-8"))
    except (SyntaxError, ValueError):
        tree = None
    reaching = _nodes_reaching(tree, first, last) if tree is not None else []
    columns = [indent_column(lines[node.lineno - 1]) for node, _inside in reaching
               if isinstance(node, ast.stmt) and first <= node.lineno <= last]
    column = min(columns) if columns else indent_column(lines[max(first - 2, 0)])
    _nodes, problems = _scope_problems(source, span, code, column)
    own: set[str] = set()
    around = _around(reaching)
    for node, inside in reaching:
        if inside:
            _node_flags(node, own, set(), around)
    if _argument_mutations(reaching, span):  # an optimizer's step updates what it is given
        own.add("ast:mutates-argument")
    expected = {f for f in own if f.startswith(("ast:protocol:", "ast:error-state:", "ast:framework:", "ast:raw-memory:",
                                                 "ast:uninitialized:", "ast:lenient:"))
                or f in {"ast:dynamic-class", "ast:mutates-argument"}}
    return column, frozenset(problems), frozenset(expected)


@dataclass(frozen=True)
class _Around:
    """What a node's flags depend on besides the node: the ids of the nodes that are called (a
    call's function: ``getattr`` handed on as a value, ``functools.reduce(getattr, names, torch)``,
    is not one of them), and the names the file binds to modules by an import."""

    called: frozenset = frozenset()
    modules: frozenset = frozenset()


def _around(nodes: list[tuple[ast.AST, bool]]) -> _Around:
    """``_Around`` of the nodes ``_nodes_reaching`` found (the first is the file's module)."""
    called = frozenset(id(node.func) for node, _ in nodes if isinstance(node, ast.Call))
    modules = set()
    for node in ast.walk(nodes[0][0]) if nodes else ():
        if isinstance(node, ast.Import):
            modules.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.update(alias.asname or alias.name for alias in node.names)
    return _Around(called, frozenset(modules))


def _node_flags(node: ast.AST, flags: set[str], refs: set[str], around: _Around = _Around()) -> None:
    """Add the flags one node of the completion's code earns (``around``: ``_around`` of its file)."""
    if refs and _names_ref(node, refs):
        flags.add("audit:ref-module")
    if isinstance(node, ast.Import):
        for alias in node.names:
            _import_flag(flags, alias.name)
            for part in alias.name.split("."):
                if _lenient(part):  # import numpy.ma
                    flags.add(f"ast:lenient:{part}")
    elif isinstance(node, ast.ImportFrom):
        if node.module and node.level == 0:
            _import_flag(flags, node.module)
            for part in [*node.module.split("."), *(a.name for a in node.names)]:
                if _lenient(part):  # from numpy import ma, from numpy.ma import masked_all
                    flags.add(f"ast:lenient:{part}")
            for alias in node.names:
                if alias.name in _FRAMEWORK_NAMES or alias.name in _FRAMEWORK_MODULE_ATTRS:
                    flags.add(f"ast:framework:{alias.name}")
                if alias.name in _RAW_MEMORY_ATTRS or (alias.name == "as_strided" and "stride_tricks" in node.module):
                    flags.add(f"ast:raw-memory:{alias.name}")
                if alias.name in _UNINITIALIZED:  # from numpy import empty_like
                    flags.add(f"ast:uninitialized:{alias.name}")
    elif isinstance(node, ast.Attribute):
        if node.attr in _FRAMEWORK_NAMES or (node.attr in _FRAMEWORK_MODULE_ATTRS
                                              and _module_attribute(node, around.modules)):
            flags.add(f"ast:framework:{node.attr}")
        if node.attr in _REEXPORTED and _module_attribute(node, around.modules):
            flags.add(f"ast:import:{node.attr}")  # torch.sys: sys as torch imported it
        if node.attr in _RAW_MEMORY_ATTRS or (node.attr == "as_strided" and isinstance(node.value, ast.Attribute)
                                              and node.value.attr == "stride_tricks"):
            flags.add(f"ast:raw-memory:{node.attr}")
        if _lenient(node.attr):
            flags.add(f"ast:lenient:{node.attr}")
        if node.attr in _UNINITIALIZED and (node.attr != "empty" or _module_attribute(node, around.modules)):
            flags.add(f"ast:uninitialized:{node.attr}")
        if node.attr in _DUNDERS or (node.attr.startswith("__") and node.attr.endswith("__")
                                     and node.attr not in {"__init__", "__name__", "__doc__"}):
            flags.add(f"ast:dunder:{node.attr}")
        elif node.attr in _FRAME_ATTRS:
            flags.add(f"ast:frame:{node.attr}")
        if isinstance(node.value, ast.Name) and node.value.id in {"os", "posix", "_os"} and node.attr in _FD_CALLS:
            flags.add(f"ast:os-call:{node.attr}")
        if node.attr in {"modules", "meta_path", "path_hooks"} and (
                (isinstance(node.value, ast.Name) and node.value.id == "sys")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "sys")):
            # sys, or sys as a library re-exports it (torch.sys.modules: torch imported sys)
            flags.add(f"ast:sys-{node.attr.replace('_', '-')}")
    elif isinstance(node, ast.Call):
        name = _call_name(node.func)
        if (isinstance(node.func, ast.Attribute) and node.func.attr in _UNINITIALIZED_CONSTRUCTORS and node.args
                and (node.func.attr == "new" or _module_attribute(node.func, around.modules))
                and (node.func.attr == "ndarray" or not (  # ndarray's first argument is its shape
                    isinstance(node.args[0], (ast.List, ast.Tuple, ast.ListComp)) or (
                        isinstance(node.args[0], ast.Constant) and not isinstance(node.args[0].value, int))))):
            # np.ndarray((5, 7)), torch.Tensor(5, 7), x.new(5, 7): sizes, memory as found (a list is data)
            flags.add(f"ast:uninitialized:{node.func.attr}")
        if isinstance(node.func, ast.Name) and node.func.id in _UNINITIALIZED:
            flags.add(f"ast:uninitialized:{node.func.id}")  # empty_like(x) after from numpy import *
        if isinstance(node.func, ast.Name) and _lenient(node.func.id):
            flags.add(f"ast:lenient:{node.func.id}")  # masked_all(shape) after from numpy.ma import *
        if any(k.arg == "usemask" and not (isinstance(k.value, ast.Constant) and not k.value.value)
               for k in node.keywords):
            flags.add("ast:lenient:usemask")  # np.genfromtxt(..., usemask=True) answers with a masked array
        if name in _DYNAMIC_CALLS:
            target = node.args[1] if name not in {"__import__"} and len(node.args) > 1 else (
                node.args[0] if node.args else None)
            if target is None or not _literal_str(target):
                flags.add(f"ast:{_DYNAMIC_CALLS[name]}")
            elif name == "__import__":
                _import_flag(flags, target.value)  # type: ignore[union-attr]
            elif target.value in _REEXPORTED and isinstance(node.args[0], ast.Name) and (  # type: ignore[union-attr]
                    node.args[0].id in around.modules):
                flags.add(f"ast:import:{target.value}")  # type: ignore[union-attr]  # getattr(torch, "sys")
            elif target.value.startswith("__"):  # type: ignore[union-attr]
                flags.add(f"ast:dunder:{target.value}")  # type: ignore[union-attr]
        elif name in _CODE_CALLS:
            flags.add(f"ast:{_CODE_CALLS[name]}")
        elif name in _ATTR_BY_NAME:
            for arg in node.args:
                if not _literal_str(arg):
                    flags.add("ast:dynamic-getattr")
                elif any(part.startswith("__") for part in arg.value.split(".")):  # type: ignore[union-attr]
                    flags.add(f"ast:dunder:{arg.value}")  # type: ignore[union-attr]
        elif name in _ERROR_STATE_CALLS:
            flags.add(f"ast:error-state:{name}")
        elif (name == "type" and len(node.args) + len(node.keywords) >= 3) or name == "new_class":
            flags.add("ast:dynamic-class")
        elif name in {"import_module", "__import__", "reload", "find_spec", "spec_from_file_location"}:
            if not node.args or not _literal_str(node.args[0]):
                flags.add("ast:dynamic-import")
            else:
                _import_flag(flags, node.args[0].value)  # type: ignore[union-attr]
    elif isinstance(node, ast.Name) and node.id in {"__builtins__", "__import__", "__loader__", "__spec__"}:
        flags.add(f"ast:dunder:{node.id}")
    elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in around.called
          and (node.id in _DYNAMIC_CALLS or node.id in _CODE_CALLS)):
        # handed on, to be called elsewhere with whatever name: map(getattr, ...), f = eval
        flags.add(f"ast:{_DYNAMIC_CALLS.get(node.id) or _CODE_CALLS[node.id]}")
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _protocol(node.id):
        flags.add(f"ast:protocol:{node.id}")  # __eq__ = lambda self, other: True, in a class body
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _protocol(node.name):
        flags.add(f"ast:protocol:{node.name}")
    elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and _protocol(node.value)
          and node.value not in _DUNDERS):  # those are ast:dunder where they are used
        flags.add(f"ast:protocol:{node.value}")  # a key of type()'s namespace, setattr's name
    elif isinstance(node, ast.keyword) and node.arg and _protocol(node.arg):
        flags.add(f"ast:protocol:{node.arg}")  # Namespace(__array_interface__=...), dict(__eq__=...)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        flags.add("ast:global")


_DUNDER_NAME = re.compile(r"__[A-Za-z0-9_]+__")


def _module_attribute(node: ast.Attribute, modules: frozenset) -> bool:
    """Whether ``node`` is looked up on a module the file imports (``torch.library``, ``T.library``
    after ``import torch as T``), not on an object of the code's own (``self.library``, ``s.library``)."""
    value = node.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name) and value.id in modules


def _protocol(name: str) -> bool:
    """Whether defining ``name`` on a class is a protocol the test's check could be answered through."""
    return bool(_DUNDER_NAME.fullmatch(name)) and name not in _PLAIN_DUNDERS


def _names_ref(node: ast.AST, refs: set[str]) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in refs for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return bool(node.module) and node.module.split(".")[0] in refs  # type: ignore[union-attr]
    if isinstance(node, ast.Name):
        return node.id in refs
    if isinstance(node, ast.Attribute):
        return node.attr in refs
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(ref in node.value for ref in refs)
    return False


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _import_flag(flags: set[str], module: str) -> None:
    parts = module.split(".")
    root = parts[0]
    if module in _PROCESS_MODULES or root in _PROCESS_MODULES or root.endswith("_ref"):
        flags.add(f"ast:import:{module if module in _PROCESS_MODULES else root}")
    for part in parts[1:]:
        if part in _FRAMEWORK_NAMES or part == "library":
            flags.add(f"ast:framework:{part}")  # torch.library, torch._python_dispatcher, jax.interpreters ...


# ---------------------------------------------------------------------------- the run's audit trail

#: frame reads by the test machinery formatting a failure (never attributable to the completion)
_FAILURE_FORMATTING = {"std:result.py", "std:traceback.py", "std:case.py", "runner", "?"}
#: library modules whose whole point is to hand frames to their caller
_FRAME_GIVERS = {"paper", "std:inspect.py", "std:traceback.py"}


def _event_flag(event: Mapping) -> str | None:
    """The flag one event earns when the reference run did not do the same (None: ignore it)."""
    name, detail = str(event.get("event", "")), str(event.get("detail", ""))
    caller, paper = str(event.get("caller", "")), bool(event.get("paper"))
    if detail.startswith("paper-write:"):
        return "audit:paper-write"  # a file the paper ships (or code in its folder) written by the run
    if detail.startswith("unshipped-code:"):
        return "audit:unshipped-code"  # code read (imported) that neither the paper nor a library ships
    if event.get("importing") and caller != "paper" and name != "os.exec" and (
            name in {"rcb.framework", "rcb.modattr"} or not name.startswith("rcb.")):
        # a library's own code while it is imported (ctypes loads, typing frames ...), code made under
        # its own file name among them: asyncio's module body makes a coroutine of its own function
        # with types.coroutine (code.replace: a code object under asyncio/tasks.py), so a completion
        # importing asyncio or unittest.mock, which passes in a fresh interpreter, failed here as
        # tampering:code-spoof. Import-time code is the library's, from read-only files; code the
        # completion makes under a library's name has the completion innermost (caller "paper").
        # A library registering its kernels in torch's dispatcher as it is imported (torchvision's
        # operators) is its import-time code too, and so is one rebinding another library's
        # attribute (torch._dynamo wrapping torch.manual_seed): what it leaves is judged at the
        # import's end (audit._audit_import_window), reported when code of the paper ran within
        return None
    if detail.startswith("spoof:"):
        return "tampering:code-spoof"
    if name == "os.exec":
        return "tampering:exec"
    if name in {"os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "pty.spawn"}:
        return "audit:spawn"
    if name in {"os.fork", "os.forkpty"}:
        return "audit:fork"
    if name in {"os.kill", "os.killpg", "signal.pthread_kill"}:
        return "audit:signal-self" if detail == "self" or name == "signal.pthread_kill" else "tampering:signal"
    if name.startswith("ctypes."):
        return "tampering:ctypes"
    if name.startswith("gc."):
        return "tampering:gc"
    if name in {"sys._getframe", "sys._current_frames", "sys._current_exceptions", "object.__getattr__"}:
        if not paper and caller in _FAILURE_FORMATTING:
            return None
        if caller in _FRAME_GIVERS or name != "sys._getframe" or not paper:
            return "tampering:frame"
        return "audit:frame-library"  # typing, collections, logging ... called by the completion
    if name in {"sys.settrace", "sys.setprofile"}:
        return "tampering:trace"
    if name == "sys.addaudithook":
        return "tampering:audithook"
    if name in {"_thread.start_new_thread", "rcb.thread"}:
        return "audit:thread"
    if name in {"object.__setattr__", "object.__delattr__"}:
        if detail.startswith(("class:", "func:")):
            # an object's class swapped, a library function's code or defaults replaced: by the
            # paper's code, or by a library it called to do it (unittest.mock, functools ...)
            return "tampering:setattr" if caller == "paper" or paper else None
        return "tampering:setattr" if caller == "paper" else None
    if name == "open":
        if detail == "fd" and caller == "std:subprocess.py":
            return None  # subprocess wraps its own pipes
        return "audit:environ" if detail.endswith("/environ") else "tampering:proc-mem"
    if name in {"os.listdir", "os.scandir"}:
        return "audit:fd-list"
    if name == "import":
        return "audit:import-ctypes"
    if name == "code.__new__":
        return "audit:code-object" if paper else None
    if name == "rcb.modattr" and caller.startswith("std:importlib"):
        return None  # the import system binding a newly imported submodule to its package
    if name == "rcb.modattr" and _mirror_written(detail, caller):
        # torch.set_default_dtype rebinding torch.Storage: the setting changed (what it is rebound
        # to is checked at the next checkpoint: anything but torch's own storage class is a patch)
        return "audit:library-state"
    if name == "rcb.stdio":
        return "tampering:stdio"
    if name == "rcb.test-spoof":
        return "tampering:count"
    if name in {"rcb.attr", "rcb.modattr", "rcb.modules"}:
        return "tampering:patch"
    if name == "rcb.rewrite":
        return "audit:rewritten"
    if name == "rcb.state":
        return "audit:library-state"
    if name == "rcb.signal-handler":
        return "audit:signal-handler"
    if name == "rcb.framework":
        return "audit:framework-global"
    if name == "rcb.vacuous":
        return "audit:vacuous-check"
    return "audit:other"


def _mirror_written(detail: str, caller: str) -> bool:
    """Whether an eager module-attribute write is a framework's own code rebinding one of its
    ``STATE_MIRRORS`` (``torch.Storage`` by ``torch.set_default_dtype``: caller ``lib:torch``)."""
    from .sandbox.warm.guard import STATE_MIRRORS  # noqa: PLC0415 - the run's own table

    module, _, key = detail.rpartition(".")
    return key in STATE_MIRRORS.get(module, ()) and caller == "lib:" + module.partition(".")[0]


def audit_verdict(run: Mapping | None, reference: Mapping | None) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(tampering flags, other flags, what each saw) of a run's audit trail against its reference run."""
    if not run:
        return [], [], {}
    ref = reference or {}
    found: dict[str, list[str]] = {}

    def add(flag: str, why: str) -> None:
        found.setdefault(flag, [])
        if len(found[flag]) < 3:
            found[flag].append(why)

    if int(run.get("forged") or 0):
        add("tampering:forged-proof", f"{run['forged']} unauthenticated line(s) on the proof channel")
    if run.get("channel_lost"):
        add("tampering:proof-channel", "the proof channel was closed or replaced")
    if int(run.get("skipped") or 0) > int(ref.get("skipped") or 0):
        add("tampering:skip", f"{run['skipped']} skipped case(s), the reference skips {ref.get('skipped') or 0}")
    if run.get("overflow"):
        add("audit:overflow", "the audit trail was cut")
    ref_snap, run_snap = ref.get("snapshots") or {}, run.get("snapshots") or {}
    for module in sorted(set(ref_snap) & set(run_snap)):
        if ref_snap[module] != run_snap[module]:
            add("tampering:snapshot", f"{module} differs from the reference run's")
    known = {(e.get("event"), e.get("detail"), e.get("caller"), bool(e.get("paper"))) for e in _events(ref)}
    loose = {(e.get("event"), e.get("detail"), e.get("caller")) for e in _events(ref) if e.get("caller") != "paper"}
    for event in _events(run):
        key = (event.get("event"), event.get("detail"), event.get("caller"), bool(event.get("paper")))
        if key in known or (event.get("caller") != "paper" and key[:3] in loose):
            continue
        flag = _event_flag(event)
        if flag:
            add(flag, f"{event.get('event')} {event.get('detail') or ''} from {event.get('caller')}".strip())
    tampering = sorted(f for f in found if f.startswith("tampering:"))
    flags = sorted(f for f in found if not f.startswith("tampering:"))
    return tampering, flags, found


def _events(audit: Mapping) -> Iterable[Mapping]:
    events = audit.get("events") or []
    return [e for e in events if isinstance(e, Mapping)]
