"""The static reading of a completion's in-place changes to what its function was given
(``ast:mutates-argument``, ``tamper.static_reading``): a test may hand the same objects to the
reference afterwards, and zeroed inputs make the reference agree with a constant answer.

What is read: a subscript or attribute written, an augmented assignment, a mutating method or
function applied to a parameter or to a view, alias, conversion or element of it; local helpers
and lambdas that change their own parameters; mutators handed on or renamed; containers the
parameter is put into and taken out of later, and what the instance keeps of a method's arguments
(``self.W = W`` in ``__init__``: ``_kept_on_self``; ``argument_mutations``). A reading of code, not
of behaviour: docs/sandboxes.md says what it does not see.
"""
from __future__ import annotations

import ast
import contextvars
import functools
import re

__all__ = ["argument_mutations"]


def _literal_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


#: names modules are imported under, whose view functions take the object first (np.asarray(x))
_MODULE_NAMES = {"np", "numpy", "torch", "jnp", "jax", "F", "nn"}
#: the names that are modules in the code being read (``_MODULE_NAMES`` and what its imports bind:
#: ``import torch as T``), set by ``argument_mutations`` for the reading it makes
_MODULES: contextvars.ContextVar[frozenset] = contextvars.ContextVar("modules", default=frozenset(_MODULE_NAMES))
#: the names of the paper's other modules in that code (``argument_mutations``' ``shared``): what
#: they hold under a name (``helpers.WEIGHTS``) is an object of its own, not a part of them
_SHARED: contextvars.ContextVar[frozenset] = contextvars.ContextVar("shared", default=frozenset())
#: methods that change their object in place (beyond torch's ``*_`` convention)
_MUTATING_METHODS = {"fill", "resize", "put", "itemset", "partition", "setflags", "byteswap", "setfield", "append",
                     "extend", "insert", "pop", "remove", "clear", "reverse", "update", "setdefault", "popitem"}
#: functions that write into their first argument
_MUTATING_FUNCTIONS = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis", "shuffle",
                       "at"}  # a ufunc's unbuffered in-place form: np.multiply.at(x, i, 0)
#: functions that write into another of their arguments, by its place (``vector_to_parameters(v, [x])``)
_WRITES_ARGUMENT = {"vector_to_parameters": 1}
#: torch's functions that take ``inplace`` by its place among their positional arguments
#: (``F.dropout(x, 1.0, True, True)`` zeroes ``x``), and its modules that take it in their constructor's
#: (``nn.Hardtanh(0.0, 0.0, True)(x)``)
_INPLACE_AT = {"relu": 1, "relu6": 1, "selu": 1, "silu": 1, "mish": 1, "hardswish": 1, "hardsigmoid": 1, "elu": 2,
               "celu": 2, "leaky_relu": 2, "hardtanh": 3, "threshold": 3, "dropout": 3, "alpha_dropout": 3,
               "feature_alpha_dropout": 3, "dropout1d": 3, "dropout2d": 3, "dropout3d": 3, "rrelu": 4}
_INPLACE_MODULE_AT = {"ReLU": 0, "ReLU6": 0, "SELU": 0, "SiLU": 0, "Mish": 0, "Hardswish": 0, "Hardsigmoid": 0,
                      "ELU": 1, "CELU": 1, "LeakyReLU": 1, "Dropout": 1, "Dropout1d": 1, "Dropout2d": 1,
                      "Dropout3d": 1, "AlphaDropout": 1, "FeatureAlphaDropout": 1, "Hardtanh": 2, "Threshold": 2,
                      "RReLU": 2}
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
_UFUNC_INPUTS.update(clip=3, around=2, round=2)  # np.clip(x, lo, hi, x), np.around(x, 0, x): their ``out``
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
          "from_dlpack", "ascontiguousarray", "asfortranarray", "require", "asarray_chkfinite",
          "sliding_window_view", "swapdims", "expand_dims", "getfield", "flip", "fliplr", "flipud", "rot90",
          "tensor_split", "array_split", "hsplit", "vsplit", "dsplit", "split_with_sizes", "view_as_real",
          "view_as_complex", "H", "mH", "adjoint", "to_dlpack",  # (not conj: numpy's is a copy)
          # a module's parameter or buffer made of a tensor holds that tensor's memory
          "Parameter", "Buffer"}


