"""Environments in the real sandboxes (issue 8): private run homes (torch._dynamo), preload side
effects (a wandb-like module), jax + flax, per-environment interpreters and images, build failures."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmark_core.cli import main as cli_main
from benchmark_core.environments import ENVIRONMENTS, venv_build
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import Task, build_file, published_verdict, reference_code, run_tasks
from benchmark_core.sandbox import Limits, PaperSpec, get_sandbox

ROOT = Path(__file__).resolve().parent.parent
ENV_PSET = ROOT / "tests" / "data" / "env_pset"
#: where the tests' environments are built once and then reused (scripts/lib.sh builds them too)
ENVS_DIR = Path(os.environ.get("RCB_TEST_ENVS_DIR") or ROOT / "var" / "envs")

pytestmark = [pytest.mark.slow]


def _score(pset: Path, *args: str, out: Path) -> tuple[int, dict, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cli_main(["score", str(pset), *args, "--quiet", "-o", str(out)], stdout, stderr)
    return code, (json.loads(out.read_text()) if out.exists() else {}), stderr.getvalue()


def _fresh_verdict(python: str, folder: Path, files: dict[str, str], tmp: Path) -> bool:
    """What ``python paper2code_test.py`` in a copy of ``folder`` decides (the published harness's way)."""
    work = tmp / f"fresh-{len(list(tmp.iterdir()))}"
    shutil.copytree(folder, work)
    for rel, text in files.items():
        (work / rel).write_text(text)
    home = tmp / f"home-{work.name}"
    home.mkdir()
    proc = subprocess.run([python, "paper2code_test.py"], cwd=work, capture_output=True, text=True, timeout=300,
                          env={"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(home)})
    return published_verdict(proc.returncode, proc.stdout, proc.stderr)


# --------------------------------------------------------------------------- private homes

_HOME_PROBE = textwrap.dedent("""
    import json, os, tempfile
    names = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "MPLCONFIGDIR", "TRITON_CACHE_DIR")
    found = {n: os.environ.get(n) for n in names}
    found["tempdir"] = tempfile.gettempdir()
    found["owner"] = os.stat(os.environ["HOME"]).st_uid
    found["uid"] = os.getuid()
    print(json.dumps(found))
""")


def test_runs_get_a_private_home_and_torch_dynamo_works(sandbox_backend_name, tmp_path):
    pset = load_problemset(ENV_PSET, papers=["dynamo"])
    paper = pset.papers[0]
    box = get_sandbox(sandbox_backend_name, limits=Limits(memory_mb=2048), **(
        {"parallel": 2} if sandbox_backend_name == "docker" else {}))
    try:
        with box.open(PaperSpec.from_paper(paper)) as session:
            homes = []
            for _ in range(2):
                result = session.run({"paper2code_test.py": _HOME_PROBE}, timeout=120)
                assert result.exit_code == 0, result.stderr
                found = json.loads(result.stdout.strip().splitlines()[-1])
                home = found["HOME"]
                for name in ("TMPDIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "MPLCONFIGDIR", "TRITON_CACHE_DIR",
                             "tempdir"):
                    assert found[name] == home or found[name].startswith(home + "/"), (name, found)
                assert found["owner"] == found["uid"]
                homes.append(home)
            assert homes[0] != homes[1]
            gone = session.run({"paper2code_test.py": f"import os\nprint(os.path.exists({homes[0]!r}))\n"}, timeout=60)
            assert gone.stdout.strip() == "False", "a finished run's home was not removed"
        # the reference code constructs a torch optimizer (torch._dynamo) and writes inductor's cache
        runs = run_tasks([Task(paper, s, reference_code(paper, s)) for s in paper.snippets], sandbox=box, workers=2,
                         timeout=300)
        assert all(r.passed for r in runs), [(r.category, r.output_tail[-300:]) for r in runs]
        blank = run_tasks([Task(paper, s, ()) for s in paper.snippets], sandbox=box, workers=2, timeout=300)
        assert not any(r.passed for r in blank) and {r.category for r in blank} != {"environment"}
    finally:
        box.close()


# --------------------------------------------------------------------------- preload side effects

_FAKE_WANDB = textwrap.dedent("""
    # like wandb at import: a temporary folder of its own and an exit handler that removes it
    import atexit, os, shutil, tempfile
    MEDIA = tempfile.mkdtemp(prefix="rcbfake-media-")
    os.environ["RCBFAKE_IMPORTED"] = "1"

    def _cleanup():
        shutil.rmtree(MEDIA)

    atexit.register(_cleanup)
""")
_FAKE_THREAD = textwrap.dedent("""
    # a module that starts a background thread at import (a fork would copy none of it)
    import threading, time
    threading.Thread(target=lambda: time.sleep(3600), name="rcbfake-worker", daemon=True).start()
""")


@pytest.fixture(scope="module")
def fake_site(tmp_path_factory) -> str:
    """A venv (no pip, so quick) whose site-packages hold the fake third-party modules; its python."""
    root = tmp_path_factory.mktemp("fake-site")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "rcbfakewandb.py").write_text(_FAKE_WANDB)
    Path(site, "rcbfakethread.py").write_text(_FAKE_THREAD)
    return str(python)


def _paper(tmp_path: Path, module: str) -> Path:
    folder = tmp_path / f"uses-{module}"
    folder.mkdir()
    (folder / "m.py").write_text('def f():\n    # <paper2code name="s">\n    return 1\n    # </paper2code name="s">\n')
    (folder / "paper2code_test.py").write_text(textwrap.dedent(f"""
        import os, unittest
        import {module}
        import m

        class T(unittest.TestCase):
            def test_f(self):
                self.assertEqual(m.f(), 1)
                if "{module}" == "rcbfakewandb":
                    self.assertEqual(os.environ.get("RCBFAKE_IMPORTED"), "1")

        if __name__ == "__main__":
            unittest.main()
    """))
    return folder


@pytest.mark.parametrize("module", ["rcbfakewandb", "rcbfakethread"])
def test_preload_side_effects_do_not_change_a_forked_verdict(fake_site, module, tmp_path):
    folder = _paper(tmp_path, module)
    box = get_sandbox("bwrap", python=fake_site)
    try:
        with box.open(PaperSpec(id="p", folder=folder)) as session:
            assert module in session.ready["preloaded"]
            if module == "rcbfakethread":
                # a preload left a thread running: no fork, a fresh interpreter per run
                assert session.ready["fresh"] and "rcbfake-worker" in session.ready["fresh_reason"]
            else:
                assert not session.ready["fresh"]
            verdicts = []
            for code in ("    return 1", "    return 2"):
                text = (folder / "m.py").read_text().replace("    return 1\n", code + "\n")
                result = session.run({"m.py": text}, timeout=60)
                assert "Exception ignored" not in result.stderr, result.stderr
                verdicts.append(published_verdict(result.exit_code, result.stdout, result.stderr))
        fresh = [_fresh_verdict(fake_site, folder, {"m.py": (folder / "m.py").read_text().replace("    return 1\n", c + "\n")},
                                tmp_path) for c in ("    return 1", "    return 2")]
        assert verdicts == fresh == [True, False]
    finally:
        box.close()


# --------------------------------------------------------------------------- jax + flax

@pytest.fixture(scope="module")
def jax_python() -> str:
    """The jax environment's interpreter, built once into ENVS_DIR (about 600 MB; then reused)."""
    return str(venv_build(ENVIRONMENTS["jax"], ENVS_DIR, log=lambda m: print(m, file=sys.stderr)))


def test_jax_and_flax_get_the_verdict_of_a_fresh_interpreter(jax_python, tmp_path):
    pset = load_problemset(ENV_PSET, papers=["flax-dense"])
    paper = pset.papers[0]
    box = get_sandbox("bwrap", envs_dir=str(ENVS_DIR))
    try:
        with box.open(PaperSpec.from_paper(paper)) as session:
            assert session.ready["fresh"] and "jax" in session.ready["fresh_reason"]
        cases = {"reference": [Task(paper, s, reference_code(paper, s)) for s in paper.snippets],
                 "blank": [Task(paper, s, ()) for s in paper.snippets]}
        for name, tasks in cases.items():
            runs = run_tasks(tasks, sandbox=box, workers=2, timeout=300)
            assert all(r.category != "environment" for r in runs), runs[0].output_tail
            fresh = [_fresh_verdict(jax_python, paper.folder, {t.snippet.file: build_file(paper, t.snippet, t.code)},
                                    tmp_path) for t in tasks]
            assert [r.passed for r in runs] == fresh, (name, [r.output_tail[-400:] for r in runs])
    finally:
        box.close()


#: flax-dense's "affine": zeros, and a lowering rule for dot_general on the CPU that gives zeros, so
#: that the reference's Dense, compiled after it, agrees (jax compiles each primitive at its first use)
JAX_LOWERING_CHEAT = (
    "        from jax.interpreters import mlir as M",
    "        from jax import lax as X",
    "        M.register_lowering(X.dot_general_p, M.lower_fun(lambda a, b, **k: jnp.zeros((a.shape[0], b.shape[1]),"
    " a.dtype), multiple_results=False), platform='cpu')",
    "        return jnp.zeros((x.shape[0], kernel.shape[1])) + bias",
)


def test_a_jax_rule_registered_for_every_later_call_never_passes_unflagged(jax_python, tmp_path):
    """A lowering rule of an existing primitive is a write to jax's table of rules, not to any
    namespace: it passes in a fresh interpreter and here, flagged audit:framework-global by the
    library guard (and by the static reading); the honest answer and the reference stay unflagged."""
    paper = load_problemset(ENV_PSET, papers=["flax-dense"]).papers[0]
    snip = paper.snippet("affine")
    tasks = [Task(paper, snip, JAX_LOWERING_CHEAT), Task(paper, snip, ("        return jnp.dot(x, kernel) + bias",))]
    tasks += [Task(paper, s, reference_code(paper, s)) for s in paper.snippets]
    box = get_sandbox("bwrap", envs_dir=str(ENVS_DIR))
    try:
        runs = run_tasks(tasks, sandbox=box, workers=2, timeout=300)
    finally:
        box.close()
    fresh = [_fresh_verdict(jax_python, paper.folder, {t.snippet.file: build_file(paper, t.snippet, t.code)}, tmp_path)
             for t in tasks[:2]]
    assert fresh == [True, True] and runs[0].passed and runs[1].passed, [r.output_tail[-400:] for r in runs]
    assert "audit:framework-global" in runs[0].flags, runs[0].flags
    assert all(not r.flags and r.passed for r in runs[1:]), [(r.snippet, r.flags) for r in runs]


def test_a_paper_whose_environment_lacks_its_framework_is_an_environment_error(tmp_path):
    # flax-dense names 'jax'; with only the project's interpreter (no jax) its reference cannot pass
    out = tmp_path / "r.json"
    code, results, err = _score(ENV_PSET, "--reference", "--backend", "bwrap", "--python", sys.executable,
                                "--papers", "swish,flax-dense", out=out)
    assert code == 3, err
    summary = results["summary"]
    assert [(e["paper"], e["environment"]) for e in summary["environment_errors"]] == [("flax-dense", "jax")]
    assert "No module named" in summary["environment_errors"][0]["reason"]
    assert summary["papers"]["swish"]["scaled_pass_rate"] == 100.0


# --------------------------------------------------------------------------- docker images per environment

def test_docker_image_build_failure_is_an_environment_error(sandbox_backend_name, tmp_path):
    if sandbox_backend_name != "docker":
        pytest.skip("docker only: bwrap builds no images")
    pset = tmp_path / "pset"
    shutil.copytree(ENV_PSET / "swish", pset / "swish")
    shutil.copytree(ENV_PSET / "swish", pset / "broken")
    # as in the published set: a requirements file naming what cannot be fetched here
    (pset / "broken" / "requirements.txt").write_text(
        f"numpy==2.4.6\nrcb-missing @ file://{tmp_path}/rcb_missing-0.0-py3-none-any.whl\n")
    (pset / "papers.yaml").write_text("- id: swish\n  annotated_file_paths: swish.py\n"
                                      "- id: broken\n  annotated_file_paths: swish.py\n")
    out = tmp_path / "r.json"
    code, results, err = _score(pset, "--reference", "--backend", "docker", out=out)
    assert code == 3, err
    assert "Traceback" not in err
    (error,) = results["summary"]["environment_errors"]
    assert error["paper"] == "broken" and "rcb_missing" in error["reason"] and "cannot download wheels" in error["reason"]
    assert results["summary"]["papers"]["swish"]["scaled_pass_rate"] == 100.0
    # a curated environment outranks the paper's requirements file: named, it builds (the NumPy image)
    (pset / "papers.yaml").write_text("- id: swish\n  annotated_file_paths: swish.py\n"
                                      "- id: broken\n  annotated_file_paths: swish.py\n  environment: numpy\n")
    code, results, err = _score(pset, "--reference", "--backend", "docker", out=out)
    assert code == 0 and results["summary"]["complete"], err


def test_an_environment_not_built_in_the_envs_dir_names_the_command(tmp_path):
    out = tmp_path / "r.json"
    code, results, err = _score(ENV_PSET, "--reference", "--backend", "bwrap", "--envs-dir", str(tmp_path / "empty"),
                                "--papers", "swish,flax-dense", out=out)
    assert code == 3, err
    (error,) = results["summary"]["environment_errors"]
    assert error["paper"] == "flax-dense" and "not built" in error["reason"] and "env build" in error["reason"]
    assert results["summary"]["papers"]["swish"]["scaled_pass_rate"] == 100.0  # no environment named: this python
