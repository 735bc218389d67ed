"""The engine's must-shows, on our demo problem set, through the CLI a user runs."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from benchmark_core.cli import main
from benchmark_core.errors import CATEGORIES

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demo"


def cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmark_core", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_validate_demo_is_clean():
    done = cli("validate", "demo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid" in done.stdout


def test_validate_lists_every_problem_of_a_broken_copy(tmp_path):
    copy = tmp_path / "demo"
    shutil.copytree(DEMO, copy)
    target = copy / "rope" / "rope.py"
    lines = target.read_text().splitlines()
    opens = [i for i, line in enumerate(lines) if re.match(r"\s*# <paper2code", line)]
    closes = [i for i, line in enumerate(lines) if re.match(r"\s*# </paper2code", line)]
    # 1) indentation mismatch on the first close, 2) a misspelt close, 3) an unclosed tag
    first_close = closes[0]
    lines[first_close] = "  " + lines[first_close]
    second = closes[1]
    lines[second] = lines[second].replace('">', '_typo">')
    lines.insert(len(lines), '# <paper2code name="never closed">')
    lines.append("x = 1")
    target.write_text("\n".join(lines) + "\n")
    done = cli("validate", str(copy))
    assert done.returncode == 1
    problems = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(problems) == 3, done.stdout
    assert all(re.match(rf"{re.escape(str(target))}:\d+: ", p) for p in problems), problems
    expected = {first_close + 1, second + 1, len(lines) - 1}
    assert {int(p.split(":")[1]) for p in problems} == expected
    assert opens  # the copy had tags to break


def test_tasks_have_prompts_and_masked_files(tmp_path):
    out = tmp_path / "tasks.jsonl"
    assert main(["tasks", str(DEMO), "-o", str(out)]) == 0
    tasks = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(tasks) >= 30
    for task in tasks:
        assert {"paper", "file", "snippet", "weight", "prompt", "masked_file"} <= task.keys()
        assert f'# TODO: Implement block "{task["snippet"]}"' in task["masked_file"]
        assert "paper2code" not in task["masked_file"]
    assert max(t["depth"] for t in tasks) >= 2
    without = tmp_path / "without.jsonl"
    assert main(["tasks", str(DEMO), "--without-paper", "-o", str(without)]) == 0
    first = json.loads(without.read_text().splitlines()[0])
    assert "## Paper" not in first["prompt"] and "## Paper" in tasks[0]["prompt"]


@pytest.mark.parametrize("mode,rate", [("--reference", 100.0), ("--blank", 0.0)])
def test_reference_scores_100_and_blank_scores_0(tmp_path, mode, rate):
    out = tmp_path / "r.json"
    done = cli("score", "demo", mode, "--backend", "local", "-o", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["scaled_pass_rate"] == rate and summary["pass_rate"] == rate
    assert "Scaled pass rate" in done.stdout


def test_demo_predictions_cover_every_error_category(tmp_path):
    seen = set()
    for preds in sorted((DEMO / "predictions").glob("*.jsonl")):
        out = tmp_path / f"{preds.stem}.json"
        done = cli("score", "demo", str(preds), "--backend", "local", "--timeout", "5", "-o", str(out))
        assert done.returncode == 0, done.stderr
        results = json.loads(out.read_text())
        seen |= {s["category"] for s in results["snippets"] if not s["passed"]}
        if preds.stem == "demo-perfect":
            assert results["summary"]["scaled_pass_rate"] == 100.0
        report = cli("report", str(out))
        assert report.returncode == 0 and "overall" in report.stdout
    # not a completion's doing: no prediction (missing), a broken environment (environment); tampering
    # needs a warm runner's audit trail (bwrap/docker: tests/probes), not the trusted local backend; a
    # completion the host cannot read (invalid) is no demo model's answer (test_cli_invalid_completion)
    not_from_predictions = {"missing", "environment", "tampering", "invalid"}
    assert set(CATEGORIES) - not_from_predictions <= seen, f"not produced: {set(CATEGORIES) - not_from_predictions - seen}"


def test_report_rejects_a_file_that_is_not_results(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    done = cli("report", str(bad))
    assert done.returncode == 1 and "not a results file" in done.stderr and "Traceback" not in done.stderr


def test_malformed_problem_set_gets_messages_not_a_traceback(tmp_path):
    (tmp_path / "papers.yaml").write_text("- id: ghost\n  title: [unclosed\n")
    for command in (["validate", str(tmp_path)], ["score", str(tmp_path), "--reference"], ["tasks", str(tmp_path)]):
        done = cli(*command)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"{tmp_path}/papers.yaml:" in done.stdout + done.stderr


def test_importing_the_engine_does_not_load_django():
    code = ("import sys, benchmark_core, benchmark_core.cli, benchmark_core.runner, benchmark_core.scoring, "
            "benchmark_core.sandbox.local; print('django' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
    for path in (ROOT / "benchmark_core").rglob("*.py"):
        assert not re.search(r"^\s*(from|import)\s+django", path.read_text(), re.M), path


def test_bad_pset_fixture_reports_exactly_its_three_broken_lines():
    done = cli("validate", "tests/data/bad_pset")
    assert done.returncode == 1
    lines = [int(line.split(":")[1]) for line in done.stdout.splitlines() if line.strip()]
    assert lines == [9, 17, 23]


def test_quirky_pset_loads_and_its_reference_passes(tmp_path):
    out = tmp_path / "q.json"
    assert cli("validate", "tests/data/quirky_pset").returncode == 0
    done = cli("score", "tests/data/quirky_pset", "--reference", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["summary"]["scaled_pass_rate"] == 100.0
    done = cli("score", "tests/data/quirky_pset", "--blank", "-o", str(out))
    assert json.loads(out.read_text())["summary"]["pass_rate"] == 0.0


def test_report_summary_is_one_line(tmp_path):
    out = tmp_path / "r.json"
    assert cli("score", "demo", "--reference", "--papers", "rope", "--backend", "local", "--quiet", "-o", str(out)).returncode == 0
    done = cli("report", str(out), "--summary")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Scaled pass rate 100.00 %"), done.stdout
    assert "snippet runs passed" in lines[0]
