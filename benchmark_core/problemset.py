"""Load a problem-set folder in the published ResearchCodeBench format."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .annotation import FileAnnotations, Problem, Snippet, TAG_RE, parse_annotations
from .environments import (
    ENVIRONMENTS_FILE,
    PUBLISHED_ENVIRONMENTS,
    environment_get,
    environment_mapping_read,
)

__all__ = [
    "Paper",
    "ProblemSet",
    "ProblemSetError",
    "load_problemset",
    "validate_problemset",
    "paper_entry",
    "paper_entry_write",
    "paper_folder_load",
    "TEST_SCRIPT",
]

TEST_SCRIPT = "paper2code_test.py"
PAPER_TEXT_NAMES = ("paper2code_paper.tex", "paper2code_paper.md", "paper2code_paper.txt")
REQUIREMENTS_NAMES = ("paper2code_requirements.txt", "requirements.txt")
PAPER_CONFIG = "paper2code.yaml"
IGNORED_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints", ".venv", "node_modules"}


class ProblemSetError(Exception):
    """A problem set that cannot be used; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass
class Paper:
    id: str
    folder: Path
    title: str = ""
    venue: str = ""
    arxiv_abs: str = ""
    arxiv_date: dt.date | None = None
    arxiv_v1_date: dt.date | None = None
    github_url: str = ""
    first_commit_date: dt.date | None = None
    last_commit_date: dt.date | None = None
    annotated_files: list[str] = field(default_factory=list)
    context_files: list[str] = field(default_factory=list)
    paper_text_file: str | None = None
    requirements: list[str] = field(default_factory=list)
    fresh_process: bool = False
    timeout: float | None = None
    #: named environment (environments.py); None: the backend's inference
    environment: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    files: dict[str, FileAnnotations] = field(default_factory=dict)

    @property
    def snippets(self) -> list[Snippet]:
        return [snip for rel in self.annotated_files for snip in self.files[rel].snippets]

    @property
    def total_weight(self) -> int:
        return sum(s.weight for s in self.snippets)

    def snippet(self, name: str, file: str | None = None) -> Snippet:
        """Find a snippet by name (and file when names repeat across files)."""
        matches = [s for s in self.snippets if s.name == name and (file is None or s.file == file)]
        if not matches:
            raise KeyError(f"{self.id}: no snippet {name!r}" + (f" in {file}" if file else ""))
        if len(matches) > 1:
            raise KeyError(f"{self.id}: snippet {name!r} is in several files; give 'file'")
        return matches[0]

    def paper_text(self) -> str:
        if not self.paper_text_file:
            return ""
        return (self.folder / self.paper_text_file).read_text(encoding="utf-8", errors="replace")

    def read(self, rel: str) -> str:
        return (self.folder / rel).read_text(encoding="utf-8", errors="replace")


@dataclass
class ProblemSet:
    root: Path
    papers: list[Paper]

    def paper(self, paper_id: str) -> Paper:
        for paper in self.papers:
            if paper.id == paper_id:
                return paper
        raise KeyError(paper_id)

    @property
    def snippets(self) -> list[tuple[Paper, Snippet]]:
        return [(paper, snip) for paper in self.papers for snip in paper.snippets]


