"""Reads of the papers' files on this host's disk: the annotated file as a model saw it (the
snippet masked) and the tasks of a release's papers that have their code here."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from catalog.models import Release, ReleasePaper
from .details import snippet_get

__all__ = ["release_tasks", "release_dataset", "snippet_masked_view"]


def snippet_masked_view(*, release: Release, paper_id: str, snippet: str, file: str | None = None) -> str | None:
    """The annotated file as the model saw it (snippet masked, other tags removed); None without code."""
    from benchmark_core.annotation import parse_annotations
    from benchmark_core.masking import masked_file

    snip = snippet_get(release, paper_id, snippet, file)
    rp = ReleasePaper.objects.filter(release=release, paper=snip.paper).first()
    if rp is None or not rp.folder or not snip.file:
        return None
    path = Path(rp.folder) / snip.file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    parsed = parse_annotations(text, snip.file)
    try:
        core_snippet = parsed.snippet(snip.name)
    except KeyError:
        return None
    return masked_file(parsed.lines, core_snippet)


def _release_snippets(*, release: Release) -> Iterable[tuple[Any, Any]]:
    """(paper, snippet) of the release's papers that have their code here, in the problem set's order."""
    from benchmark_core.problemset import load_problemset

    roots: dict[Path, list[str]] = {}
    for folder in ReleasePaper.objects.filter(release=release).exclude(folder="").values_list("folder", flat=True):
        roots.setdefault(Path(folder).parent, []).append(Path(folder).name)
    for root, ids in roots.items():
        # the release folder is a problem set: its papers.yaml gives the entries and the order
        yield from load_problemset(root, papers=ids).snippets


def release_tasks(*, release: Release, with_paper: bool = True) -> Iterable[dict[str, Any]]:
    """The tasks of the release's papers that have their code here, as ``python -m benchmark_core
    tasks`` writes them (one dict per snippet, in the problem set's order)."""
    from benchmark_core.masking import task_record

    for paper, snip in _release_snippets(release=release):
        yield task_record(paper, snip, with_paper=with_paper)


def release_dataset(*, release: Release) -> tuple[bytes, str]:
    """The release's tasks as ``tasks --format parquet`` writes them, and their dataset card."""
    from benchmark_core.dataset import dataset_card, dataset_rows, tasks_parquet

    rows = dataset_rows(_release_snippets(release=release))
    card = dataset_card(title=f"ResearchCodeBench tasks: {release.name}", data_file=f"tasks-{release.slug}.parquet",
                        rows=rows, source=f"release {release.slug}")
    return tasks_parquet(rows), card
