#!/usr/bin/env python3
"""Write a problem set of our own, big enough to measure scoring speed on.

    python bench/make_pset.py import-bound OUT [--papers 10 --snippets 8]
    python bench/make_pset.py compute-bound OUT [--papers 4 --snippets 6 --work-ms 1500]

import-bound: every paper's test imports torch and does a few milliseconds of tensor work, like
most published torch papers (the import is most of a fresh run's time). compute-bound: the test
does real work (matrix products for about ``--work-ms`` per run), like llm-sci-use. Each snippet is
a line or a small block of a function the test checks against a reference copy (``*_ref.py``,
untagged), so the reference passes and a blanked snippet fails. The set is in the published format
(papers.yaml + one folder per paper) and validates with ``python -m benchmark_core validate``.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import yaml


def _function(index: int, tagged: bool) -> str:
    """One small torch function; with ``tagged`` its body is a snippet of its own."""
    body = [
        "y = x * " + str(index + 2),
        "y = y + torch.arange(x.shape[-1], dtype=x.dtype)",
        "return torch.tanh(y).sum(dim=-1)",
    ]
    lines = [f"def f{index}(x):"]
    if tagged:
        lines.append(f'    # <paper2code name="step {index}">')
    lines += ["    " + b for b in body]
    if tagged:
        lines.append(f'    # </paper2code name="step {index}">')
    return "\n".join(lines) + "\n"


def _module(snippets: int, tagged: bool, work_ms: int) -> str:
    head = "import torch\n\n\n"
    funcs = "\n\n".join(_function(i, tagged) for i in range(snippets))
    work = ""
    if work_ms:
        # the test calls heavy() on the completion's module and the reference's: about work_ms of
        # 256x256 products on one quiet core in all (calibrated loosely, ~6 ms a product each side)
        reps = max(1, work_ms // 12)
        work = textwrap.dedent(f"""


            def heavy(seed):
                g = torch.Generator().manual_seed(seed)
                a = torch.rand(256, 256, generator=g)
                for _ in range({reps}):
                    a = torch.tanh(a @ a / 256.0)
                return float(a.sum())
            """)
    return head + funcs + work


def _test(paper: str, snippets: int, work_ms: int) -> str:
    checks = "\n".join(
        f"        self.assertTrue(torch.allclose(m.f{i}(x), r.f{i}(x)))" for i in range(snippets)
    )
    heavy = "        self.assertAlmostEqual(m.heavy(0), r.heavy(0), places=3)\n" if work_ms else ""
    return (
        "import unittest\n\nimport torch\n\n"
        f"import {paper} as m\nimport {paper}_ref as r\n\n\n"
        "class TestPaper(unittest.TestCase):\n"
        "    def test_functions(self):\n"
        "        torch.manual_seed(0)\n"
        "        x = torch.rand(4, 16)\n"
        f"{checks}\n"
        f"{heavy}\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    )


def pset_write(out: Path, *, kind: str, papers: int, snippets: int, work_ms: int) -> Path:
    """Write the problem set into ``out`` (created); return it."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for p in range(papers):
        pid = f"{kind.replace('-', '_')}_{p:02d}"
        folder = out / pid
        folder.mkdir(exist_ok=True)
        (folder / f"{pid}.py").write_text(_module(snippets, True, work_ms))
        (folder / f"{pid}_ref.py").write_text(_module(snippets, False, work_ms))
        (folder / "paper2code_test.py").write_text(_test(pid, snippets, work_ms))
        (folder / "paper2code_paper.md").write_text(f"# Bench paper {p}\n\nA synthetic {kind} paper.\n")
        (folder / "requirements.txt").write_text("torch\n")
        entries.append({
            "id": pid, "title": f"Bench {kind} paper {p}", "venue": "bench",
            "first_commit_date": "2025-01-01", "annotated_file_paths": f"{pid}.py",
            "context_file_paths": None,
        })
    (out / "papers.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("import-bound", "compute-bound"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--papers", type=int)
    parser.add_argument("--snippets", type=int)
    parser.add_argument("--work-ms", type=int, default=1500, help="compute-bound: work per run (ms)")
    args = parser.parse_args(argv)
    import_bound = args.kind == "import-bound"
    papers = args.papers or (10 if import_bound else 4)
    snippets = args.snippets or (8 if import_bound else 6)
    pset_write(args.out, kind=args.kind, papers=papers, snippets=snippets, work_ms=0 if import_bound else args.work_ms)
    print(f"{args.out}: {papers} papers x {snippets} snippets ({args.kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
