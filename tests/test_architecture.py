"""Architecture rules read from the source: layers, no import cycles, one RQ site, one SnippetResult writer,
one bootstrap, one scoring seam, one job attempt, small functions and files."""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("accounts", "benchmark_core", "catalog", "contributions", "leaderboard", "rcbsite", "scoring", "submissions",
            "bench")
#: the site's apps, bottom up (docs/architecture.md): an app imports its own layer and those below it, never above
LAYERS = (("benchmark_core",), ("accounts", "catalog"), ("scoring",), ("submissions", "contributions"),
          ("leaderboard",), ("rcbsite",))
SITE_APPS = ("accounts", "catalog", "scoring", "submissions", "contributions", "leaderboard", "rcbsite")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=1)
def _sources() -> dict[str, tuple[Path, ast.Module]]:
    """Parse every module of the project's own packages (migrations excluded: they import by design);
    parsed once per test process (the trees are only read)."""
    found: dict[str, tuple[Path, ast.Module]] = {}
    for package in PACKAGES:
        base = ROOT / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if "migrations" in rel or "__pycache__" in rel:
                continue
            found[_module_name(path)] = (path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return found


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # a package's own name is its __init__: relative imports start from it, not from its parent
    is_package = (ROOT.joinpath(*base) / "__init__.py").exists()
    anchor = base if is_package else base[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
    return ".".join([*anchor, node.module] if node.module else anchor)


def _owner(name: str, modules: set[str]) -> str | None:
    """The project module a dotted import name lands in (its longest known prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    """Edges module -> project modules it imports, at module level and inside functions alike."""
    sources = _sources()
    modules = set(sources)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, (_path, tree) in sources.items():
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                # "from pkg import mod" imports the submodule when one exists, else a name of pkg
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for target in targets:
                owner = _owner(target, modules)
                if owner and owner != module:
                    graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _path_in(component: list[str], graph: dict[str, set[str]]) -> str:
    """One concrete cycle through a component, for a readable failure."""
    start = component[0]
    members = set(component)
    trail = [start]
    seen = {start}
    node = start
    while True:
        nexts = sorted(n for n in graph[node] if n in members)
        if start in nexts and len(trail) > 1:
            return " -> ".join([*trail, start])
        fresh = [n for n in nexts if n not in seen]
        if not fresh:
            return " <-> ".join(component)
        node = fresh[0]
        trail.append(node)
        seen.add(node)


def test_graph_sees_function_level_imports():
    """The graph builder resolves relative imports, counts imports inside functions, and finds cycles."""
    graph = import_graph()
    # the thin command calls the generator under bench/
    assert "bench.synthetic" in graph["leaderboard.management.commands.generate_synthetic"]
    # a function-level import (succession queues re-scorings through submissions.upload inside a function)
    assert "submissions.upload" in graph["contributions.succession"]
    tree = ast.parse("def f():\n    from .selectors import x\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("leaderboard.views", node) == "leaderboard.selectors"
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    """No two modules of the project import each other, directly or through others (function-level too)."""
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_path_in(c, graph) for c in found)


def _importers_of(prefix: str) -> set[str]:
    users = set()
    for module, (_path, tree) in _sources().items():
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(name == prefix or name.startswith(prefix + ".") for name in names):
                users.add(module)
    return users


def test_rq_imported_by_one_site_module():
    """RQ (rq, django_rq) is imported by exactly one module of the site: the queue facade."""
    users = {m for m in _importers_of("rq") | _importers_of("django_rq") if not m.startswith("benchmark_core")}
    site_users = {m for m in users if not m.startswith(("bench.", "bench"))}
    assert site_users == {"scoring.queue"}, sorted(site_users)


def _snippet_result_writers() -> set[str]:
    """Functions that create/update SnippetResult rows (objects.create/bulk_create/update/update_or_create/save)."""
    writers = set()
    write_calls = {"create", "bulk_create", "bulk_update", "update", "update_or_create", "get_or_create"}
    for module, (_path, tree) in _sources().items():
        if module.startswith(("benchmark_core", "bench")):
            continue
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                if node.func.attr in write_calls and "SnippetResult" in ast.unparse(node.func.value):
                    writers.add(f"{module}.{func.name}")
    return writers


def test_snippet_results_written_in_one_function():
    """SnippetResult rows are created or updated in exactly one function of the site."""
    writers = _snippet_result_writers()
    assert writers, "no SnippetResult writer found: the detector is broken"
    assert writers == {"scoring.results.evaluation_results_write"}, sorted(writers)


def test_one_bootstrap():
    """Resampling lives in benchmark_core.scoring only: no other module draws bootstrap samples."""
    offenders = []
    for module, (_path, tree) in _sources().items():
        if module == "benchmark_core.scoring":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in {"choices", "integers", "randint"} and module.split(".")[0] != "bench":
                    text = ast.unparse(node)
                    if "rng" in text or "random" in text:
                        offenders.append(f"{module}: {text}")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "bootstrap" in node.name:
                offenders.append(f"{module}.{node.name}")
    assert not offenders, offenders


def test_no_test_module_imports_a_conftest():
    # pytest imports each conftest once; `from tests.conftest import ...` executes it a second time
    # under another name, and its per-process set-up (the paper store's folder) with it
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "conftest" or n.endswith(".conftest") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


#: identity is the accounts app's: each name is defined in its home module, and reached only from it
IDENTITY = {
    "APIToken": "accounts.models",
    "api_token_create": "accounts.services",
    "api_token_revoke": "accounts.services",
    "api_token_authenticate": "accounts.services",
    "api_token_user": "accounts.services",
    "user_get_or_create": "accounts.services",
    "REVIEWERS_GROUP": "accounts.roles",
    "user_is_reviewer": "accounts.roles",
}


def _identity_offenders(module: str, tree: ast.Module, modules: set[str]) -> list[str]:
    """Where ``module`` defines, re-exports, imports or reads an IDENTITY name other than from its home."""
    offenders: list[str] = []
    bound: dict[str, str] = {}  # local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if IDENTITY.get(node.name, module) != module:
                offenders.append(f"{module}: defines {node.name}")
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and IDENTITY.get(target.id, module) != module:
                    offenders.append(f"{module}: defines {target.id}")
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                    offenders += [f"{module}: re-exports {e.value}" for e in node.value.elts
                                  if isinstance(e, ast.Constant) and IDENTITY.get(e.value, module) != module]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            for alias in node.names:
                if alias.name in IDENTITY and base != IDENTITY[alias.name]:
                    offenders.append(f"{module}: imports {alias.name} from {base}")
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in IDENTITY:
            owner = ast.unparse(node.value)
            owner = bound.get(owner, owner if owner in modules else None)
            if owner is not None and owner != IDENTITY[node.attr]:
                offenders.append(f"{module}: reads {node.attr} through {owner}")
    return offenders


def test_identity_detector_sees_definitions_reexports_and_reads():
    modules = {"accounts.roles", "accounts.services", "submissions", "submissions.selectors", "x"}
    code = ("from submissions import selectors\nfrom accounts.roles import user_is_reviewer\n"
            "__all__ = ['user_is_reviewer']\nclass APIToken: pass\n"
            "def f(u):\n    from submissions.selectors import REVIEWERS_GROUP\n    return selectors.user_is_reviewer(u)\n")
    assert sorted(_identity_offenders("x", ast.parse(code), modules)) == [
        "x: defines APIToken", "x: imports REVIEWERS_GROUP from submissions.selectors",
        "x: re-exports user_is_reviewer", "x: reads user_is_reviewer through submissions.selectors"]
    assert _identity_offenders("x", ast.parse("from accounts import roles\nroles.user_is_reviewer(1)\n"), modules) == []


def test_identity_is_defined_once_in_accounts():
    """API tokens (model and services) and roles live in accounts, and every module takes them from there."""
    sources = _sources()
    modules = set(sources)
    offenders = [o for module, (_path, tree) in sources.items() for o in _identity_offenders(module, tree, modules)]
    assert not offenders, offenders
    homes = {home: ast.unparse(tree) for home, (_path, tree) in sources.items() if home in set(IDENTITY.values())}
    for name, home in IDENTITY.items():  # each one is where it is said to be
        assert f"def {name}(" in homes[home] or f"class {name}(" in homes[home] or f"{name} = " in homes[home], name


def _csv_writers(module: str, tree: ast.Module) -> set[str]:
    """Functions of ``module`` that make a writer of the stdlib csv module (csv.writer / csv.DictWriter)."""
    modules, functions = set(), set()  # local names of the csv module, and of its writer classes
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "csv"}
        elif isinstance(node, ast.ImportFrom) and node.module == "csv" and not node.level:
            functions |= {alias.asname or alias.name for alias in node.names if alias.name in ("writer", "DictWriter")}
    found = set()
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                if (isinstance(callee, ast.Attribute) and callee.attr in ("writer", "DictWriter")
                        and isinstance(callee.value, ast.Name) and callee.value.id in modules) or (
                        isinstance(callee, ast.Name) and callee.id in functions):
                    found.add(f"{module}.{func.name}")
    return found


def test_csv_writer_detector():
    code = "import csv as c\nfrom csv import DictWriter\ndef a(o):\n    c.writer(o)\ndef b(o):\n    DictWriter(o, [])\n"
    assert _csv_writers("m", ast.parse(code)) == {"m.a", "m.b"}
    # a module of the project named csv is not the stdlib's: "from . import csv" binds no stdlib name
    assert _csv_writers("m", ast.parse("from . import csv\ndef a(o):\n    csv.writer(o)\n")) == set()


def test_one_csv_writer():
    """Every CSV the site writes (API and pages) comes out of one function, with one cell rule."""
    writers = set().union(*(_csv_writers(module, tree) for module, (_path, tree) in _sources().items()))
    assert writers == {"leaderboard.csv.csv_text"}, sorted(writers)


# --------------------------------------------------------------------------- layers
def _layer(module: str) -> int | None:
    top = module.split(".")[0]
    return next((i for i, apps in enumerate(LAYERS) if top in apps), None)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Edges from a module to a module of an app in a higher layer (bench and tests are no layer)."""
    found = []
    for module, targets in graph.items():
        mine = _layer(module)
        if mine is None:
            continue
        found += [f"{module} -> {t}" for t in targets if (_layer(t) or -1) > mine]
    return sorted(found)


def _text_imports(path: Path) -> set[str]:
    """The top packages a file names in import statements and import_module("...") calls, read as
    text (a second detector, independent of the ast graph)."""
    text = path.read_text(encoding="utf-8")
    names = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", text, flags=re.M))
    names |= set(re.findall(r"import_module\(\s*[\"']([A-Za-z_]\w*)", text))
    return names


def test_layer_detector():
    graph = {"catalog.models": {"benchmark_core.hashing"}, "scoring.results": {"catalog.models", "submissions.x"},
             "submissions.x": {"contributions.y"}, "bench.synthetic": {"leaderboard.models"}}
    assert upward_imports(graph) == ["scoring.results -> submissions.x"]


def test_no_import_runs_up_the_layers():
    """benchmark_core <- accounts, catalog <- scoring <- submissions, contributions <- leaderboard <- rcbsite:
    no module imports an app above its own, at module level or in a function."""
    found = upward_imports(import_graph())
    assert not found, "imports up the layers:\n" + "\n".join(found)


def test_no_import_runs_up_the_layers_read_as_text():
    offenders = []
    for module, (path, _tree) in _sources().items():
        mine = _layer(module)
        if mine is None:
            continue
        offenders += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(_text_imports(path))
                      if (_layer(name) or -1) > mine]
    assert not offenders, offenders


# --------------------------------------------------------------------------- the seam, the attempt, the sizes
def _calls(name: str) -> set[str]:
    """Modules of the project with a call to ``name`` (a bare name or an attribute)."""
    found = set()
    for module, (_path, tree) in _sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name):
                    found.add(module)
    return found


