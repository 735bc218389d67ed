"""Environments and metadata (issue 8), engine side: copies keep their papers.yaml entry, papers name
environments, venvs are built and reused, and a paper whose reference fails is an environment error."""
from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from benchmark_core.cli import main as cli_main
from benchmark_core.environments import (
    ENVIRONMENTS,
    PUBLISHED_ENVIRONMENTS,
    Environment,
    EnvironmentBuildError,
    venv_build,
    venv_python,
)
from benchmark_core.problemset import (
    ProblemSetError,
    load_problemset,
    paper_entry,
    paper_entry_write,
    paper_folder_load,
    validate_problemset,
)
from benchmark_core.runner import Task, reference_code, run_tasks
from benchmark_core.sandbox import Limits, PaperSpec, SandboxUnavailable, get_sandbox
from benchmark_core.sandbox.local import LocalSandbox, LocalSession

ROOT = Path(__file__).resolve().parents[2]
ENV_PSET = ROOT / "tests" / "data" / "env_pset"
DEMO = ROOT / "demo"
UPSTREAM = ROOT.parent / "shared" / "upstream"


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- metadata travels

def test_a_tagged_reference_copy_holds_no_snippet():
    paper = load_problemset(ENV_PSET).paper("swish")
    assert (paper.folder / "swish_ref.py").read_text().count("paper2code name=") == 4  # the copy keeps its tags
    assert {s.file for s in paper.snippets} == {"swish.py"}
    assert [s.name for s in paper.snippets] == ["sigmoid", "swish"]
    assert paper.timeout == 5.0


def test_a_copied_paper_keeps_its_entry(tmp_path):
    pset = load_problemset(ENV_PSET)
    for paper in pset.papers:
        shutil.copytree(paper.folder, tmp_path / "copy" / paper.id)
        paper_entry_write(tmp_path / "copy", paper_entry(paper))
    for original in pset.papers:
        copy = paper_folder_load(tmp_path / "copy" / original.id)
        assert copy.folder == tmp_path / "copy" / original.id
        assert [(s.file, s.name) for s in copy.snippets] == [(s.file, s.name) for s in original.snippets]
        assert (copy.timeout, copy.fresh_process, copy.environment, copy.context_files, copy.title) == (
            original.timeout, original.fresh_process, original.environment, original.context_files, original.title)
    assert paper_folder_load(tmp_path / "copy" / "flax-dense").environment == "jax"
    # writing an entry again replaces it (one entry per id) and keeps the others
    entry = {**paper_entry(pset.paper("swish")), "timeout": 9}
    paper_entry_write(tmp_path / "copy", entry)
    reloaded = load_problemset(tmp_path / "copy")
    assert sorted(p.id for p in reloaded.papers) == ["dynamo", "flax-dense", "swish"]
    assert reloaded.paper("swish").timeout == 9.0


def test_a_copy_without_metadata_still_skips_the_reference_copy(tmp_path):
    # what the site's old copies looked like: no papers.yaml at all
    shutil.copytree(ENV_PSET / "swish", tmp_path / "swish")
    paper = load_problemset(tmp_path).paper("swish")
    assert paper.annotated_files == ["swish.py"]


def test_a_papers_own_timeout_is_honoured(tmp_path):
    paper = load_problemset(ENV_PSET).paper("swish")
    snippet = paper.snippet("sigmoid")
    hang = ("    import time", "    while True: time.sleep(0.05)")
    run = run_tasks([Task(paper, snippet, hang)], sandbox=get_sandbox("local"), workers=1, timeout=120)[0]
    assert run.timed_out and run.category == "timeout"
    assert run.seconds < 30, f"the paper's 5 s timeout was not used ({run.seconds:.0f}s)"


# --------------------------------------------------------------------------- naming environments

