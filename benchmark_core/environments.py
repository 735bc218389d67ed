"""Named environments: pinned requirement sets a paper runs in, and building them as virtual environments.

A paper names its environment with the ``environment`` key of its ``papers.yaml`` entry, or the
problem set maps it in ``environments.yaml`` at its root (``{paper id: environment name}``, or
under a ``papers:`` key). Papers of the published problem set that name none get the shipped
mapping (``PUBLISHED_ENVIRONMENTS``); any other paper names none and gets today's inference (the
backend's ``--python`` for bwrap/local, imports pinned at that interpreter's versions for docker).

An environment that cannot be had offline carries the reason (``Environment.unavailable``): its
papers become environment errors with that reason, never model failures.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

__all__ = [
    "DEFAULT_ENVIRONMENT",
    "ENVIRONMENTS",
    "ENVIRONMENTS_FILE",
    "PUBLISHED_ENVIRONMENTS",
    "Environment",
    "EnvironmentBuildError",
    "environment_get",
    "environment_mapping_read",
    "environment_names",
    "venv_build",
    "venv_path",
    "venv_python",
    "UNSAFE_TO_FORK",
]

#: the mapping file at a problem set's root
ENVIRONMENTS_FILE = "environments.yaml"
#: what a paper that names no environment runs in (the backend's inference)
DEFAULT_ENVIRONMENT = "default"
#: frameworks that are unsafe to fork after import (JAX warns that fork() may deadlock): papers
#: importing them run in a fresh interpreter per run
UNSAFE_TO_FORK = ("jax", "jaxlib", "flax", "tensorflow")


@dataclass(frozen=True)
class Environment:
    """A pinned requirement set; ``unavailable`` says why it cannot be built here (then it is never built)."""

    name: str
    requirements: tuple[str, ...] = ()
    description: str = ""
    unavailable: str | None = None

    @property
    def key(self) -> str:
        """Hash of the normalized requirements and the interpreter version: a venv is reused by it."""
        lines = sorted({" ".join(r.split()) for r in self.requirements if r.strip()})
        text = "\n".join([f"cp{sys.version_info[0]}.{sys.version_info[1]}", *lines])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# the scientific stack the published torch papers import, at versions installable from PyPI for
# CPython 3.11 (numpy at the site's own pin)
_SCIENTIFIC = ("numpy==2.4.6", "scipy==1.16.3", "pandas==2.3.3", "pyarrow==25.0.1", "matplotlib==3.11.2",
               "ml_collections==1.1.0", "einops==0.8.2", "PyYAML==6.0.4")

ENVIRONMENTS: dict[str, Environment] = {
    env.name: env
    for env in (
        Environment("numpy", ("numpy==2.4.6",), "NumPy only (the demo problem set)"),
        Environment("torch-cpu", ("torch==2.13.0", *_SCIENTIFIC), "PyTorch 2.13 (CPU build) and the scientific stack"),
        Environment("torch-vision", ("torch==2.14.1", "torchvision==0.29.1", "timm==1.0.29", *_SCIENTIFIC),
                    "PyTorch 2.14 with torchvision and timm (PyPI's torchvision does not import beside torch 2.13)"),
        Environment("jax", ("jax==0.10.2", "jaxlib==0.10.2", "flax==0.12.8", "numpy==2.4.6"),
                    "JAX and Flax on CPU, no torch (unsafe to fork: runs get a fresh interpreter)"),
        Environment("meltingpot", description="DeepMind's Melting Pot",
                    unavailable="needs dm-meltingpot and its game assets, which are not installable from PyPI"),
        Environment("mmgen", description="OpenMMLab mmcv / mmgen",
                    unavailable="needs mmcv and mmgen from git (git+https://…), which cannot be fetched offline"),
        Environment("network", description="tests that download data",
                    unavailable="the test downloads a checkpoint, and sandboxes have no network"),
    )
}

#: the published problem set (20 papers): which environment each paper's test needs
PUBLISHED_ENVIRONMENTS: dict[str, str] = {
    **{pid: "torch-cpu" for pid in (
        "Diff-Transformer", "DiffusionDPO", "GPS", "LEN", "OptimalSteps", "SISS", "TabDiff", "Tanh-Init",
        "grid-cell-conformal-isometry", "llm-sci-use", "minp", "schedule_free", "semanticist")},
    **{pid: "torch-vision" for pid in ("DyT", "eomt", "fractalgen")},
    "hyla": "jax",
    "advantage-alignment": "meltingpot",
    "GMFlow": "mmgen",
    "REPA-E": "network",
}


def environment_names() -> list[str]:
    return sorted(ENVIRONMENTS)


def environment_get(name: str | None) -> Environment | None:
    """The named environment, None for the default (inferred) one; KeyError for an unknown name."""
    if not name or name == DEFAULT_ENVIRONMENT:
        return None
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise KeyError(f"unknown environment {name!r} (known: {', '.join(environment_names())})") from None


def environment_mapping_read(root: Path) -> dict[str, str]:
    """``{paper id: environment}`` from ``ROOT/environments.yaml`` ({} when absent); ValueError when malformed."""
    path = Path(root) / ENVIRONMENTS_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{ENVIRONMENTS_FILE} is not valid YAML: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("papers"), dict):
        data = data["papers"]
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"{ENVIRONMENTS_FILE} must map paper ids to environment names")
    return {str(k): v.strip() for k, v in data.items()}


# --------------------------------------------------------------------------- virtual environments

class EnvironmentBuildError(RuntimeError):
    """An environment could not be built; the message carries pip's own."""


