from benchmark_core.annotation import count_code_lines, parse_annotations

NESTED = '''\
import numpy as np


def f(x):
    # <paper2code name="whole">
    y = x + 1

    # <paper2code name="middle">
    if y > 0:
        # a comment only
        # <paper2code name="inner">
        y = y * 2
        # </paper2code name="inner">
    # </paper2code name="middle">
    return y
    # </paper2code name="whole">
'''


def test_nested_tree_lines_and_weights():
    parsed = parse_annotations(NESTED, "m.py")
    assert parsed.problems == []
    whole, middle, inner = (parsed.snippet(n) for n in ("whole", "middle", "inner"))
    assert (whole.start_line, whole.end_line, whole.parent, whole.depth) == (5, 16, None, 0)
    assert (middle.start_line, middle.end_line, middle.parent, middle.depth) == (8, 14, "whole", 1)
    assert (inner.parent, inner.depth) == ("middle", 2)
    assert whole.children == ["middle"] and middle.children == ["inner"]
    # weights count code lines only: blank, comment and tag lines do not count
    assert (whole.weight, middle.weight, inner.weight) == (4, 2, 1)
    assert inner.code.strip() == "y = y * 2"


def test_code_line_count_ignores_blank_and_comment_lines():
    assert count_code_lines(["", "   ", "# c", "   # c", "x = 1  # c", '"""doc"""']) == 2


def messages(text):
    return [(p.line, p.message) for p in parse_annotations(text, "f.py").problems]


def test_every_problem_is_reported_at_once_with_its_line():
    text = '''\
def f():
    # <paper2code name="a">
    x = 1
      # </paper2code name="a">
    # <paper2code name="b">
    y = 2
    # </paper2code name="bb">
    # <paper2code name="c">
    z = 3
'''
    found = messages(text)
    assert [line for line, _ in found] == [4, 7, 8]
    assert "indented differently" in found[0][1]
    assert "does not match the innermost open tag" in found[1][1]
    assert "never closed" in found[2][1]
    assert str(parse_annotations(text, "f.py").problems[0]).startswith("f.py:4: ")


def test_close_without_open_crossing_duplicate_and_empty():
    text = '''\
# </paper2code name="orphan">
# <paper2code name="a">
x = 1
# <paper2code name="b">
y = 2
# </paper2code name="a">
z = 3
# </paper2code name="b">
# <paper2code name="a">
w = 4
# </paper2code name="a">
# <paper2code name="empty">

# just a comment
# </paper2code name="empty">
'''
    found = messages(text)
    kinds = [m for _, m in found]
    assert any(line == 1 and "no matching opening tag" in m for line, m in found)
    assert any(line == 6 and "tags cross" in m for line, m in found)
    assert any(line == 9 and "duplicate snippet name" in m for line, m in found)
    assert any(line == 12 and "is empty" in m for line, m in found)
    assert len(kinds) == 4


def test_single_quotes_and_loose_spacing_are_accepted():
    text = "def f():\n    #<paper2code name='a'>\n    return 1\n    # </paper2code  name='a' >\n"
    parsed = parse_annotations(text, "f.py")
    assert parsed.problems == [] and parsed.snippet("a").weight == 1