def _one_paper_pset(root: Path, paper_id: str, *, entry_extra: str = "", test: str = "print('ok')\n") -> Path:
    (root / paper_id).mkdir(parents=True)
    (root / "papers.yaml").write_text(f"- id: {paper_id}\n  annotated_file_paths: m.py\n{entry_extra}")
    (root / paper_id / "m.py").write_text('def f():\n    # <paper2code name="s">\n    return 1\n    # </paper2code name="s">\n')
    (root / paper_id / "paper2code_test.py").write_text(test)
    return root


def test_environment_key_mapping_file_and_published_mapping(tmp_path):
    assert load_problemset(_one_paper_pset(tmp_path / "a", "p", entry_extra="  environment: torch-cpu\n")
                           ).paper("p").environment == "torch-cpu"
    assert load_problemset(_one_paper_pset(tmp_path / "b", "p")).paper("p").environment is None
    # the published papers get the shipped mapping ...
    assert load_problemset(_one_paper_pset(tmp_path / "c", "hyla")).paper("hyla").environment == "jax"
    assert load_problemset(_one_paper_pset(tmp_path / "d", "GMFlow")).paper("GMFlow").environment == "mmgen"
    # ... unless the problem set maps its papers itself
    root = _one_paper_pset(tmp_path / "e", "hyla")
    (root / "environments.yaml").write_text("papers:\n  other: numpy\n")
    assert load_problemset(root).paper("hyla").environment is None
    (root / "environments.yaml").write_text("hyla: torch-vision\n")
    assert load_problemset(root).paper("hyla").environment == "torch-vision"
    # the papers.yaml key outranks the mapping file
    (root / "papers.yaml").write_text("- id: hyla\n  annotated_file_paths: m.py\n  environment: numpy\n")
    assert load_problemset(root).paper("hyla").environment == "numpy"


def test_an_unknown_environment_is_a_validation_problem(tmp_path):
    root = _one_paper_pset(tmp_path, "p", entry_extra="  environment: no-such-env\n")
    _, problems = validate_problemset(root)
    assert any("unknown environment 'no-such-env'" in p.message and "torch-cpu" in p.message for p in problems)
    (root / "environments.yaml").write_text("- not a mapping\n")
    (root / "papers.yaml").write_text("- id: p\n  annotated_file_paths: m.py\n")
    with pytest.raises(ProblemSetError, match="environments.yaml must map paper ids"):
        load_problemset(root)


def test_the_published_mapping_covers_the_published_papers():
    data = json.loads((UPSTREAM / "overall_stats.json").read_text())
    assert set(PUBLISHED_ENVIRONMENTS) == set(data["results"])
    scorable = [p for p, env in PUBLISHED_ENVIRONMENTS.items() if not ENVIRONMENTS[env].unavailable]
    assert len(scorable) == 17
    snippets = sum(len(data["results"][p]["results"][next(iter(data["results"][p]["results"]))]["results"])
                   for p in scorable)
    assert snippets == 186
    for env in ENVIRONMENTS.values():
        assert env.unavailable or all("==" in r for r in env.requirements), f"{env.name}: unpinned requirement"


def test_interpreters_per_environment(tmp_path):
    spec = lambda env: PaperSpec(id="p", folder=tmp_path, environment=env)  # noqa: E731
    box = LocalSandbox(python="/opt/default/python", pythons={"jax": "/opt/jax/bin/python"})
    assert box.interpreter_for(spec(None)) == "/opt/default/python"
    assert box.interpreter_for(spec("jax")) == "/opt/jax/bin/python"
    assert box.interpreter_for(spec("torch-cpu")) == "/opt/default/python"  # one interpreter for all: --python
    with pytest.raises(SandboxUnavailable, match="git"):
        box.interpreter_for(spec("mmgen"))
    built = tmp_path / "envs"
    env = ENVIRONMENTS["numpy"]
    folder = built / f"numpy-{env.key}"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(sys.executable)
    box = LocalSandbox(envs_dir=str(built))
    with pytest.raises(SandboxUnavailable, match="not built"):
        box.interpreter_for(spec("numpy"))  # no .complete: a half-built venv is never used
    (folder / ".complete").write_text(env.key)
    assert box.interpreter_for(spec("numpy")) == str(folder / "bin" / "python")
    with pytest.raises(SandboxUnavailable, match="env build"):
        box.interpreter_for(spec("torch-cpu"))