def argument_mutations(nodes: list[tuple[ast.AST, bool]], span: tuple[int, int],
                       shared: frozenset = frozenset()) -> list[str]:
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
    global, is not seen. ``shared``: names of the file's (a module of the paper's other than the
    completion's, or what it holds) read as parameters are: what is changed of them is named too."""
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
    params = {name for d in defs if not any(d is h for h in local) for name in _parameters(d)} | shared
    kept = _kept_on_self(nodes, span)
    if not params and not kept:
        return []
    statements = sorted((node for node, _inside in nodes if isinstance(node, ast.stmt) and first <= node.lineno <= last),
                        key=lambda n: (n.lineno, n.col_offset))
    imported = {alias.asname or alias.name.partition(".")[0] for node, _inside in nodes
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    token = _MODULES.set(frozenset(_MODULE_NAMES | imported))  # T.from_dlpack(x) under import torch as T
    shared_token = _SHARED.set(shared)
    try:
        return _read_mutations(statements, local, params, kept)
    finally:
        _SHARED.reset(shared_token)
        _MODULES.reset(token)


def _kept_on_self(nodes: list[tuple[ast.AST, bool]], span: tuple[int, int]) -> frozenset:
    """What the class around the snippet keeps on its instance from what a method of its was given,
    outside the completion's lines, as markers (``self.W``): ``self.W = W``, ``self.W =
    nn.Parameter(W)`` (the same memory), ``self.register_buffer("W", W)``. A test that builds the
    model and its reference from the same tensor (``Model(W)``, ``ModelRef(W)``) hands both the same
    object: ``self.W.zero_()`` in the completion's method zeroes the reference's weight too."""
    first, last = span
    kept: set[str] = set()
    for node, _inside in nodes:
        if not isinstance(node, ast.ClassDef):
            continue
        for method in node.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = [a.arg for a in method.args.posonlyargs + method.args.args]
            if not args or args[0] in {"cls"} or any(isinstance(d, ast.Name) and d.id in {"staticmethod", "classmethod"}
                                                     for d in method.decorator_list):
                continue
            me, given = args[0], set(_parameters(method)) - _plain_values(method)
            for stmt in ast.walk(method):
                if not isinstance(stmt, ast.stmt) or first <= stmt.lineno <= last:
                    continue  # the completion's own lines are read as its code
                for marker, names in _stored(stmt, _view_roots):
                    if marker.startswith(me + ".") and names & given:
                        kept.add("self." + marker[len(me) + 1:])
                for call in _own_nodes(stmt):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr in {"register_buffer", "register_parameter"}
                            and isinstance(call.func.value, ast.Name) and call.func.value.id == me
                            and len(call.args) > 1 and _literal_str(call.args[0]) and _view_roots(call.args[1]) & given):
                        kept.add("self." + call.args[0].value)  # type: ignore[attr-defined]
    return frozenset(kept)


def _plain_values(method: ast.AST) -> set[str]:
    """The parameters of ``method`` that hold a plain value (annotated ``int``, ``float``, ``bool``
    or ``str``, or given such a default: ``lr=0.1``): ``self.lr *= gamma`` rebinds a number."""
    args = method.args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
    plain = {name for name, d in defaults.items()
             if isinstance(d, ast.Constant) and isinstance(d.value, (int, float, str, bool))}
    plain |= {a.arg for a in positional + args.kwonlyargs
              if isinstance(a.annotation, ast.Name) and a.annotation.id in {"int", "float", "bool", "str"}}
    return plain


def _read_mutations(statements: list[ast.stmt], local: list, params: set[str],
                    kept: frozenset = frozenset()) -> list[str]:
    """``argument_mutations``' reading of the completion's ``statements``, its ``local`` helpers
    and the parameters ``params`` (``kept``: what the instance keeps of a method's parameters,
    ``_kept_on_self``)."""
    # the local helpers that change a parameter of their own in place: name -> its positions and names
    helpers: dict[str, set] = {}
    for helper in local:
        names = [a.arg for a in helper.args.posonlyargs + helper.args.args]
        body = sorted((n for n in ast.walk(helper) if isinstance(n, ast.stmt) and n is not helper),
                      key=lambda n: (n.lineno, n.col_offset))
        changed = _mutations_of(body, set(names), helpers, _top_level(body))
        if changed:
            helpers[helper.name] = {i for i, n in enumerate(names) if n in changed} | changed
    return sorted(_mutations_of(statements, params, helpers, _top_level(statements), kept))


def _mutations_of(statements: list[ast.stmt], params: set[str], helpers: dict[str, set], top: set[int],
                  kept: frozenset = frozenset()) -> set[str]:
    """Which of ``params`` the ``statements`` (in order; ``top`` the ids of their top level) change
    in place, ``helpers`` the local functions known to change their own parameters (by position and
    name); ``kept``: markers of what the instance holds of a parameter (``self.W``), named as such."""
    tracked = {name: name for name in params}  # a name -> the parameter it is (a view or part of)
    tracked.update((marker, marker) for marker in kept)
    # names that are the object itself or a view of it (y = x, y = x.view(-1)), not a part of it
    # (n = x.shape[0]): an augmented assignment to one of these writes in place
    whole = dict(tracked)
    helpers = dict(helpers)
    found: set[str] = set()
    # the markers of containers holding a parameter (``_held_markers``), the instance among them
    held: frozenset = kept
    for stmt in statements:
        bound: list[tuple[ast.AST, ast.AST, bool]] = []
        # a container the statement puts a parameter into holds it: what is taken out of it later
        # is that parameter (``store = [x]; store[0].zero_()``, ``box.v = x; box.v[:] = 0``)
        if isinstance(stmt, ast.Assign) and id(stmt) in top:
            # a name bound again at the top level no longer holds what it held (store = [x.copy()]),
            # nor an attribute (self.W = self.W * 0.5: a tensor of the completion's own from here on)
            rebound = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            places = {t.value.id + "." + t.attr for t in stmt.targets
                      if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)}
            gone = {m for m in held if _marker_owner(m) in rebound or m in places}
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
        node = _literal_getattr(stack.pop())
        if held:
            found |= _held_markers(node, held)
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif (isinstance(node, ast.Attribute) and whole and node.attr not in _VIEWS
              and not (isinstance(node.value, ast.Name) and node.value.id in _SHARED.get())):
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
            if _module_path(owner):
                stack.extend(node.args[:1])  # np.asarray(x), torch.nn.Parameter(x)
            else:
                stack.append(owner)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Parameter", "Buffer"}:
            stack.extend(node.args[:1])  # from torch.nn import Parameter; Parameter(x)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
              and node.func.id in {"enumerate", "reversed", "iter", "zip"} and not whole):
            stack.extend(node.args)  # for i, row in enumerate(x): the rows of x
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "memoryview":
            stack.extend(node.args[:1])  # memoryview(x): its buffer, written through
    return found


