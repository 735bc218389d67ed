"""``python -m benchmark_core``: validate, tasks, score, report."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Sequence, TextIO

from . import __version__
from .errors import CATEGORIES
from .masking import task_record
from .predictions import parse_predictions
from .problemset import ProblemSet, validate_problemset
from .runner import HARNESS_VERSION, Task, TestRun, answer_code, reference_code, run_tasks
from .sandbox.base import Limits, Sandbox, SandboxUnavailable, get_sandbox
from .scoring import summarize
from .generate import add_generate_parser, add_run_parser, generate_command, run_command
from .inspect_log import add_inspect_log_parser, cmd_inspect_log
from .submit import add_run_here_parser, add_submit_parser, cmd_run_here, cmd_submit
from .tamper import review_flags
from .env_command import add_env_parser, cmd_env, parse_env_pythons
from .pset_args import _load, _papers_arg

__all__ = ["main", "build_parser", "sandbox_open", "DEFAULT_TIMEOUT"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
#: scored, but some papers' environments failed (summary.complete is false)
EXIT_INCOMPLETE = 3
DEFAULT_TIMEOUT = 300.0  # tests that import torch and train a few steps need minutes on one thread


def _add_pset(p: argparse.ArgumentParser) -> None:
    p.add_argument("pset", metavar="PSET_DIR", help="problem-set folder (papers.yaml + one folder per paper)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmark_core", description="ResearchCodeBench scoring engine")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check every paper's tags, files and metadata")
    _add_pset(p)

    p = sub.add_parser("tasks", help="write one task (masked file + prompt) per snippet as JSON lines")
    _add_pset(p)
    p.add_argument("--without-paper", action="store_true", help="leave the paper text out of the prompts (ablation)")
    p.add_argument("--papers", help="comma-separated paper ids (default: all)")
    p.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl",
                   help="jsonl (default): one row per snippet and prompt kind; parquet: one row per snippet with "
                        "both prompts (a dataset; needs -o and pyarrow)")
    p.add_argument("--card", metavar="README.md", help="with --format parquet: also write its dataset card here")
    p.add_argument("-o", "--output", help="tasks.jsonl or tasks.parquet (default: standard output, jsonl only)")

    p = sub.add_parser("score", help="run each snippet's test with a completion and score the results")
    _add_pset(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("predictions", nargs="?", metavar="PREDICTIONS.jsonl", help="one JSON object per line")
    src.add_argument("--reference", action="store_true", help="score the original code (should give 100%%)")
    src.add_argument("--blank", action="store_true", help="score an empty completion (should give 0%%)")
    p.add_argument("--papers", help="comma-separated paper ids (default: all)")
    p.add_argument("--backend", default=None,
                   help="sandbox backend: auto, docker, bwrap or local (trusted only); default: with --python, "
                        "bwrap (it runs that interpreter); else auto (docker, else bwrap) when one of them works "
                        "here, else local")
    p.add_argument("--cache", metavar="PATH", help="verdict cache (SQLite file): identical runs are not repeated")
    p.add_argument("--python", help="interpreter whose environment has the papers' dependencies")
    p.add_argument("--envs-dir", metavar="DIR",
                   help="bwrap/local: each paper runs in its environment's venv built here by 'env build' "
                        "(a paper naming no environment uses --python)")
    p.add_argument("--env-python", action="append", metavar="NAME=PY",
                   help="bwrap/local: the interpreter of environment NAME (repeatable; wins over --envs-dir)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel runs (default: cores)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per test run, for every paper (default: the paper's 'timeout', else {DEFAULT_TIMEOUT:.0f})")
    p.add_argument("--memory-mb", type=int, default=Limits.memory_mb, help="memory limit per run")
    p.add_argument("--reindent", action="store_true",
                   help="re-base each completion's indentation on the snippet's (NOT the published rule: scores differ)")
    p.add_argument("--skip-invalid", action="store_true", help="score the valid prediction lines, skip bad ones")
    p.add_argument("-o", "--output", help="results.json to write")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no report")

    p = sub.add_parser("report", help="print a results.json as tables for humans")
    p.add_argument("results", metavar="results.json")
    p.add_argument("--summary", action="store_true", help="one line: the scaled and plain pass rates")

    add_submit_parser(sub)
    add_run_here_parser(sub)
    add_env_parser(sub)
    add_generate_parser(sub)
    add_run_parser(sub)
    add_inspect_log_parser(sub)
    return parser


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pset, problems = validate_problemset(args.pset)
    for problem in problems:
        print(problem, file=out)
    if problems:
        print(f"{len(problems)} problem(s) found", file=err)
        return EXIT_INVALID
    snippets = pset.snippets
    weight = sum(s.weight for _, s in snippets)
    depth = max((s.depth for _, s in snippets), default=0) + 1
    print(f"{args.pset}: valid — {len(pset.papers)} papers, {len(snippets)} snippets, "
          f"{weight} code lines, nesting up to {depth} levels", file=out)
    return EXIT_OK


def cmd_tasks(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.format == "parquet" and (not args.output or args.without_paper):
        print("error: --format parquet needs -o FILE and holds both prompts (no --without-paper)", file=err)
        return EXIT_USAGE
    if args.card and args.format != "parquet":
        print("error: --card goes with --format parquet", file=err)
        return EXIT_USAGE
    pset = _load(args.pset, _papers_arg(args.papers), err)
    if pset is None:
        return EXIT_INVALID
    if args.format == "parquet":
        return _tasks_parquet(pset, args, err)
    target = open(args.output, "w", encoding="utf-8") if args.output else out
    try:
        for paper, snip in pset.snippets:
            row = task_record(paper, snip, with_paper=not args.without_paper)
            target.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            target.close()
    if args.output:
        print(f"wrote {len(pset.snippets)} tasks to {args.output}", file=err)
    return EXIT_OK


def _tasks_parquet(pset: ProblemSet, args: argparse.Namespace, err: TextIO) -> int:
    from .dataset import dataset_card, dataset_rows, tasks_parquet

    rows = dataset_rows(pset.snippets)
    try:
        data = tasks_parquet(rows)
    except ImportError:
        print("error: --format parquet needs the pyarrow package", file=err)
        return EXIT_USAGE
    Path(args.output).write_bytes(data)
    print(f"wrote {len(rows)} tasks to {args.output}", file=err)
    if args.card:
        card = dataset_card(title=f"ResearchCodeBench tasks: {Path(args.pset).resolve().name}",
                            data_file=Path(args.output).name, rows=rows)
        Path(args.card).write_text(card, encoding="utf-8")
        print(f"wrote its dataset card to {args.card}", file=err)
    return EXIT_OK


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, total: int, stream: TextIO, enabled: bool):
        self.total, self.done, self.passed = total, 0, 0
        self.stream, self.enabled = stream, enabled and total > 0
        self.started = time.monotonic()

    def __call__(self, run: TestRun) -> None:
        self.done += 1
        self.passed += int(run.passed)
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.monotonic() - self.started
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} runs, "
            f"{self.passed} passed, {elapsed:5.1f}s "
        )
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def build_tasks(pset: ProblemSet, args: argparse.Namespace, err: TextIO) -> list[Task] | None:
    snippets = pset.snippets
    if args.reference:
        return [Task(paper, snip, reference_code(paper, snip)) for paper, snip in snippets]
    if args.blank:
        return [Task(paper, snip, ()) for paper, snip in snippets]
    try:
        data = Path(args.predictions).read_bytes()
    except OSError as exc:
        print(f"cannot read {args.predictions}: {exc.strerror}", file=err)
        return None
    predictions, problems = parse_predictions(data, pset)
    if problems:
        for problem in problems:
            print(f"{args.predictions}:{problem.line}: {problem.message}", file=err)
        if not args.skip_invalid:
            print(f"{len(problems)} bad line(s); nothing was scored (use --skip-invalid to score the valid lines)",
                  file=err)
            return None
        print(f"skipping {len(problems)} bad line(s)", file=err)
    wanted = {p.id for p in pset.papers}
    predictions = [p for p in predictions if p.paper in wanted]
    samples = sorted({p.sample for p in predictions}) or [0]
    index = {(p.paper, p.file, p.snippet, p.sample): p for p in predictions}
    tasks = []
    for sample in samples:
        for paper, snip in snippets:
            pred = index.get((paper.id, snip.file, snip.name, sample))
            code = answer_code(paper, snip, pred.completion, reindent=args.reindent) if pred else None
            tasks.append(Task(paper, snip, code, sample))
    return tasks


def _default_backend(python: str | None, err: TextIO) -> str:
    """With --python the user named an environment on this host: bwrap runs it, docker would not."""
    from .sandbox.auto import default_backend
    from .sandbox.bwrap import bwrap_available

    if python and bwrap_available() is None:
        print(f"using the bwrap sandbox with {python} (docker builds its own images instead; "
              "pass --backend docker to use them)", file=err)
        return "bwrap"
    return default_backend()


def sandbox_open(*, backend: str | None, python: str | None = None, envs_dir: str | None = None,
                 env_pythons: Sequence[str] | None = None, memory_mb: int = Limits.memory_mb,
                 err: TextIO = sys.stderr) -> Sandbox:
    """The sandbox ``score``'s options name (backend None: the default one); SandboxUnavailable or
    ValueError says why it cannot be had."""
    if backend is None:
        backend = _default_backend(python, err)
    env_options: dict = {}
    if envs_dir:
        env_options["envs_dir"] = envs_dir
    if env_pythons:
        env_options["pythons"] = parse_env_pythons(list(env_pythons))
    return get_sandbox(backend, python=python, limits=Limits(memory_mb=memory_mb), **env_options)


def cmd_score(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    pset = _load(args.pset, _papers_arg(args.papers), err)
    if pset is None:
        return EXIT_INVALID
    tasks = build_tasks(pset, args, err)
    if tasks is None:
        return EXIT_INVALID
    if args.timeout is not None:
        for paper in pset.papers:  # an explicit --timeout wins over the papers' own
            paper.timeout = args.timeout
    try:
        sandbox = sandbox_open(backend=args.backend, python=args.python, envs_dir=args.envs_dir,
                               env_pythons=args.env_python, memory_mb=args.memory_mb, err=err)
    except (SandboxUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    progress = Progress(len(tasks), err, enabled=not args.quiet and err.isatty())
    started = time.monotonic()
    try:
        cache = None
        if args.cache:
            from .cache import VerdictCache

            cache = VerdictCache(args.cache)
        runs = run_tasks(tasks, sandbox=sandbox, workers=args.workers, timeout=DEFAULT_TIMEOUT, progress=progress,
                         cache=cache)
    finally:
        progress.finish()
        sandbox.close()
    results = {
        "problem_set": str(args.pset),
        "source": "reference" if args.reference else "blank" if args.blank else str(args.predictions),
        "backend": sandbox.describe(),
        "memory_bound": sandbox.memory_bound,
        "harness_version": HARNESS_VERSION,
        "reindent": bool(args.reindent),
        "seconds": round(time.monotonic() - started, 2),
        "summary": summarize(runs),
        "snippets": [r.to_dict() for r in runs],
    }
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=1), encoding="utf-8")
    if not args.quiet:
        print_report(results, out)
        if args.output:
            print(f"\nresults written to {args.output}", file=out)
    return EXIT_OK if results["summary"].get("complete", True) else EXIT_INCOMPLETE


def print_report(results: dict, out: TextIO) -> None:
    summary = results["summary"]
    errors = summary.get("environment_errors") or []
    if errors:
        print(f"INCOMPLETE: {len(errors)} paper(s) could not be scored here (environment errors); the rates "
              f"cover the other {len(summary['papers'])} paper(s): "
              + "; ".join(f"{e['paper']} [{e['environment']}]: {e['reason']}" for e in errors), file=out)
    print(f"Problem set: {results.get('problem_set', '?')}   source: {results.get('source', '?')}   "
          f"backend: {results.get('backend', '?')}   {results.get('seconds', 0)}s", file=out)
    header = f"{'paper':<28} {'snippets':>8} {'passed':>7} {'lines':>6} {'scaled %':>9} {'pass %':>7}"
    print("\n" + header + "\n" + "-" * len(header), file=out)
    for paper, row in summary["papers"].items():
        passed = round(row["pass_rate"] * row["snippets"] / 100)
        print(f"{paper:<28} {row['snippets']:>8} {passed:>7} {row['weight']:>6.0f} "
              f"{row['scaled_pass_rate']:>9.2f} {row['pass_rate']:>7.2f}", file=out)
    print("-" * len(header), file=out)
    print(f"{'overall':<28} {summary['snippets']:>8} {summary['passed']:>7} {summary['total_weight']:>6.0f} "
          f"{summary['scaled_pass_rate']:>9.2f} {summary['pass_rate']:>7.2f}", file=out)
    print("\n" + summary_line(summary), file=out)
    if summary["samples"] > 1:
        print(f"{summary['samples']} samples: scaled {summary['scaled_pass_rate']:.2f} ± "
              f"{summary['scaled_pass_rate_std']:.2f}, pass rate {summary['pass_rate']:.2f} ± "
              f"{summary['pass_rate_std']:.2f}", file=out)
        for k, v in summary["pass_at_k"].items():
            print(f"  {k}: {v['plain']:.2f} % of snippets, {v['scaled']:.2f} % of lines", file=out)
    cats = summary["categories"]
    if cats:
        print("\nFailures by category: " + ", ".join(f"{c} {cats[c]}" for c in CATEGORIES if c in cats), file=out)
    # environment errors are named once, in the first line
    failed = [s for s in results["snippets"] if not s["passed"] and s.get("category") != "environment"]
    if failed:
        print("\nFailed snippets:", file=out)
        for s in failed[:50]:
            last = _failure_line(s)
            print(f"  {s['paper']}/{s['snippet']} [sample {s['sample']}] {s['category']}: {last[:100]}", file=out)
        if len(failed) > 50:
            print(f"  ... and {len(failed) - 50} more (see the results file)", file=out)
    # tampering:* and audit:* flags come from the run's audit trail, ast:* from the completion's code;
    # every one of them keeps an evaluation off the ranked board until a reviewer clears it
    flagged = [s for s in results["snippets"] if review_flags(s.get("flags") or [])]
    if flagged:
        print(f"\nFlagged runs ({len(flagged)}; a flagged evaluation is not ranked until a reviewer clears it):",
              file=out)
        for s in flagged[:50]:
            shown = ", ".join(review_flags(s["flags"]))
            outcome = "passed" if s["passed"] else s["category"]
            print(f"  {s['paper']}/{s['snippet']} [sample {s['sample']}] {outcome}: {shown}", file=out)
            notes = (s.get("extra") or {}).get("flag_notes") or {}
            for flag in review_flags(s["flags"]):
                if notes.get(flag):  # what the run or its code did to earn it
                    print(f"      {flag}: {str(notes[flag])[:160]}", file=out)
    ast_flags: dict[str, int] = {}
    for s in results["snippets"]:
        for flag in s.get("flags") or []:
            if flag.startswith("ast:"):
                ast_flags[flag] = ast_flags.get(flag, 0) + 1
    if ast_flags:
        print("\nAST flags (completions' code; they do not fail a run): "
              + ", ".join(f"{f} {n}" for f, n in sorted(ast_flags.items())), file=out)


def summary_line(summary: dict) -> str:
    """The headline of a results summary in one line."""
    lo, hi = summary["scaled_pass_rate_ci95"]
    return (f"Scaled pass rate {summary['scaled_pass_rate']:.2f} % (95 % CI over papers: {lo:.2f}–{hi:.2f}), "
            f"pass rate {summary['pass_rate']:.2f} %, {summary['passed']} of {summary['snippets']} snippet runs passed")


def _failure_line(run: dict) -> str:
    """The line that says why a run failed: the exception line (with its message) when there is one."""
    if run.get("category") == "timeout":
        return f"timed out after {run.get('seconds', 0):.0f}s"
    code = run.get("exit_code")
    if run.get("category") == "crash" and isinstance(code, int) and code < 0:
        return f"killed by signal {-code}"
    lines = [ln for ln in run.get("output_tail", "").splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if not line[0].isspace() and re.match(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b", line):
            if line.rstrip().endswith(":") and i + 1 < len(lines):  # e.g. numpy puts the message below
                return f"{line.strip()} {lines[i + 1].strip()}"
            return line
    return lines[-1] if lines else ""


def cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        results = json.loads(Path(args.results).read_text(encoding="utf-8"))
        results["summary"]["papers"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.results} is not a results file written by 'score': {exc}", file=err)
        return EXIT_INVALID
    if args.summary:
        print(summary_line(results["summary"]), file=out)
        return EXIT_OK
    print_report(results, out)
    return EXIT_OK


def cmd_generate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return generate_command(args, out, err, env=dict(os.environ))


def cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return run_command(args, out, err, env=dict(os.environ), cli_main=main)


COMMANDS = {"validate": cmd_validate, "tasks": cmd_tasks, "score": cmd_score, "report": cmd_report, "submit": cmd_submit,
            "env": cmd_env, "generate": cmd_generate, "run": cmd_run, "inspect-log": cmd_inspect_log,
            "run-here": cmd_run_here}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args, out or sys.stdout, err or sys.stderr)