def test_venvs_are_built_once_and_a_failed_build_says_why(tmp_path):
    tiny = Environment("tiny", ())
    python = venv_build(tiny, tmp_path)
    assert python.exists() and venv_python(tiny, tmp_path) == python
    stamp = (python.parent.parent / ".complete").stat().st_mtime_ns
    assert venv_build(tiny, tmp_path) == python
    assert (python.parent.parent / ".complete").stat().st_mtime_ns == stamp  # reused, not rebuilt
    broken = Environment("broken", (f"rcb-missing @ file://{tmp_path}/no-such-dist-0.0-py3-none-any.whl",))
    with pytest.raises(EnvironmentBuildError) as info:
        venv_build(broken, tmp_path)
    assert "no-such-dist" in str(info.value) and "installing" in str(info.value)
    assert venv_python(broken, tmp_path) is None and not (tmp_path / f"broken-{broken.key}").exists()
    with pytest.raises(EnvironmentBuildError, match="unavailable"):
        venv_build(ENVIRONMENTS["meltingpot"], tmp_path)


def test_env_list_and_build_commands(tmp_path):
    code, out, _ = cli("env", "list", str(ENV_PSET), "--dir", str(tmp_path))
    assert code == 0
    assert "jax: jax==0.10.2" in out and "not built" in out and "flax-dense" in out
    assert "default:" in out and "swish, dynamo" in out
    root = _one_paper_pset(tmp_path / "pset", "GMFlow")
    code, out, _ = cli("env", "build", str(root), "--dir", str(tmp_path / "envs"))
    assert code == 0 and "mmgen: UNAVAILABLE" in out


# --------------------------------------------------------------------------- the health gate

def _demo_copy_with_missing_module(tmp_path: Path) -> Path:
    copy = tmp_path / "demo"
    shutil.copytree(DEMO, copy, ignore=shutil.ignore_patterns("predictions", "tools", "__pycache__"))
    test = copy / "focal-loss" / "paper2code_test.py"
    test.write_text("import rcb_module_no_environment_has  # noqa: F401\n" + test.read_text())
    return copy


def test_must_show_a_paper_whose_reference_fails_is_an_environment_error(tmp_path):
    """The issue's must-show: a demo copy whose focal-loss test imports a module no environment has."""
    copy = _demo_copy_with_missing_module(tmp_path)
    backend = "bwrap" if shutil.which("bwrap") else "local"
    out = tmp_path / "results.json"
    code, report, err = cli("score", str(copy), "--reference", "--backend", backend, "-o", str(out))
    assert code == 3, err
    results = json.loads(out.read_text())
    summary = results["summary"]
    assert summary["complete"] is False
    assert [(e["paper"], e["environment"]) for e in summary["environment_errors"]] == [("focal-loss", "default")]
    assert "rcb_module_no_environment_has" in summary["environment_errors"][0]["reason"]
    focal = [s for s in results["snippets"] if s["paper"] == "focal-loss"]
    assert focal and all(s["category"] == "environment" and not s["passed"] for s in focal)
    assert all(s["extra"]["environment"] == "default" and "rcb_module" in s["extra"]["environment_error"]
               for s in focal)
    # the other papers score as before: all their reference snippets pass, and the rates cover them only
    others = [s for s in results["snippets"] if s["paper"] != "focal-loss"]
    assert others and all(s["passed"] for s in others)
    assert summary["scaled_pass_rate"] == 100.0 and "focal-loss" not in summary["papers"]
    assert summary["snippets"] == len(others)
    first = report.splitlines()[0]
    assert first.startswith("INCOMPLETE") and "focal-loss" in first and "3 paper(s)" in first
    code, again, _ = cli("report", str(out))
    assert code == 0 and again.splitlines()[0] == first
    # the untouched demo is complete and exits 0
    code, _, err = cli("score", str(DEMO), "--reference", "--backend", backend, "--papers", "focal-loss",
                       "-o", str(tmp_path / "ok.json"), "--quiet")
    assert code == 0, err
    assert json.loads((tmp_path / "ok.json").read_text())["summary"]["complete"] is True


