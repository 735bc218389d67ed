"""The engine in rooms (issue 22): no function of benchmark_core over 100 lines (nested functions
counted in the function that holds them), no file over 1,200 lines; the warm runner, put into
sandboxes as a folder, imports nothing but the standard library and its own rooms; the docker
backend's rooms import downward only (backend -> transport -> lifecycle)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
ENGINE = ROOT / "benchmark_core"
WARM = ENGINE / "sandbox" / "warm"
MAX_FUNCTION = 100
MAX_FILE = 1200

def _engine_files() -> list[Path]:
    return sorted(p for p in ENGINE.rglob("*.py") if "__pycache__" not in p.parts)


def _long_functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION]


def test_no_engine_function_is_over_100_lines():
    over = [f"{path.relative_to(ROOT).as_posix()}:{name} is {lines} lines"
            for path in _engine_files() for name, lines in _long_functions(path)]
    assert not over, over


def test_no_engine_file_is_over_1200_lines():
    over = [f"{p.relative_to(ROOT).as_posix()} has {n} lines" for p in _engine_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE]
    assert not over, over


def test_the_measure_sees_nested_functions(tmp_path):
    # the measure itself: an outer function is as long as everything nested in it
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION))
    source = tmp_path / "long.py"
    source.write_text(f"def outer():\n    def inner():\n{body}\n    return inner\n", encoding="utf-8")
    assert [name for name, _lines in _long_functions(source)] == ["outer", "inner"]


def test_the_warm_runner_imports_only_the_standard_library_and_its_rooms():
    # it runs inside sandboxes with the paper's interpreter: no benchmark_core, no third-party module
    std = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    rooms = {p.stem for p in WARM.glob("*.py")}
    outside = []
    for path in sorted(WARM.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    names = [node.module or ""] if node.module else [a.name for a in node.names]
                    outside += [f"{path.name}: .{n}" for n in names if n.split(".")[0] not in rooms]
                    continue
                names = [node.module or ""]
            else:
                continue
            outside += [f"{path.name}: {n}" for n in names if n.split(".")[0] not in std]
    assert not outside, outside
    assert (WARM / "__main__.py").is_file()  # the folder is what the sandboxes run


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            names.add((node.module or "").split(".")[-1])
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.rsplit(".", 1)[-1])
    return names


def test_the_docker_rooms_import_downward_only():
    sandbox = ENGINE / "sandbox"
    lifecycle, transport = _imports(sandbox / "docker_containers.py"), _imports(sandbox / "docker_transport.py")
    assert not lifecycle & {"docker", "docker_transport"}, lifecycle
    assert "docker" not in transport and "docker_containers" in transport, transport
    assert {"docker_containers", "docker_transport", "docker_images"} <= _imports(sandbox / "docker.py")