def _literal_getattr(node: ast.AST) -> ast.AST:
    """``getattr(o, "name")`` (a literal name, with a default or not) read as ``o.name``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) in (2, 3) and not node.keywords and _literal_str(node.args[1])):
        return ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Load())  # type: ignore[attr-defined]
    return node


def _written_by_call(node: ast.Call, name: str, owner, roots_of, handed_roots) -> set[str]:
    """What a call writes into through its arguments' roles: an ``out=``, ``inplace`` (by keyword or
    by its place, of a function or of the module a call made), an argument a function writes into
    (``vector_to_parameters``), an in-place operator's overload (``torch.ops.aten.fill_.Scalar(x, 0)``)."""
    found: set[str] = set()
    for keyword in node.keywords:
        if keyword.arg == "out":
            found |= roots_of(keyword.value)
        elif (keyword.arg == "inplace" and node.args and not (
                isinstance(keyword.value, ast.Constant) and not keyword.value.value)):
            found |= roots_of(node.args[0])  # F.relu(x, inplace=True)
    if (isinstance(node.func, ast.Call) and node.args and any(
            k.arg == "inplace" and not (isinstance(k.value, ast.Constant) and not k.value.value)
            for k in node.func.keywords)):
        found |= roots_of(node.args[0])  # nn.ReLU(inplace=True)(x)
    found |= _positional_inplace(node, roots_of)
    if name in _WRITES_ARGUMENT and len(node.args) > _WRITES_ARGUMENT[name]:
        found |= handed_roots(node.args[_WRITES_ARGUMENT[name]])
    if (node.args and isinstance(owner, ast.Attribute) and _module_path(owner) and owner.attr.endswith("_")
            and not owner.attr.startswith("_")):
        found |= handed_roots(node.args[0])
    return found


def _positional_inplace(node: ast.Call, roots_of) -> set[str]:
    """What a call of torch's changes in place when it is handed ``inplace`` by its place:
    ``F.dropout(x, 1.0, True, True)``, ``nn.Hardtanh(0.0, 0.0, True)(x)`` (a literal false aside)."""
    def given(args: list, at: int) -> bool:
        return len(args) > at and not (isinstance(args[at], ast.Constant) and not args[at].value)

    func = node.func
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if node.args and last in _INPLACE_AT and given(node.args, _INPLACE_AT[last]):
        return roots_of(node.args[0])
    if isinstance(func, ast.Call) and node.args:
        made = func.func
        kind = made.attr if isinstance(made, ast.Attribute) else made.id if isinstance(made, ast.Name) else ""
        if kind in _INPLACE_MODULE_AT and given(func.args, _INPLACE_MODULE_AT[kind]):
            return roots_of(node.args[0])
    return set()


def _a_type(node: ast.AST) -> bool:
    """Whether ``node`` names a type whose methods change their object (``np.ndarray``, ``torch.Tensor``,
    ``list``, a class of the code's own: a capitalised name), not a module (``np``, ``torch``)."""
    last = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return last[:1].isupper() or last in {"list", "dict", "set", "bytearray", "ndarray", "deque"}


def _module_path(node: ast.AST) -> bool:
    """Whether ``node`` names a module: one of the code's module names, or an attribute path from
    one (``torch.nn``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in _MODULES.get()


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
        if (owner is not None and node.args and _a_type(owner) and (name in _MUTATING_METHODS or (
                name == "sort" and isinstance(stmt, ast.Expr) and stmt.value is node))):
            # a type's method called unbound: np.ndarray.fill(x, 0), list.sort(x) as a statement
            # (not np.sort(x), np.resize(x, s) or np.append(x, v), a module's functions that make a
            # new array, nor torch.Tensor.sort(x)'s answer used)
            roots.extend((r, True) for r in handed_roots(node.args[0]))
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
        roots.extend((r, True) for r in _written_by_call(node, name, owner, roots_of, handed_roots))
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
