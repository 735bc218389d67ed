"""Answers as agents give them: the whole edited masked file, or a unified diff against it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_core.masking import masked_file
from benchmark_core.patches import PatchError, apply_unified_diff
from benchmark_core.predictions import MAX_FILE_CHARS, parse_predictions
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import reference_code
from tests.agent_answers import agent_lines, outside_edit, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmark_core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("kind", ["file_content", "patch"])
def test_whole_files_and_diffs_with_the_reference_score_100_on_the_demo(tmp_path, kind):
    pset = load_problemset(DEMO)
    preds = write_jsonl(tmp_path / f"{kind}.jsonl", agent_lines(pset, kind))
    out = tmp_path / "results.json"
    # the default backend: docker where an engine answers, else bwrap (local only where neither works)
    done = cli("score", "demo", str(preds), "--quiet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert len(results["snippets"]) == 50
    assert results["summary"]["scaled_pass_rate"] == 100.0
    assert all(s["category"] != "missing" for s in results["snippets"])


def test_the_extracted_lines_are_the_snippet_exactly():
    pset = load_problemset(DEMO)
    for kind in ("file_content", "patch"):
        data = "".join(json.dumps(r) + "\n" for r in agent_lines(pset, kind)).encode()
        preds, problems = parse_predictions(data, pset)
        assert problems == []
        for pred in preds:
            paper = pset.paper(pred.paper)
            snip = paper.snippet(pred.snippet, pred.file)
            assert pred.completion.split("\n") == [*reference_code(paper, snip)]


def test_a_file_changed_outside_its_snippet_is_refused_with_the_line_and_nothing_is_scored(tmp_path):
    pset = load_problemset(DEMO)
    rows, line, text = outside_edit(pset)
    preds = write_jsonl(tmp_path / "agent.jsonl", rows)
    out = tmp_path / "results.json"
    done = cli("score", "demo", str(preds), "--backend", "local", "--quiet", "-o", str(out))
    assert done.returncode == 1
    assert f"{preds}:8: file_content: the file differs from the masked file outside the snippet: line {line} is " \
           f"{text!r}" in done.stderr
    assert "nothing was scored" in done.stderr
    assert not out.exists()


def test_crlf_line_endings_and_a_missing_final_newline_are_not_changes():
    pset = load_problemset(DEMO)
    rows = agent_lines(pset, "file_content")[:3]
    for row in rows:
        row["file_content"] = row["file_content"].rstrip("\n").replace("\n", "\r\n")
    preds, problems = parse_predictions("".join(json.dumps(r) + "\n" for r in rows).encode(), pset)
    assert problems == [] and len(preds) == 3


def test_bad_answers_get_clear_messages():
    pset = load_problemset(DEMO)
    paper, snip = pset.snippets[0]
    masked = masked_file(paper.files[snip.file].lines, snip)
    base = {"paper": paper.id, "file": snip.file, "snippet": snip.name}
    escape = "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n"
    other = f"--- a/{paper.paper_text_file}\n+++ b/{paper.paper_text_file}\n@@ -1 +1 @@\n-x\n+y\n"
    stale = f"--- a/{snip.file}\n+++ b/{snip.file}\n@@ -1 +1 @@\n-not the first line\n+y\n"
    lines = [
        {**base, "patch": escape},
        {**base, "patch": other},
        {**base, "patch": stale},
        {**base, "file_content": "x" * (MAX_FILE_CHARS + 1)},
        {**base, "file_content": masked, "completion": "x"},
        {**base, "file_content": masked.split("\n", 1)[1]},
        {**base, "file_content": 3},
    ]
    data = "".join(json.dumps(r) + "\n" for r in lines).encode()
    preds, problems = parse_predictions(data, pset)
    assert preds == []
    messages = [str(p) for p in problems]
    assert "outside the paper" in messages[0]
    assert f"it may only change {snip.file}" in messages[1]
    assert "hunk 1 does not apply: line 1 of" in messages[2]
    assert f"at most {MAX_FILE_CHARS}" in messages[3]
    assert "give one of completion, file_content, patch" in messages[4]
    assert messages[5].startswith("line 6: file_content: the file differs from the masked file outside the snippet: line 1 is")
    assert "must be strings: file_content" in messages[6]


def test_a_patch_touching_two_files_or_deleting_one_is_refused():
    original = "a\nb\nc\n"
    two = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+A\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+A\n"
    with pytest.raises(PatchError, match="second file section"):
        apply_unified_diff(original, two, file="x.py")
    with pytest.raises(PatchError, match="creates or deletes"):
        apply_unified_diff(original, "--- a/x.py\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-a\n-b\n-c\n", file="x.py")
    assert apply_unified_diff(original, "@@ -2,0 +3 @@\n+B\n", file="x.py") == "a\nb\nB\nc\n"
