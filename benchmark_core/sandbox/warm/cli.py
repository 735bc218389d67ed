"""The runner's command line (``python warm.py ...``: see the package's docstring)."""
from __future__ import annotations

import argparse
import os

from .child import home_seed
from .common import ARGS_PRELOAD, LIBRARY_GUARD
from .launch import launch
from .server import Server
from .zygote import zygote_serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="warm runner for one paper's test (see the module docstring)")
    parser.add_argument("--paper")
    parser.add_argument("--work")
    parser.add_argument("--preload", default="", help="extra modules to import once, comma-separated")
    parser.add_argument("--fresh", action="store_true", help="a fresh interpreter per run (no fork)")
    parser.add_argument("--python", help="interpreter for --fresh runs (default: this one)")
    parser.add_argument("--run-uid-base", type=int, default=0,
                        help="when root: each run gets its own uid BASE+slot (default 0: off; the bwrap backend uses it)")
    parser.add_argument("--cgroups", default="",
                        help="v1:DIR or v2:DIR: the sandbox's cgroup folders, one cgroup per run (root only)")
    parser.add_argument("--no-library-guard", action="store_true",
                        help="measurement only (bench/score_speed.py): no library-namespace guard")
    parser.add_argument("--launch", help=argparse.SUPPRESS)
    parser.add_argument("--proof-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--zygote", action="store_true", help="warm parent of several papers (zygote_serve)")
    parser.add_argument("--papers", help="with --zygote: the folder holding the papers it may serve")
    parser.add_argument("--control-fd", type=int, help="with --zygote: the control socket's descriptor")
    parser.add_argument("--mux", action="store_true",
                        help="with --zygote: requests and every server's streams as tagged lines on stdin/stdout")
    parser.add_argument("--modules", help="with --zygote: the modules to import, comma-separated (the host's "
                        "scan of a paper: parent_names)")
    parser.add_argument("--skel", help="the environment's home skeleton (sandbox.skel), copied into this "
                        "runner's home before its imports, and into a --fresh run's home")
    args = parser.parse_args(argv)
    if args.no_library_guard:
        LIBRARY_GUARD[0] = False
    if args.launch:
        launch(args.launch, args.proof_fd if args.proof_fd is not None else -1)
        return 0  # not reached
    # before any import of the environment's modules: they find the caches a user's kept home holds
    if os.environ.get("HOME"):
        home_seed(args.skel, os.environ["HOME"])
    if args.zygote:
        if not (args.papers and args.work and args.modules is not None
                and (args.mux or args.control_fd is not None)):
            parser.error("--zygote needs --papers, --work, --modules, and --control-fd or --mux")
        ARGS_PRELOAD[:] = [m.strip() for m in args.preload.split(",") if m.strip()]
        return zygote_serve(args)
    if not args.paper or not args.work:
        parser.error("--paper and --work are required")
    if not os.path.isfile(os.path.join(args.paper, "paper2code_test.py")):
        parser.error(f"{args.paper} has no paper2code_test.py")
    ARGS_PRELOAD[:] = [m.strip() for m in args.preload.split(",") if m.strip()]
    return Server(args).serve()
