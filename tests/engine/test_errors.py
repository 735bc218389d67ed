import pytest

from benchmark_core.errors import classify, exception_names


def tb(exc_line: str) -> str:
    return ('Traceback (most recent call last):\n  File "paper2code_test.py", line 3, in <module>\n'
            f"    run()\n{exc_line}\n")


@pytest.mark.parametrize(
    "line,category",
    [
        ("SyntaxError: invalid syntax", "syntax"),
        ("IndentationError: expected an indented block", "syntax"),
        ("TabError: inconsistent use of tabs", "syntax"),
        ("NameError: name 'q' is not defined", "name"),
        ("UnboundLocalError: cannot access local variable 'x'", "name"),
        ("TypeError: unsupported operand", "type"),
        ("AttributeError: 'NoneType' object has no attribute 'shape'", "attribute"),
        ("IndexError: index 3 is out of bounds", "index"),
        ("KeyError: 'w'", "index"),
        ("ModuleNotFoundError: No module named 'jax'", "import"),
        ("ImportError: cannot import name 'x'", "import"),
        ("AssertionError: arrays differ", "logic"),
        ("numpy.exceptions.AxisError: axis 2 is out of bounds", "index"),
        ("ZeroDivisionError: division by zero", "other"),
        ("MemoryError", "crash"),
    ],
)
def test_category_from_the_traceback(line, category):
    assert classify(exit_code=1, stdout="", stderr=tb(line)) == category


def test_timeout_crash_and_test_reported_mismatch():
    assert classify(exit_code=None, stdout="", stderr="", timed_out=True) == "timeout"
    assert classify(exit_code=-11, stdout="", stderr="", signal=11) == "crash"
    assert classify(exit_code=137, stdout="", stderr="") == "crash"
    assert classify(exit_code=1, stdout="max abs diff 0.3: outputs mismatch\n", stderr="") == "logic"
    assert classify(exit_code=3, stdout="", stderr="") == "other"


def test_most_specific_of_several_failures_wins_deterministically():
    out = "FAIL: test_a\n" + tb("AssertionError: no") + "ERROR: test_b\n" + tb("NameError: name 'z'")
    assert exception_names(out) == ["AssertionError", "NameError"]
    assert classify(exit_code=1, stdout="", stderr=out) == "name"
    assert classify(exit_code=1, stdout="", stderr=out) == classify(exit_code=1, stdout="", stderr=out)


def test_syntax_error_traceback_with_caret():
    err = ('Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n    import m\n'
           '  File "/w/m.py", line 5\n    y = (\n        ^\nSyntaxError: \'(\' was never closed\n')
    assert classify(exit_code=1, stdout="", stderr=err) == "syntax"
