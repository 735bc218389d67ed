"""The benchmark this site hosts, as the pages and citations name it: paper, authors, repository."""
from __future__ import annotations

__all__ = ["BENCHMARK", "benchmark_bibtex"]

BENCHMARK = {
    "title": "ResearchCodeBench: Benchmarking LLMs on Implementing Novel Machine Learning Research Code",
    "authors": ["Tianyu Hua", "Harper Hua", "Violet Xiang", "Benjamin Klieger", "Sang T. Truong", "Weixin Liang",
                "Fan-Yun Sun", "Nick Haber"],
    "short": "Hua et al., 2025",
    "year": 2025,
    "arxiv_id": "2506.02314",
    "paper_url": "https://arxiv.org/abs/2506.02314",
    "repository_url": "https://github.com/PatrickHua/ResearchCodeBench",
    "project_url": "https://researchcodebench.github.io/",
}


def benchmark_bibtex() -> str:
    """BibTeX of the ResearchCodeBench paper (cite it with any figure of this site)."""
    authors = " and ".join(_last_first(a) for a in BENCHMARK["authors"])
    return (
        "@article{hua2025researchcodebench,\n"
        f"  title = {{{BENCHMARK['title']}}},\n"
        f"  author = {{{authors}}},\n"
        f"  journal = {{arXiv preprint arXiv:{BENCHMARK['arxiv_id']}}},\n"
        f"  eprint = {{{BENCHMARK['arxiv_id']}}},\n"
        "  archivePrefix = {arXiv},\n"
        f"  year = {{{BENCHMARK['year']}}}\n"
        "}"
    )


def _last_first(name: str) -> str:
    first, _, last = name.rpartition(" ")
    return f"{last}, {first}" if first else last