def test_run_tasks_is_called_by_one_site_module():
    """Every verdict of the site comes out of scoring.evaluate (submissions, baselines, the demo, checks)."""
    assert {m for m in _calls("run_tasks") if m.split(".")[0] in SITE_APPS} == {"scoring.evaluate"}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_job_attempt_exists_once():
    """Claiming an attempt, its heartbeat and its end are scoring.jobs' (job_execute); every kind's RQ entry
    point runs under job_execute, itself or through the one function it calls."""
    outside = {m for name in ("job_claim", "job_end", "Heartbeat") for m in _calls(name)} - {"scoring.jobs"}
    assert not {m for m in outside if m.split(".")[0] in SITE_APPS}, outside
    sources = _sources()
    executes = {f"{m}.{name}" for m, (_p, tree) in sources.items() for name, fn in _functions(tree).items()
                if any(isinstance(n, ast.Call) and ast.unparse(n.func) == "job_execute" for n in ast.walk(fn))}
    by_name: dict[str, list[str]] = {}
    for m, (_p, tree) in sources.items():
        for name in _functions(tree):
            by_name.setdefault(name, []).append(f"{m}.{name}")
    entries = {node.value.value for _m, (_p, tree) in sources.items() for node in ast.walk(tree)
               if isinstance(node, ast.keyword) and node.arg == "entry" and isinstance(node.value, ast.Constant)}
    assert len(entries) >= 4, entries  # submission paper, contribution check, release baseline, generation
    for entry in sorted(entries):
        module, name = entry.rsplit(".", 1)
        fn = _functions(sources[module][1])[name]
        called = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(fn) if isinstance(n, ast.Call)}
        reached = {entry} | {q for c in called if len(by_name.get(c, [])) == 1 for q in by_name[c]}
        assert reached & executes, f"{entry} does not run under scoring.jobs.job_execute"


#: production code only: tests, bench, migrations and the demo's papers are not held to it
MAX_FUNCTION_LINES, MAX_FILE_LINES = 100, 1200


def test_site_functions_and_files_are_small():
    """No function of the site's apps over 100 lines, no file over 1,200 (the engine's are checked apart)."""
    offenders = []
    for module, (path, tree) in _sources().items():
        if module.split(".")[0] not in SITE_APPS:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_FILE_LINES:
            offenders.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert not offenders, offenders
