"""Which sandbox untrusted code gets: the one chooser (``sandbox_for``), by trust level.

- ``public``: predictions and contributed papers from anyone. The configured backend
  (RCB_SANDBOX_BACKEND, ``auto`` = docker, else bwrap); the ``local`` backend isolates nothing and
  is refused unless RCB_ALLOW_LOCAL_SANDBOX says the data is trusted (tests, a private install).
- ``demo``: the project's own demo data. The configured backend when it can run, else ``local``
  with a warning (the code is ours).
"""
from __future__ import annotations

from typing import Any

from django.conf import settings

from benchmark_core.sandbox.base import Sandbox, SandboxUnavailable, get_sandbox

__all__ = ["PUBLIC", "DEMO", "TRUST_LEVELS", "SandboxRefused", "sandbox_for", "sandbox_environment_options"]

PUBLIC = "public"
DEMO = "demo"
TRUST_LEVELS = (PUBLIC, DEMO)


class SandboxRefused(SandboxUnavailable, RuntimeError):
    """The configured sandbox isolates nothing and the code is not trusted."""


def sandbox_environment_options() -> dict[str, Any]:
    """The sandbox options naming each environment's interpreter (settings RCB_ENVS_DIR, RCB_ENV_PYTHONS)."""
    from benchmark_core.env_command import parse_env_pythons

    options: dict[str, Any] = {}
    if settings.RCB_ENVS_DIR:
        options["envs_dir"] = str(settings.RCB_ENVS_DIR)
    pairs = [p.strip() for p in str(settings.RCB_ENV_PYTHONS or "").split(",") if p.strip()]
    if pairs:
        options["pythons"] = parse_env_pythons(pairs)
    return options


def sandbox_for(*, trust: str, backend: str | None = None, environments: bool = True,
                warnings: list[str] | None = None) -> Sandbox:
    """Open the sandbox for code of ``trust`` level; raise SandboxUnavailable (SandboxRefused) if none may run it.

    ``backend`` overrides RCB_SANDBOX_BACKEND; ``environments`` passes the per-environment
    interpreters (paper scoring); ``warnings`` collects what a ``demo`` fallback says.
    """
    if trust not in TRUST_LEVELS:
        raise ValueError(f"unknown trust level {trust!r} (known: {', '.join(TRUST_LEVELS)})")
    name = backend if backend is not None else settings.RCB_SANDBOX_BACKEND
    options: dict[str, Any] = {"python": settings.RCB_PYTHON or None}
    if environments:
        options.update(sandbox_environment_options())
    if trust == DEMO:
        if name and name != "local":
            try:
                return get_sandbox(name, **options)
            except SandboxUnavailable as exc:
                if warnings is not None:
                    warnings.append(f"sandbox {name!r} unavailable ({exc}); the demo (trusted code) runs with 'local'")
        return get_sandbox("local", **options)
    sandbox = get_sandbox(name, **options)
    if sandbox.trusted_only and not settings.RCB_ALLOW_LOCAL_SANDBOX:
        sandbox.close()
        raise SandboxRefused(
            f"the {sandbox.name!r} sandbox isolates nothing and is refused for submissions and contributions "
            "(untrusted code): set RCB_SANDBOX_BACKEND to bwrap or docker (RCB_ALLOW_LOCAL_SANDBOX=1 is for "
            "trusted data only)"
        )
    return sandbox
