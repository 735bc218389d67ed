"""``python -m benchmark_core env``: list a problem set's environments, build them as virtual environments."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from .environments import (
    DEFAULT_ENVIRONMENT,
    EnvironmentBuildError,
    environment_get,
    venv_build,
    venv_python,
)
from .pset_args import _load, _papers_arg

__all__ = ["add_env_parser", "cmd_env", "parse_env_pythons"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def add_env_parser(sub) -> None:
    p = sub.add_parser("env", help="the papers' environments: list them, build them as virtual environments")
    env_sub = p.add_subparsers(dest="env_command", required=True)
    for name, text in (("list", "print each paper's environment and whether it is built"),
                       ("build", "build every environment the problem set's papers name (reused when built)")):
        q = env_sub.add_parser(name, help=text)
        q.add_argument("pset", metavar="PSET_DIR", help="problem-set folder")
        q.add_argument("--dir", dest="envs_dir", default="var/envs",
                       help="where the venvs live, one per environment and requirements hash (default: var/envs)")
        q.add_argument("--papers", help="comma-separated paper ids (default: all)")
        if name == "build":
            q.add_argument("--python", help="interpreter the venvs are made from (default: this one)")


def parse_env_pythons(values: list[str] | None) -> dict[str, str]:
    """``NAME=PY`` pairs (``--env-python``) as a mapping; ValueError for a malformed one."""
    pythons: dict[str, str] = {}
    for value in values or []:
        name, sep, python = value.partition("=")
        if not sep or not name.strip() or not python.strip():
            raise ValueError(f"--env-python wants NAME=/path/to/python, not {value!r}")
        pythons[name.strip()] = python.strip()
    return pythons


def cmd_env(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pset = _load(args.pset, _papers_arg(args.papers), err)
    if pset is None:
        return EXIT_INVALID
    envs_dir = Path(args.envs_dir)
    users: dict[str, list[str]] = {}
    for paper in pset.papers:
        users.setdefault(paper.environment or DEFAULT_ENVIRONMENT, []).append(paper.id)
    failed = 0
    for name, papers in sorted(users.items()):
        env = environment_get(name)
        who = ", ".join(papers)
        if env is None:
            print(f"{name}: the backend's interpreter (--python) or inferred requirements  <- {who}", file=out)
            continue
        if env.unavailable:
            print(f"{name}: UNAVAILABLE ({env.unavailable})  <- {who}", file=out)
            continue
        if args.env_command == "list":
            built = venv_python(env, envs_dir)
            state = f"built: {built}" if built else "not built"
            print(f"{name}: {', '.join(env.requirements)} [{state}]  <- {who}", file=out)
            continue
        try:
            python = venv_build(env, envs_dir, python=args.python, log=lambda m: print(m, file=err, flush=True))
        except EnvironmentBuildError as exc:
            failed += 1
            print(f"{name}: FAILED  <- {who}\n{exc}", file=out)
            continue
        print(f"{name}: {python}  <- {who}", file=out)
    if failed:
        print(f"{failed} environment(s) could not be built: their papers will be environment errors", file=err)
        return EXIT_INVALID
    return EXIT_OK
