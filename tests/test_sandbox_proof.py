"""The runner's proof rule: a run passes only when it completed and ran the reference's test cases."""
from __future__ import annotations

from pathlib import Path

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


def test_a_reference_that_never_completes_fails_closed():
    for reference in ({"completed": False, "tests_run": 0}, None):
        result = _result(True, 2)
        apply_proof(result, reference)
        assert result.extra["proof"] is False and result.extra["proof_category"] == "environment"
        assert "[harness] not passed" in result.stderr


AUDIT = {"authentic": True, "forged": 0, "skipped": 0, "snapshots": {"__main__": "aa"}, "events": [
    {"event": "object.__getattr__", "detail": "tb_frame", "caller": "runner", "paper": False, "count": 7}]}


def _audited(**changes) -> RunResult:
    result = _result(True, 2)
    result.extra["audit"] = {**AUDIT, **changes}
    return result


def test_an_audit_trail_like_the_reference_passes_unflagged():
    result = _audited()
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert result.extra["proof"] is True and result.extra["flags"] == []


def test_a_forged_line_is_tampering():
    result = _audited(forged=1)
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert result.extra["proof"] is False and result.extra["proof_category"] == "tampering"
    assert "tampering:forged-proof" in result.extra["flags"]


def test_an_unauthenticated_pass_is_tampering():
    result = _audited(authentic=False)
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert "tampering:no-proof" in result.extra["flags"]


def test_new_events_fail_or_flag_by_kind():
    gc_event = {"event": "gc.get_objects", "detail": "", "caller": "paper", "paper": True, "count": 1}
    thread = {"event": "_thread.start_new_thread", "detail": "", "caller": "paper", "paper": True, "count": 1}
    result = _audited(events=AUDIT["events"] + [thread])
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert result.extra["proof"] is True and result.extra["flags"] == ["audit:thread"]
    result = _audited(events=AUDIT["events"] + [gc_event])
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert result.extra["proof"] is False and result.extra["flags"] == ["tampering:gc"]
    # what the reference run did itself is allowed
    result = _audited(events=AUDIT["events"] + [gc_event])
    apply_proof(result, {**REFERENCE, "audit": {**AUDIT, "events": AUDIT["events"] + [gc_event]}})
    assert result.extra["proof"] is True and result.extra["flags"] == []


def test_a_ref_module_unlike_the_reference_is_tampering():
    result = _audited(snapshots={"__main__": "bb"})
    apply_proof(result, {**REFERENCE, "audit": AUDIT})
    assert result.extra["flags"] == ["tampering:snapshot"]


def test_backends_without_proof_are_left_alone():
    result = RunResult(exit_code=0, signal=None, timed_out=False, stdout="", stderr=OK, seconds=0.1)
    apply_proof(result, REFERENCE)
    assert result.extra == {}


def test_ast_flags_see_through_built_names():
    from benchmark_core.problemset import load_problemset
    from benchmark_core.runner import Task, build_file, static_reading_of

    paper = load_problemset(Path(__file__).resolve().parent.parent / "demo").paper("focal-loss")
    snippet = paper.snippet("stable sigmoid")

    def flags(code: str) -> list[str]:
        task = Task(paper, snippet, tuple("    " + line for line in code.split("\n")))
        return static_reading_of(task, build_file(paper, snippet, task.code)).flags

    found = flags('m = __import__("unit" + "test")\nsetattr(m.TestCase, "run" + "", None)\n'
                  'getattr(obj, name)\nf.__globals__["x"] = 1\nimport os\nos.dup2(1, 200)\nreturn 1')
    assert {"ast:dynamic-import", "ast:dynamic-getattr", "ast:dynamic-setattr", "ast:dunder:__globals__",
            "ast:import:os", "ast:os-call:dup2"} <= set(found)
    assert flags("out = np.exp(x)\nreturn out / out.sum()") == []