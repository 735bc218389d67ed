"""The runner's proof rule: a run passes only when it completed and ran the reference's test cases."""
from __future__ import annotations

from benchmark_core.runner import apply_proof
from benchmark_core.sandbox.base import RunResult

OK = "..\n----------------------------------------------------------------------\nRan 2 tests in 0.001s\n\nOK\n"


def _result(completed: bool, tests_run: int, exit_code: int = 0, stderr: str = OK) -> RunResult:
    return RunResult(exit_code=exit_code, signal=None, timed_out=False, stdout="", stderr=stderr, seconds=0.1,
                     extra={"completed": completed, "tests_run": tests_run})


REFERENCE = {"completed": True, "tests_run": 2}


def test_a_complete_run_with_all_cases_has_proof():
    result = _result(True, 2)
    apply_proof(result, REFERENCE)
    assert result.extra["proof"] is True and result.stderr == OK


def test_an_early_exit_is_a_crash_with_a_reason():
    result = _result(False, 0)
    apply_proof(result, REFERENCE)
    assert result.extra["proof"] is False and result.extra["proof_category"] == "crash"
    assert result.stderr.rstrip().endswith("[harness] not passed: the test script did not run to completion "
                                           "(it exited early or was cut short)")


def test_fewer_cases_than_the_reference_fail():
    result = _result(True, 1)
    apply_proof(result, REFERENCE)
    assert result.extra["proof"] is False and result.extra["proof_category"] == "other"
    assert "ran 1 test case(s), the reference code runs 2" in result.stderr


def test_no_comparison_when_the_reference_itself_never_completes():
    result = _result(False, 0)
    apply_proof(result, {"completed": False, "tests_run": 0})
    assert "proof" not in result.extra


def test_backends_without_proof_are_left_alone():
    result = RunResult(exit_code=0, signal=None, timed_out=False, stdout="", stderr=OK, seconds=0.1)
    apply_proof(result, REFERENCE)
    assert result.extra == {}