def _as_list(value: Any) -> list[str]:
    """Accept a string, a list, None or the string 'null' (all occur in the published file)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.strip()
        if value.lower() in ("", "null", "none", "~"):
            return []
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in _as_list(v)]
    return [str(value)]


def _as_date(value: Any) -> dt.date | None:
    if value is None or isinstance(value, dt.date):
        return value if not isinstance(value, dt.datetime) else value.date()
    text = str(value).strip()
    if text.lower() in ("", "null", "none"):
        return None
    for fmt in ("%Y-%m-%d", "%Y/%m/%d", "%Y-%m", "%Y"):
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    raise ValueError(f"not a date: {text!r}")


def _as_str(value: Any) -> str:
    if value is None or (isinstance(value, str) and value.strip().lower() == "null"):
        return ""
    return str(value).strip()


def _clean_rel(rel: str) -> str:
    rel = rel.strip().replace("\\", "/")
    while rel.startswith("./"):
        rel = rel[2:]
    return rel


def _discover_annotated(folder: Path) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        if any(part in IGNORED_DIRS for part in path.relative_to(folder).parts):
            continue
        if path.name == TEST_SCRIPT:
            continue
        if path.stem.endswith("_ref") and path.with_name(path.stem[: -len("_ref")] + ".py").exists():
            continue  # a copy of the reference implementation that keeps the tags: not a task
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(TAG_RE.match(line) for line in text.splitlines()):
            found.append(path.relative_to(folder).as_posix())
    return found


def _read_entries(root: Path, problems: list[Problem]) -> list[dict[str, Any]]:
    meta = root / "papers.yaml"
    if not meta.exists():
        # no metadata: every sub-folder with a test script is a paper
        return [{"id": d.name} for d in sorted(root.iterdir()) if (d / TEST_SCRIPT).exists()]
    try:
        data = yaml.safe_load(meta.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
        problems.append(Problem(str(meta), max(line, 1), f"papers.yaml is not valid YAML: {exc}"))
        return []
    if isinstance(data, dict) and isinstance(data.get("papers"), list):
        data = data["papers"]
    if not isinstance(data, list):
        problems.append(Problem(str(meta), 1, "papers.yaml must be a list of paper entries"))
        return []
    entries = []
    for index, entry in enumerate(data):
        if not isinstance(entry, dict) or not entry.get("id"):
            problems.append(Problem(str(meta), 1, f"entry {index + 1} has no 'id'"))
            continue
        entries.append(entry)
    return entries


def _load_paper(root: Path, entry: dict[str, Any], problems: list[Problem],
                mapping: dict[str, str] | None = None) -> Paper | None:
    paper_id = str(entry["id"]).strip()
    folder = root / paper_id
    where = str(root / "papers.yaml")
    if not folder.is_dir():
        problems.append(Problem(where, 1, f"paper {paper_id!r}: folder {folder} does not exist"))
        return None
    config: dict[str, Any] = {}
    if (folder / PAPER_CONFIG).exists():
        try:
            loaded = yaml.safe_load((folder / PAPER_CONFIG).read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as exc:
            problems.append(Problem(str(folder / PAPER_CONFIG), 1, f"not valid YAML: {exc}"))
    merged = {**config, **entry}
    dates: dict[str, dt.date | None] = {}
    for key in ("arxiv_date", "arxiv_v1_date", "first_commit_date", "last_commit_date"):
        try:
            dates[key] = _as_date(merged.get(key))
        except ValueError as exc:
            problems.append(Problem(where, 1, f"paper {paper_id!r}: {key}: {exc}"))
            dates[key] = None
    annotated = [_clean_rel(p) for p in _as_list(merged.get("annotated_file_paths"))] or _discover_annotated(folder)
    context = [_clean_rel(p) for p in _as_list(merged.get("context_file_paths"))]
    environment = _as_str(merged.get("environment")) or (mapping or {}).get(paper_id) \
        or (PUBLISHED_ENVIRONMENTS.get(paper_id) if mapping is None else None) or None
    try:
        environment_get(environment)
    except KeyError as exc:
        problems.append(Problem(where, 1, f"paper {paper_id!r}: {exc.args[0]}"))
        environment = None
    paper = Paper(
        id=paper_id,
        folder=folder,
        title=_as_str(merged.get("title")) or paper_id,
        venue=_as_str(merged.get("venue")),
        arxiv_abs=_as_str(merged.get("arxiv_abs")),
        github_url=_as_str(merged.get("github_url")),
        annotated_files=annotated,
        context_files=context,
        fresh_process=bool(merged.get("fresh_process", False)),
        timeout=float(merged["timeout"]) if merged.get("timeout") else None,
        environment=environment,
        metadata={k: (v.isoformat() if isinstance(v, dt.date) else v) for k, v in entry.items()},
        **dates,
    )
    paper.paper_text_file = next((n for n in PAPER_TEXT_NAMES if (folder / n).exists()), None)
    for name in REQUIREMENTS_NAMES:
        if (folder / name).exists():
            reqs = (folder / name).read_text(encoding="utf-8", errors="replace").splitlines()
            paper.requirements = [r.strip() for r in reqs if r.strip() and not r.strip().startswith("#")]
            break
    if not (folder / TEST_SCRIPT).exists():
        problems.append(Problem(str(folder), 1, f"paper {paper_id!r}: {TEST_SCRIPT} is missing"))
    if not annotated:
        problems.append(Problem(str(folder), 1, f"paper {paper_id!r}: no annotated file"))
    for rel in annotated:
        path = folder / rel
        if not path.is_file():
            problems.append(Problem(str(path), 1, f"paper {paper_id!r}: annotated file {rel} does not exist"))
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(str(path), 1, f"not UTF-8 text: {exc}"))
            continue
        parsed = parse_annotations(text, rel)
        problems.extend(Problem(str(folder / p.path), p.line, p.message) for p in parsed.problems)
        if not parsed.snippets and not parsed.problems:
            problems.append(Problem(str(path), 1, "annotated file has no paper2code snippet"))
        paper.files[rel] = parsed
    for rel in context:
        if not (folder / rel).is_file():
            problems.append(Problem(str(folder / rel), 1, f"paper {paper_id!r}: context file {rel} does not exist"))
    # names must identify a snippet within its file; across files, 'file' disambiguates
    return paper


def validate_problemset(path: str | Path) -> tuple[ProblemSet, list[Problem]]:
    """Load every paper and return the problem set with every problem found."""
    root = Path(path)
    problems: list[Problem] = []
    if not root.is_dir():
        return ProblemSet(root, []), [Problem(str(root), 1, "not a folder")]
    entries = _read_entries(root, problems)
    # a problem set's own mapping replaces the shipped one of the published papers
    mapping: dict[str, str] | None = None
    if (root / ENVIRONMENTS_FILE).exists():
        try:
            mapping = environment_mapping_read(root)
        except ValueError as exc:
            problems.append(Problem(str(root / ENVIRONMENTS_FILE), 1, str(exc)))
            mapping = {}
    papers: list[Paper] = []
    seen: set[str] = set()
    for entry in entries:
        pid = str(entry["id"]).strip()
        if pid in seen:
            problems.append(Problem(str(root / "papers.yaml"), 1, f"duplicate paper id {pid!r}"))
            continue
        seen.add(pid)
        paper = _load_paper(root, entry, problems, mapping)
        if paper is not None:
            papers.append(paper)
    if not entries and not problems:
        problems.append(Problem(str(root), 1, "no paper found (no papers.yaml and no folder with a test script)"))
    return ProblemSet(root, papers), problems


def load_problemset(path: str | Path, *, papers: list[str] | None = None) -> ProblemSet:
    """Load a valid problem set, optionally only some papers; raise ProblemSetError otherwise."""
    pset, problems = validate_problemset(path)
    if papers:
        wanted = set(papers)
        known = {p.id for p in pset.papers}
        unknown = sorted(wanted - known)
        if unknown:
            problems.append(Problem(str(path), 1, f"unknown paper id(s): {', '.join(unknown)}"))

        def concerns_selection(problem: Problem) -> bool:
            owners = [p for p in pset.papers if Path(problem.path).is_relative_to(p.folder)]
            return not owners or owners[0].id in wanted

        problems = [p for p in problems if concerns_selection(p)]
        pset.papers = [p for p in pset.papers if p.id in wanted]
    if problems:
        raise ProblemSetError(problems)
    return pset


# --------------------------------------------------------------------------- metadata of copies
#: papers.yaml keys that decide how a paper is scored: a copy of its folder must keep them
SCORING_KEYS = ("annotated_file_paths", "context_file_paths", "timeout", "fresh_process", "environment")


def paper_entry(paper: Paper) -> dict[str, Any]:
    """The paper's papers.yaml entry as loaded, with the keys that decide its scoring made explicit."""
    entry = dict(paper.metadata)
    entry["id"] = paper.id
    entry["annotated_file_paths"] = list(paper.annotated_files)
    entry["context_file_paths"] = list(paper.context_files)
    for key in ("timeout", "environment"):
        entry.pop(key, None)
    if paper.timeout:
        entry["timeout"] = paper.timeout
    entry["fresh_process"] = bool(paper.fresh_process)
    if paper.environment:
        entry["environment"] = paper.environment
    return entry


