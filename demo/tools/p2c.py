"""Small, self-contained helpers for working with a paper2code problem set.

Used by the demo tools (check_demo.py, make_predictions.py, run_predictions.py).
They follow the published harness rules: snippets are delimited by the comment
lines `# <paper2code name="NAME">` / `# </paper2code name="NAME">`, the answer's
last fenced python block (or the bare answer) replaces the lines between the
two tags as given, and a run passes when `python paper2code_test.py` exits 0
and its output holds none of the failure markers.

This module only needs the standard library (plus PyYAML for load_papers).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPEN_RE = re.compile(r'^(?P<indent>[ \t]*)# <paper2code name="(?P<name>[^"]+)">\s*$')
CLOSE_RE = re.compile(r'^(?P<indent>[ \t]*)# </paper2code name="(?P<name>[^"]+)">\s*$')
FENCE_RE = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
FAILURE_MARKERS = ("Error:", "Exception:", "Traceback", "failed")
EXC_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::|\s*$)", re.MULTILINE)

CATEGORY_OF_EXCEPTION = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "NameError": "name",
    "UnboundLocalError": "name",
    "TypeError": "type",
    "AttributeError": "attribute",
    "IndexError": "index",
    "KeyError": "index",
    "ImportError": "import",
    "ModuleNotFoundError": "import",
    "AssertionError": "logic",
}
CATEGORIES = ("syntax", "name", "type", "attribute", "index", "import", "logic",
              "timeout", "crash", "other")


class TagError(ValueError):
    """A malformed paper2code tag structure; `line` is 1-based."""

    def __init__(self, message, line):
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclasses.dataclass
class Snippet:
    name: str
    file: str          # path relative to the paper folder
    start: int         # 0-based index of the open tag line
    end: int           # 0-based index of the close tag line
    indent: str
    depth: int         # 1 = top level
    parent: str | None
    lines: list        # all lines of the file (shared)

    @property
    def body(self):
        """Lines between the two tags, inner tag lines included."""
        return self.lines[self.start + 1:self.end]

    @property
    def code(self):
        """The body with every tag line removed: what a perfect answer contains."""
        return [ln for ln in self.body if not is_tag_line(ln)]

    @property
    def weight(self):
        """Number of code lines (neither blank nor comment-only)."""
        return sum(1 for ln in self.body if ln.strip() and not ln.strip().startswith("#"))


def is_tag_line(line):
    return bool(OPEN_RE.match(line) or CLOSE_RE.match(line))


def parse_snippets(text, file="<file>"):
    """Parse the tags of one annotated file; raise TagError on malformed structure."""
    lines = text.split("\n")
    stack = []
    snippets = []
    seen = set()
    for idx, line in enumerate(lines):
        m_open = OPEN_RE.match(line)
        m_close = CLOSE_RE.match(line)
        if m_open:
            name = m_open["name"]
            if name in seen:
                raise TagError(f"duplicate snippet name {name!r}", idx + 1)
            seen.add(name)
            stack.append((name, idx, m_open["indent"]))
        elif m_close:
            name = m_close["name"]
            if not stack:
                raise TagError(f"close tag {name!r} without an open tag", idx + 1)
            open_name, open_idx, indent = stack[-1]
            if open_name != name:
                raise TagError(f"close tag {name!r} does not match innermost open tag {open_name!r}", idx + 1)
            if m_close["indent"] != indent:
                raise TagError(f"close tag {name!r} indented differently from its open tag", idx + 1)
            stack.pop()
            parent = stack[-1][0] if stack else None
            snippets.append(Snippet(name, file, open_idx, idx, indent, len(stack) + 1, parent, lines))
    if stack:
        name, idx, _ = stack[-1]
        raise TagError(f"tag {name!r} is never closed", idx + 1)
    snippets.sort(key=lambda s: s.start)
    return snippets


def load_papers(pset_dir):
    import yaml

    with open(Path(pset_dir) / "papers.yaml", encoding="utf-8") as fh:
        papers = yaml.safe_load(fh)
    for paper in papers:
        for key in ("annotated_file_paths", "context_file_paths"):
            value = paper.get(key)
            if value is None or value == "null":
                value = []
            elif isinstance(value, str):
                value = [value]
            paper[key] = [v.strip() for v in value]
    return papers


def paper_snippets(pset_dir, paper):
    out = []
    for rel in paper["annotated_file_paths"]:
        text = (Path(pset_dir) / paper["id"] / rel).read_text(encoding="utf-8")
        out.extend(parse_snippets(text, rel))
    return out


def extract_code(completion):
    """Last fenced python block of the answer, or the whole answer when it has none."""
    blocks = FENCE_RE.findall(completion)
    code = blocks[-1] if blocks else completion
    if code.endswith("\n"):
        code = code[:-1]
    return code


def insert_code(snippet, code_lines):
    """The file text with the snippet body replaced by code_lines and all tag lines removed."""
    lines = snippet.lines
    new = lines[:snippet.start + 1] + list(code_lines) + lines[snippet.end:]
    return "\n".join(ln for ln in new if not is_tag_line(ln))


def insert_completion(snippet, completion):
    code = extract_code(completion)
    return insert_code(snippet, code.split("\n") if code else [])


def run_test(paper_dir, replaced=None, timeout=20.0, python=None):
    """Copy the paper folder, overwrite {relpath: text} and run paper2code_test.py.

    Returns a dict with passed, category, returncode, seconds, output.
    """
    python = python or sys.executable
    with tempfile.TemporaryDirectory(prefix="p2c-") as tmp:
        work = Path(tmp) / "paper"
        shutil.copytree(paper_dir, work, ignore=shutil.ignore_patterns("__pycache__"))
        for rel, text in (replaced or {}).items():
            (work / rel).write_text(text, encoding="utf-8")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        started = time.perf_counter()
        try:
            proc = subprocess.run([python, "paper2code_test.py"], cwd=work, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode("utf-8", "replace")
            return {"passed": False, "category": "timeout", "returncode": None,
                    "seconds": time.perf_counter() - started, "output": out, "exceptions": []}
        seconds = time.perf_counter() - started
    output = proc.stdout.decode("utf-8", "replace")
    passed = proc.returncode == 0 and not any(m in output for m in FAILURE_MARKERS)
    exceptions = sorted(set(EXC_LINE_RE.findall(output)))
    if passed:
        category = "pass"
    elif proc.returncode < 0:
        category = "crash"
    else:
        cats = {CATEGORY_OF_EXCEPTION.get(e.split(".")[-1], "other") for e in exceptions}
        if not cats:
            category = "other"
        elif len(cats) == 1:
            category = cats.pop()
        else:
            category = "+".join(sorted(cats))
    return {"passed": passed, "category": category, "returncode": proc.returncode,
            "seconds": seconds, "output": output, "exceptions": exceptions}