def test_blank_and_missing_runs_of_a_broken_paper_are_environment_errors_too(tmp_path):
    copy = _demo_copy_with_missing_module(tmp_path)
    pset = load_problemset(copy, papers=["focal-loss", "rope"])
    tasks = [Task(paper, snip, None if i == 0 else ()) for paper in pset.papers for i, snip in enumerate(paper.snippets)]
    runs = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=60)
    focal = [r for r in runs if r.paper == "focal-loss"]
    assert {r.category for r in focal} == {"environment"}
    rope = [r for r in runs if r.paper == "rope"]
    assert rope[0].category == "missing" and all(r.category != "environment" for r in rope)


def test_an_unavailable_environment_scores_nothing_of_its_papers(tmp_path):
    root = _one_paper_pset(tmp_path, "GMFlow", test="import unittest\nprint('OK')\n")
    paper = load_problemset(root).paper("GMFlow")
    runs = run_tasks([Task(paper, s, reference_code(paper, s)) for s in paper.snippets], sandbox=get_sandbox("local"),
                     workers=1, timeout=30)
    assert [r.category for r in runs] == ["environment"]
    assert runs[0].extra["environment"] == "mmgen" and "git" in runs[0].extra["environment_error"]


class _LosesFirstReference(LocalSandbox):
    """A local sandbox whose first session loses its first run, as when the runner dies mid-flight."""

    opened = 0
    environment_id = "local-loses-its-first-reference-run"  # its reference outcomes are its own

    def open(self, paper):
        type(self).opened += 1
        session = _LosingSession(self, paper)
        session.lose = type(self).opened == 1
        return session


class _LosingSession(LocalSession):
    def run(self, files, *, timeout, last=False):
        result = super().run(files, timeout=timeout, last=last)
        if self.lose and not files:
            self.lose = False
            result.exit_code, result.stdout = None, ""
            result.extra = {"sandbox_error": "the sandbox's warm runner stopped answering", "proof": False}
        return result


def test_a_reference_run_lost_by_the_sandbox_is_made_again_in_a_new_session():
    pset = load_problemset(DEMO, papers=["rope"])
    paper = pset.papers[0]
    _LosesFirstReference.opened = 0
    runs = run_tasks([Task(paper, s, reference_code(paper, s)) for s in paper.snippets],
                     sandbox=_LosesFirstReference(limits=Limits()), workers=1, timeout=60)
    assert all(r.passed for r in runs), [r.category for r in runs]
    assert _LosesFirstReference.opened == 2  # the retry had a session of its own


def test_a_failed_reference_is_made_again_once_its_environment_may_be_repaired(tmp_path, monkeypatch):
    """A worker lives for days: a paper's failed reference is believed for about one scoring, not forever."""
    import subprocess

    import benchmark_core.runner as runner

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    root = _one_paper_pset(tmp_path / "pset", "p", test="import rcb_repairable\nimport m\nassert m.f() == 1\n")
    paper = load_problemset(root).paper("p")
    tasks = [Task(paper, s, reference_code(paper, s)) for s in paper.snippets]
    box = get_sandbox("local", python=python)
    assert [r.category for r in run_tasks(tasks, sandbox=box, workers=1, timeout=60)] == ["environment"]
    # the operator repairs the environment: same interpreter, same paper, the module now installed
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "rcb_repairable.py").write_text("")
    assert [r.category for r in run_tasks(tasks, sandbox=box, workers=1, timeout=60)] == ["environment"]
    monkeypatch.setattr(runner, "FAILED_REFERENCE_SECONDS", 0.0)  # as when that scoring is long past
    runs = run_tasks(tasks, sandbox=box, workers=1, timeout=60)
    assert [r.passed for r in runs] == [True], runs[0].output_tail
