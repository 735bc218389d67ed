"""A problem set of one small paper with one snippet, written for a test (the sandbox tests' papers)."""
from __future__ import annotations

from pathlib import Path

from benchmark_core.problemset import load_problemset

#: the scientific papers' environment (bench/make_pset.py): numpy, scipy, pandas, matplotlib
SCIENTIFIC_REQUIREMENTS = "numpy\nscipy\npandas\nmatplotlib\nml_collections\n"


def one_snippet_paper(root: Path, pid: str, *, imports: str, func: str, body: str, test: str,
                      requirements: str, title: str):
    """``root/set``: paper ``pid`` whose ``func(x)`` computes ``y`` by ``body`` (the snippet ``func``,
    indented lines) and returns it, its reference module ``pid_ref`` and ``test`` as its
    paper2code_test.py (which imports both as ``m`` and ``r``)."""
    folder = root / "set" / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.py").write_text(
        f"{imports}\n\n\ndef {func}(x):\n"
        f'    # <paper2code name="{func}">\n{body}    # </paper2code name="{func}">\n    return y\n')
    (folder / f"{pid}_ref.py").write_text(f"{imports}\n\n\ndef {func}(x):\n{body}    return y\n")
    (folder / "paper2code_test.py").write_text(test)
    (folder / "requirements.txt").write_text(requirements)
    (folder / "paper2code_paper.md").write_text(f"# {title}\n")
    (root / "set" / "papers.yaml").write_text(
        f"- id: {pid}\n  title: {title}\n  venue: test\n  first_commit_date: '2025-01-01'\n"
        f"  annotated_file_paths: {pid}.py\n  context_file_paths: null\n")
    return load_problemset(root / "set")