def venv_path(env: Environment, envs_dir: Path) -> Path:
    return Path(envs_dir).absolute() / f"{env.name}-{env.key}"


def venv_python(env: Environment, envs_dir: Path) -> Path | None:
    """The built venv's interpreter, or None when it has not been built (completely) in ``envs_dir``."""
    folder = venv_path(env, envs_dir)
    python = folder / "bin" / "python"
    return python if (folder / ".complete").is_file() and python.exists() else None


def venv_build(env: Environment, envs_dir: Path, *, python: str | None = None, log=None) -> Path:
    """Build (or reuse) ``env`` as a venv under ``envs_dir``; return its interpreter.

    pip installs from whatever this machine's pip configuration allows (PyPI, local wheels).
    Raise EnvironmentBuildError with pip's message when that fails; a half-built venv is removed.
    """
    if env.unavailable:
        raise EnvironmentBuildError(f"environment {env.name!r} is unavailable: {env.unavailable}")
    done = venv_python(env, envs_dir)
    if done is not None:
        return done
    import fcntl  # noqa: PLC0415

    folder = venv_path(env, envs_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # venvs are not relocatable: build in place, one builder at a time; ".complete" marks it done
    with open(folder.with_name(folder.name + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = venv_python(env, envs_dir)
        if done is not None:
            return done
        shutil.rmtree(folder, ignore_errors=True)
        if log:
            log(f"building environment {env.name} in {folder}: {', '.join(env.requirements) or '(nothing)'}")
        try:
            _call([python or sys.executable, "-m", "venv", str(folder)], what=f"creating the venv for {env.name}")
            reqs = folder / "requirements.txt"
            reqs.write_text("\n".join(env.requirements) + "\n", encoding="utf-8")
            if env.requirements:
                _call([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet",
                       "--disable-pip-version-check", "-r", str(reqs)],
                      what=f"installing {', '.join(env.requirements)}")
        except EnvironmentBuildError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        (folder / ".complete").write_text(env.key + "\n", encoding="utf-8")
    return folder / "bin" / "python"


def _call(argv: list[str], *, what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvironmentBuildError(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        raise EnvironmentBuildError(f"{what} failed:\n{(proc.stderr or proc.stdout).strip()[-2000:]}")


def environments_used(environments: Mapping[str, Any]) -> list[Environment]:
    """The named environments among ``{paper id: environment name}`` (default ones left out)."""
    found: dict[str, Environment] = {}
    for name in environments.values():
        env = environment_get(name)
        if env is not None:
            found[env.name] = env
    return [found[n] for n in sorted(found)]
