"""The problem sets bench/make_pset.py writes for bench/score_speed.py: valid, and shaped as promised."""
import sys
from pathlib import Path

import pytest

from benchmark_core.problemset import validate_problemset
from benchmark_core.runner import Task, reference_code, run_tasks
from benchmark_core.sandbox import get_sandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import make_pset  # noqa: E402


def _kinds(pset) -> dict[str, list[int]]:
    """kind -> the snippet count of each of its papers"""
    out: dict[str, list[int]] = {}
    for paper in pset.papers:
        out.setdefault(make_pset.paper_kind(paper.id), []).append(len(paper.snippets))
    return out


def test_the_published_like_set_has_the_published_torch_papers_shape(tmp_path):
    # (an interpreter that cannot run sizes the compute work by the fallback: no torch needed here)
    make_pset.pset_write(tmp_path / "set", kind="published-like", work_ms=1500, python=str(tmp_path / "no-python"))
    pset, problems = validate_problemset(tmp_path / "set")
    assert not problems, problems
    kinds = _kinds(pset)
    # the published release's torch papers: 7 import-bound ones (54 snippets), 5 compute-bound (61)
    assert kinds == {"import-bound": [8] * 7, "compute-bound": [12] * 5}
    compute = next(p for p in pset.papers if make_pset.paper_kind(p.id) == "compute-bound")
    assert "def heavy(" in (compute.folder / f"{compute.id}.py").read_text()
    light = next(p for p in pset.papers if make_pset.paper_kind(p.id) == "import-bound")
    assert "heavy" not in (light.folder / "paper2code_test.py").read_text()


def test_a_fixed_shape_takes_no_sizes_and_one_kind_sets_do(tmp_path):
    with pytest.raises(ValueError, match="fixed shape"):
        make_pset.pset_write(tmp_path / "a", kind="published-like", papers=3)
    make_pset.pset_write(tmp_path / "b", kind="import-bound", papers=2, snippets=3)
    pset, problems = validate_problemset(tmp_path / "b")
    assert not problems, problems
    assert _kinds(pset) == {"import-bound": [3, 3]}
    with pytest.raises(SystemExit):
        make_pset.main(["published-like", str(tmp_path / "c"), "--snippets", "4"])


def test_a_generated_paper_passes_with_its_reference_and_fails_blanked(tmp_path):
    pytest.importorskip("torch")
    make_pset.pset_write(tmp_path / "set", kind="import-bound", papers=1, snippets=2)
    pset, _ = validate_problemset(tmp_path / "set")
    paper = pset.papers[0]
    tasks = [Task(paper, snip, reference_code(paper, snip)) for snip in paper.snippets]
    tasks += [Task(paper, paper.snippets[0], ("    pass",), sample=1)]
    runs = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=120)
    assert [r.passed for r in runs] == [True, True, False]


def test_the_realistic_set_is_shaped_like_the_published_papers(tmp_path):
    make_pset.pset_write(tmp_path / "set", kind="realistic", work_ms=300, python=str(tmp_path / "no-python"))
    pset, problems = validate_problemset(tmp_path / "set")
    assert not problems, problems
    kinds = _kinds(pset)
    assert kinds == {"scientific": [16] * 7, "threaded": [6], "compute-bound": [12] * 4}
    paper = next(p for p in pset.papers if make_pset.paper_kind(p.id) == "scientific")
    test = (paper.folder / "paper2code_test.py").read_text()
    for module in ("scipy", "pandas", "matplotlib", "ml_collections"):
        assert f"import {module}" in test or f"from {module}" in test, module
    assert (paper.folder / "data" / "inputs.csv").is_file() and (paper.folder / "data" / "weights.npz").is_file()
    assert (paper.folder / "common.py").is_file()  # a sibling module of the paper's own
    assert test.count("    def test_") >= 10  # many cases a run, as the published tests have
    assert any(s.parent for s in paper.snippets)  # nested snippets
    # annotated files of a real paper's size: classes and helpers around the few tagged lines,
    # which a run compiles (and our checks read) whole
    for kind in ("scientific", "threaded", "compute-bound"):
        one = next(p for p in pset.papers if make_pset.paper_kind(p.id) == kind)
        source = (one.folder / f"{one.id}.py").read_text()
        assert source.count("\n") >= 300 and "\nclass " in source, kind
        tagged = sum(s.end_line - s.start_line + 1 for s in one.snippets if s.parent is None)
        assert tagged * 5 < source.count("\n"), kind
    assert set(make_pset.IMPORT_BOUND) >= {"scientific", "import-bound"}


@pytest.mark.slow
def test_a_realistic_paper_scores_its_reference_and_fails_blanks(tmp_path):
    make_pset.pset_write(tmp_path / "set", kind="realistic", work_ms=300, python=str(tmp_path / "no-python"))
    from benchmark_core.problemset import load_problemset

    pset = load_problemset(tmp_path / "set", papers=["scientific_00"])
    tasks = [Task(p, s, reference_code(p, s)) for p, s in pset.snippets]
    tasks += [Task(p, s, ()) for p, s in pset.snippets[:3]]
    runs = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=120)
    assert all(r.passed for r in runs[:-3]), [(r.snippet, r.output_tail[-300:]) for r in runs if not r.passed]
    assert not any(r.passed for r in runs[-3:])


def test_the_floors_runs_two_at_a_time_are_the_floors_own_runs(tmp_path, capsys):
    # bench/score_speed.py prints what two runs at once cost the machine beyond one alone: the same
    # plain warm parents, two lanes at once, each the whole set's runs
    pytest.importorskip("torch")
    import types

    import score_speed

    make_pset.pset_write(tmp_path / "set", kind="import-bound", papers=2, snippets=2)
    pset, _ = validate_problemset(tmp_path / "set")
    tasks = [Task(paper, snip, reference_code(paper, snip)) for paper in pset.papers for snip in paper.snippets]
    args = types.SimpleNamespace(python=sys.executable, timeout=120)
    alone = score_speed.floor_measure(args, tasks)
    lanes = score_speed.floor_two_at_once(args, tasks)
    assert len(lanes) == 2 and all(set(lane) == set(alone) for lane in lanes)
    assert all(f["runs"] > 0 and f["cpu"] > 0 for lane in lanes for f in lane.values())
    score_speed.two_at_once_report([alone, score_speed.floor_measure(args, tasks)], lanes, 2, "a test set")
    out = capsys.readouterr().out
    assert "two at a time (a test set" in out and " x the seconds" in out
    # a lane whose parent cannot import its paper's runs fails loudly, never a figure of nothing
    with pytest.raises(RuntimeError, match="floor of"):
        score_speed.floor_two_at_once(types.SimpleNamespace(python="/bin/false", timeout=5), tasks)
