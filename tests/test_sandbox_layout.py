"""How the engine's sandboxes are laid out (issue 10, item 3): one warm-runner protocol client for
every backend, docker's images in a module of their own, and no backend borrowing a helper from
another (what they share lives in a shared module)."""
from __future__ import annotations

import ast
from pathlib import Path

SANDBOX = Path(__file__).resolve().parent.parent / "benchmark_core" / "sandbox"
BACKENDS = ("local", "bwrap", "docker")


def _imports(module: str) -> set[str]:
    """The sandbox modules ``module`` imports (relative or absolute, at any level of the file)."""
    tree = ast.parse((SANDBOX / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level == 1:
                found.add(name.split(".")[0])
            elif name.startswith("benchmark_core.sandbox."):
                found.add(name.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("benchmark_core.sandbox.")}
    return found


def _defined(name: str) -> list[str]:
    """The sandbox modules that define a top-level function or class ``name``."""
    return sorted(path.stem for path in SANDBOX.glob("*.py")
                  if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
                         for n in ast.parse(path.read_text()).body))


def test_no_backend_imports_another():
    for backend in (*BACKENDS, "docker_images"):
        borrowed = _imports(backend) & set(BACKENDS) - {backend}
        assert not borrowed, f"{backend} imports {borrowed}: shared helpers belong in a shared module"


def test_one_protocol_client_for_every_backend():
    assert _defined("WarmClient") == ["warm_client"]
    assert _defined("WarmSession") == ["warm_client"]
    assert _defined("result_from_message") == ["warm_client"]
    assert _defined("child_env") == ["process"]
    # both isolating backends' sessions are WarmSessions speaking through WarmClient
    from benchmark_core.sandbox.bwrap import BwrapSession, ParentedSession
    from benchmark_core.sandbox.docker import DockerParentedSession, DockerSession
    from benchmark_core.sandbox.warm_client import WarmSession

    for cls in (BwrapSession, ParentedSession, DockerSession, DockerParentedSession):
        assert issubclass(cls, WarmSession)


def test_docker_images_live_in_their_own_module():
    for name in ("base_image_ensure", "env_image_ensure", "env_image_tag", "requirements_for_paper",
                 "requirements_infer", "wheels_download", "images_build"):
        assert _defined(name) == ["docker_images"], name
    assert "docker" not in _imports("docker_images")