def paper_entry_write(root: str | Path, entry: dict[str, Any]) -> Path:
    """Put ``entry`` into ROOT/papers.yaml (replacing the entry of the same id); return the file.

    With the paper's folder at ROOT/<id>/, ROOT is then a problem set that loads the paper with
    its metadata (``paper_folder_load(ROOT / id)``): every copy of a paper keeps its entry.
    """
    import fcntl  # noqa: PLC0415
    import os  # noqa: PLC0415

    root = Path(root)
    paper_id = str(entry.get("id") or "").strip()
    if not paper_id:
        raise ValueError("a papers.yaml entry needs an 'id'")
    root.mkdir(parents=True, exist_ok=True)
    meta = root / "papers.yaml"
    with open(root / ".papers.yaml.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries: list[dict[str, Any]] = []
        if meta.exists():
            problems: list[Problem] = []
            entries = _read_entries(root, problems)
            if problems:
                raise ValueError(f"{meta} cannot be updated: {problems[0].message}")
        entries = [e for e in entries if str(e["id"]).strip() != paper_id] + [
            {k: (v.isoformat() if isinstance(v, dt.date) else v) for k, v in entry.items()}
        ]
        tmp = meta.with_name(f".papers.yaml.{os.getpid()}.tmp")
        tmp.write_text(yaml.safe_dump(entries, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.replace(tmp, meta)
    return meta


def paper_folder_load(folder: str | Path) -> Paper:
    """Load the paper in ``folder`` with its entry from the papers.yaml beside it (ProblemSetError otherwise)."""
    folder = Path(folder)
    return load_problemset(folder.parent, papers=[folder.name]).paper(folder.name)
