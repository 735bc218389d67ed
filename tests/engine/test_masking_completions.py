from pathlib import Path

from benchmark_core.annotation import parse_annotations
from benchmark_core.completions import completion_lines, extract_code, insert_completion
from benchmark_core.masking import build_prompt, masked_file
from benchmark_core.problemset import load_problemset

from .test_annotation import NESTED


def test_masked_file_replaces_body_with_two_todo_lines_and_drops_other_tags():
    parsed = parse_annotations(NESTED, "m.py")
    masked = masked_file(parsed.lines, parsed.snippet("middle"))
    assert '    # TODO: Implement block "middle"\n    # Approximately 2 lines of code.\n' in masked
    assert "paper2code" not in masked
    assert "y = y * 2" not in masked
    assert "y = x + 1" in masked and "return y" in masked
    single = masked_file(parsed.lines, parsed.snippet("inner"))
    assert '        # TODO: Implement block "inner"\n        # Approximately 1 line of code.' in single


def test_extract_last_fenced_python_block_or_bare_code():
    answer = "Here:\n```python\na = 1\n```\nBetter:\n```python\n    b = 2\n    c = 3\n```\nDone."
    assert extract_code(answer) == "    b = 2\n    c = 3\n"
    assert completion_lines("    x = 1\n") == ["    x = 1"]
    assert completion_lines("") == []
    # the published rule inserts lines as given; re-indenting is opt-in
    assert completion_lines("```py\nx = 1\nif x:\n    y = 2\n```", reindent="        ") == [
        "        x = 1", "        if x:", "            y = 2"]
    assert completion_lines("```py\nx = 1\n```") == ["x = 1"]


def test_insert_completion_keeps_tags_and_replaces_only_the_body():
    parsed = parse_annotations(NESTED, "m.py")
    snip = parsed.snippet("inner")
    text = insert_completion(parsed.lines, snip.start_line, snip.end_line, ["        y = y * 3"])
    assert "y = y * 3" in text and "y = y * 2" not in text
    assert text.count("paper2code") == 6


def write_pset(root: Path) -> Path:
    (root / "p1" / "pkg").mkdir(parents=True)
    (root / "papers.yaml").write_text(
        "- id: p1\n  title: T\n  first_commit_date: 2025-02-01\n"
        "  annotated_file_paths: [pkg/a.py, b.py]\n  context_file_paths: 'null'\n"
        "- id: p2\n  title: U\n  annotated_file_paths: c.py\n  context_file_paths: ctx.py\n"
    )
    (root / "p1" / "pkg" / "a.py").write_text('def f():\n    # <paper2code name="s">\n    return 1\n    # </paper2code name="s">\n')
    (root / "p1" / "b.py").write_text('def g():\n    # <paper2code name="s">\n    return 2\n    # </paper2code name="s">\n')
    (root / "p1" / "paper2code_test.py").write_text("print('ok')\n")
    (root / "p1" / "paper2code_paper.tex").write_text("\\section{Method} We add one.\n")
    (root / "p2").mkdir()
    (root / "p2" / "c.py").write_text('def h():\n    # <paper2code name="t">\n    return 3\n    # </paper2code name="t">\n')
    (root / "p2" / "ctx.py").write_text("HELPER = 1\n")
    (root / "p2" / "paper2code_test.py").write_text("print('ok')\n")
    (root / "p2" / "paper2code_paper.md").write_text("# Paper U\n")
    return root


def test_problemset_format_variations(tmp_path):
    pset = load_problemset(write_pset(tmp_path))
    p1, p2 = pset.papers
    assert p1.annotated_files == ["pkg/a.py", "b.py"] and p1.context_files == []
    assert p2.annotated_files == ["c.py"] and p2.context_files == ["ctx.py"]
    assert p1.paper_text_file == "paper2code_paper.tex" and p2.paper_text_file == "paper2code_paper.md"
    assert str(p1.first_commit_date) == "2025-02-01"
    assert [(s.file, s.name) for s in p1.snippets] == [("pkg/a.py", "s"), ("b.py", "s")]
    with_paper = build_prompt(p1, p1.snippet("s", "b.py"))
    without = build_prompt(p1, p1.snippet("s", "b.py"), with_paper=False)
    assert "We add one." in with_paper and "We add one." not in without
    assert '# TODO: Implement block "s"' in without
    assert "HELPER = 1" in build_prompt(p2, p2.snippet("t"), with_paper=False)
