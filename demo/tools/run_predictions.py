"""Score the demo predictions locally and check they behave as designed.

For every line of demo/predictions/<model>.jsonl: validate the JSON, insert the
completion into its snippet, run the paper's test and classify the outcome.
Checks that demo-perfect passes everywhere (and that its extracted code equals
the reference body), demo-empty fails everywhere, and demo-imperfect gives the
categories listed in make_predictions.IMPERFECT (every other snippet passing),
with every error category present at least once.

Usage: python demo/tools/run_predictions.py [--jobs N] [--timeout S] [--python EXE] [-v]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_predictions  # noqa: E402
import p2c  # noqa: E402

DEMO = make_predictions.DEMO
MODELS = ("demo-perfect", "demo-empty", "demo-imperfect")


def load_jsonl(path):
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            assert isinstance(row, dict), f"{path.name}:{number} not an object"
            for key in ("paper", "snippet", "file", "completion"):
                assert isinstance(row.get(key), str), f"{path.name}:{number} field {key!r} missing or not a string"
            assert isinstance(row.get("sample", 0), int), f"{path.name}:{number} bad sample"
            rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    snippets = {}
    for paper in p2c.load_papers(DEMO):
        for snip in p2c.paper_snippets(DEMO, paper):
            snippets[(paper["id"], snip.name)] = snip
    problems = []
    jobs = []
    for model in MODELS:
        rows = load_jsonl(DEMO / "predictions" / f"{model}.jsonl")
        keys = [(r["paper"], r["snippet"]) for r in rows]
        if sorted(keys) != sorted(snippets):
            problems.append(f"{model}: does not hold exactly one line per snippet")
        for row in rows:
            snip = snippets[(row["paper"], row["snippet"])]
            if row["file"] != snip.file:
                problems.append(f"{model}: {row['snippet']!r} has file {row['file']!r}, expected {snip.file!r}")
            if model == "demo-perfect" and p2c.extract_code(row["completion"]).split("\n") != snip.code:
                problems.append(f"demo-perfect: extracted code of {row['snippet']!r} differs from the reference")
            text = p2c.insert_completion(snip, row["completion"])
            jobs.append((model, row["paper"], snip, text))

    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(p2c.run_test, DEMO / paper, {snip.file: text}, args.timeout, args.python):
                   (model, paper, snip) for model, paper, snip, text in jobs}
        for fut in concurrent.futures.as_completed(futures):
            model, paper, snip = futures[fut]
            results[(model, paper, snip.name)] = (snip, fut.result())

    for model in MODELS:
        rows = [(k, v) for k, v in results.items() if k[0] == model]
        passed = [v for k, v in rows if v[1]["passed"]]
        weight = sum(s.weight for _, (s, _) in rows)
        passed_weight = sum(s.weight for s, _ in passed)
        cats = {}
        for _, (_, res) in rows:
            cats[res["category"]] = cats.get(res["category"], 0) + 1
        print(f"{model:<15} pass rate {100 * len(passed) / len(rows):6.2f} %  "
              f"scaled {100 * passed_weight / weight:6.2f} %  "
              + ", ".join(f"{c}={n}" for c, n in sorted(cats.items())))

    print("\ndemo-imperfect failures:")
    print(f"  {'paper':<14} {'snippet':<24} {'category':<10} exceptions")
    for (model, paper, name), (snip, res) in sorted(results.items()):
        if model == "demo-perfect" and not res["passed"]:
            problems.append(f"demo-perfect fails {paper}/{name}: {res['category']}\n{res['output']}")
        if model == "demo-empty" and res["passed"]:
            problems.append(f"demo-empty passes {paper}/{name}")
        if model != "demo-imperfect":
            continue
        expected = make_predictions.IMPERFECT.get((paper, name), ("pass", None))[0]
        if res["category"] != "pass":
            print(f"  {paper:<14} {name:<24} {res['category']:<10} {', '.join(res['exceptions'])}")
            if args.verbose:
                print("    | " + "\n    | ".join(res["output"].strip().split("\n")[-6:]))
        if res["category"] != expected:
            problems.append(f"demo-imperfect {paper}/{name}: expected {expected}, got {res['category']}")
    seen = {res["category"] for (model, _, _), (_, res) in results.items() if model == "demo-imperfect"}
    missing = [c for c in p2c.CATEGORIES if c not in seen]
    if missing:
        problems.append(f"demo-imperfect lacks categories: {missing}")
    if problems:
        print("\nPROBLEMS:")
        for p in problems:
            print(" -", p)
        return 1
    print("\nall prediction checks hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
