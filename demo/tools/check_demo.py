"""Sanity checks for a paper2code problem set (by default the demo set beside this folder).

For every paper of papers.yaml:
  * the annotated files parse (tags nest, names unique per file, every snippet
    has at least one code line), the listed context files exist;
  * each `*_ref.py` reference copy equals its annotated file with the tag lines
    removed (apart from the first docstring line);
  * the unmodified folder passes `python paper2code_test.py`;
  * every snippet, blanked in two ways, makes the test fail:
      - "empty": the body removed (this may leave a SyntaxError/IndentationError),
      - "pass":  the body replaced by a single `pass` at the snippet's indentation.

Usage: python demo/tools/check_demo.py [PSET_DIR] [--jobs N] [--python EXE]
Exit status 0 when everything holds.
"""
from __future__ import annotations

import argparse
import os
import concurrent.futures
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import p2c  # noqa: E402


def ref_files(paper_dir, annotated):
    """Map annotated relpath -> reference file path, by the `<stem>_ref.py` convention."""
    out = {}
    for rel in annotated:
        stem = Path(rel).stem
        for candidate in (paper_dir / Path(rel).parent / f"{stem}_ref.py", paper_dir / f"{stem}_ref.py"):
            if candidate.exists():
                out[rel] = candidate
                break
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pset", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    pset = Path(args.pset)
    problems = []
    papers = p2c.load_papers(pset)
    jobs = []
    summary = []
    for paper in papers:
        pdir = pset / paper["id"]
        snippets = p2c.paper_snippets(pset, paper)
        for rel in paper["context_file_paths"]:
            if not (pdir / rel).is_file():
                problems.append(f"{paper['id']}: context file {rel} missing")
        for snip in snippets:
            if snip.weight < 1:
                problems.append(f"{paper['id']}/{snip.file}: snippet {snip.name!r} has no code line")
        for rel, ref in ref_files(pdir, paper["annotated_file_paths"]).items():
            stripped = [ln for ln in (pdir / rel).read_text().split("\n") if not p2c.is_tag_line(ln)]
            if stripped[1:] != ref.read_text().split("\n")[1:]:
                problems.append(f"{paper['id']}: {ref.name} differs from {rel} without tags")
        depth = max(s.depth for s in snippets)
        summary.append((paper["id"], len(snippets), sum(s.weight for s in snippets), depth))
        jobs.append((paper["id"], None, "reference", pdir, None))
        for snip in snippets:
            empty = p2c.insert_code(snip, [])
            passed = p2c.insert_code(snip, [snip.indent + "pass"])
            jobs.append((paper["id"], snip, "empty", pdir, {snip.file: empty}))
            jobs.append((paper["id"], snip, "pass", pdir, {snip.file: passed}))

    started = time.perf_counter()
    ref_times = {}
    blank_results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(p2c.run_test, job[3], job[4], args.timeout, args.python): job for job in jobs}
        for fut in concurrent.futures.as_completed(futures):
            paper_id, snip, variant, _, _ = futures[fut]
            res = fut.result()
            if variant == "reference":
                ref_times[paper_id] = res["seconds"]
                if not res["passed"]:
                    problems.append(f"{paper_id}: reference does NOT pass\n{res['output']}")
            else:
                blank_results.append((paper_id, snip, variant, res))
                if res["passed"]:
                    problems.append(f"{paper_id}/{snip.file}: blanked ({variant}) snippet {snip.name!r} still passes")
    wall = time.perf_counter() - started

    print(f"{'paper':<16} {'snippets':>8} {'weight':>6} {'depth':>5} {'ref run (s)':>11}")
    for paper_id, count, weight, depth in summary:
        print(f"{paper_id:<16} {count:>8} {weight:>6} {depth:>5} {ref_times.get(paper_id, float('nan')):>11.2f}")
    total = sum(s[1] for s in summary)
    print(f"{'total':<16} {total:>8} {sum(s[2] for s in summary):>6} {max(s[3] for s in summary):>5}")
    cats = {}
    for _, _, variant, res in blank_results:
        cats.setdefault(variant, {}).setdefault(res["category"], 0)
        cats[variant][res["category"]] += 1
    for variant, counts in sorted(cats.items()):
        print(f"blanked ({variant}): " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    slowest = max((r["seconds"] for *_, r in blank_results), default=0.0)
    print(f"{len(jobs)} test runs in {wall:.1f} s wall ({args.jobs} jobs); slowest blanked run {slowest:.2f} s")
    if problems:
        print("\nPROBLEMS:")
        for p in problems:
            print(" -", p)
        return 1
    print("all checks hold: references pass, every blanked snippet fails")
    return 0


if __name__ == "__main__":
    sys.exit(main())
