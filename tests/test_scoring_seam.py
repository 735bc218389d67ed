"""One seam for scoring a paper (issue 22): submissions, release baselines and the demo are scored the same way.

``scoring.evaluate`` is the one operation (and the only caller of the engine's ``run_tasks``): the same
sandbox choice and the same interpreter per environment for every caller. Release baselines used to
open a sandbox without the environments' interpreters, so a baseline of a paper that names an
environment ran in RCB_PYTHON while submissions of the same paper ran in the environment's own
interpreter: the first test shows they now run in the same one. A baseline whose paper's environment
fails waits for a repair as a submission's job does; the demo's figures are the documented ones.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import call_command

from benchmark_core import runner
from catalog.models import Evaluation, LLMModel, Release, ReleasePaper, Snippet, SnippetResult
from contributions import jobs as contribution_jobs
from contributions.release_services import baseline_model_get_or_create, release_baselines_enqueue
from leaderboard.importers.pset import pset_import
from scoring.models import Job, JobKind, JobStatus
from submissions import jobs, upload

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
CALC = '''def double(x):
    # <paper2code name="double it">
    y = x * 2
    return y
    # </paper2code name="double it">
'''
TEST = '''import sys
import unittest

{extra}
from calc import double


class T(unittest.TestCase):
    def test_double(self):
        print("interpreter:", sys.executable)
        self.assertEqual(double(21), 42)


if __name__ == "__main__":
    unittest.main()
'''


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


@pytest.fixture
def interpreters(tmp_path) -> tuple[Path, Path]:
    """Two bare interpreters: the environment's own, and RCB_PYTHON (every other paper's)."""
    return _venv(tmp_path / "env-numpy"), _venv(tmp_path / "default")


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path, interpreters):
    env_python, default_python = interpreters
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    settings.RCB_SANDBOX_BACKEND = "local"
    settings.RCB_ALLOW_LOCAL_SANDBOX = True  # our own test paper: trusted code
    settings.RCB_PYTHON = str(default_python)
    settings.RCB_ENV_PYTHONS = f"numpy={env_python}"
    settings.RCB_ENVS_DIR = ""
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600
    runner._REFERENCE.clear()  # a worker's process starts without believed outcomes; in process we do it


def _release(root: Path, *, extra: str = "") -> Release:
    """A published release of one paper that names the environment ``numpy``."""
    (root / "probe").mkdir(parents=True)
    (root / "probe" / "calc.py").write_text(CALC, encoding="utf-8")
    (root / "probe" / "paper2code_test.py").write_text(TEST.format(extra=extra), encoding="utf-8")
    (root / "papers.yaml").write_text(yaml.safe_dump([{"id": "probe", "title": "Probe", "environment": "numpy",
                                                       "annotated_file_paths": "calc.py", "timeout": 20}]))
    return pset_import(path=root, release_name="Seam", status=Release.PUBLISHED).release


def _baseline_job(release: Release, kind: str = LLMModel.REFERENCE) -> Job:
    evaluation = Evaluation.objects.create(model=baseline_model_get_or_create(kind=kind), release=release,
                                           source=Evaluation.BASELINE, is_public=True)
    release_baselines_enqueue(evaluations=[evaluation], paper_ids=["probe"], note="test")
    return Job.objects.get(kind=JobKind.RELEASE_BASELINE, evaluation=evaluation)


def _submission_job(release: Release) -> Job:
    user = User.objects.create_user("sam", "sam@example.org", "pw-sam-123456!")
    code = Snippet.objects.get(release=release).code
    data = json.dumps({"paper": "probe", "snippet": "double it", "completion": f"```python\n{code}\n```"}).encode()
    submission, _ = upload.prediction_submission_create(user=user, release=release, data=data, model_name="Model S")
    return submission.jobs.get()


def test_a_baseline_and_a_submission_of_a_paper_run_in_its_environments_interpreter(tmp_path, interpreters):
    env_python, default_python = interpreters
    release = _release(tmp_path / "pset")
    baseline, submission = _baseline_job(release), _submission_job(release)

    assert contribution_jobs.score_baseline(baseline.pk, baseline.rq_job_id) == 100.0
    assert jobs.score_paper(submission.pk, submission.rq_job_id) == "done"

    outputs = {kind: SnippetResult.objects.get(evaluation_id=ev).output_tail
               for kind, ev in (("baseline", baseline.evaluation_id),
                                ("submission", submission.submission.evaluation_id))}
    for kind, output in outputs.items():
        assert f"interpreter: {env_python}" in output, (kind, output)
        assert str(default_python) not in output, (kind, output)
    # both scorings recorded the same environment on the paper: the one it names
    rp = ReleasePaper.objects.get(release=release)
    assert rp.environment == "numpy" and rp.environment_ok is True


def test_a_baseline_whose_environment_fails_waits_for_a_repair(tmp_path, interpreters):
    """As a submission's job: no verdict is stored against the baseline, the job ends 'environment',
    and ``environment_recheck`` runs it again once the environment is repaired."""
    env_python, _ = interpreters
    release = _release(tmp_path / "pset", extra="import rcb_seam_probe  # noqa: F401")
    job = _baseline_job(release)

    assert contribution_jobs.score_baseline(job.pk, job.rq_job_id) is None
    job.refresh_from_db()
    assert job.status == JobStatus.ENVIRONMENT and "rcb_seam_probe" in job.error
    assert not SnippetResult.objects.filter(evaluation_id=job.evaluation_id).exists()
    assert ReleasePaper.objects.get(release=release).environment_ok is False

    site = subprocess.run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "rcb_seam_probe.py").write_text("", encoding="utf-8")
    runner._REFERENCE.clear()
    call_command("environment_recheck", "--paper", "probe")
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert contribution_jobs.score_baseline(job.pk, job.rq_job_id) == 100.0
    assert Job.objects.get(pk=job.pk).status == JobStatus.FINISHED
    assert ReleasePaper.objects.get(release=release).environment_ok is True


@pytest.mark.slow
def test_the_demo_is_scored_through_the_seam_to_its_documented_figures(settings):
    """load_demo goes through scoring.evaluate: demo-imperfect is 83.72 % scaled (36 of 50 snippets), the
    reference baseline 100 %, the empty one 0 %, as the demo README documents."""
    settings.RCB_PYTHON = ""  # the demo's NumPy: this interpreter's
    call_command("load_demo", "--path", str(ROOT / "demo"), "--backend", "local")
    release = Release.objects.get(name="demo")
    figures = {(ev.model.key, ev.with_paper): ev for ev in Evaluation.objects.filter(release=release).select_related("model")}
    imperfect = figures[("demo-imperfect", True)]
    assert imperfect.scaled_pass_rate == pytest.approx(83.72, abs=0.01) and imperfect.pass_rate == pytest.approx(72.0)
    assert figures[("baseline-reference", True)].scaled_pass_rate == 100.0
    assert figures[("baseline-empty", True)].scaled_pass_rate == 0.0
    assert figures[("demo-perfect", True)].scaled_pass_rate == 100.0
    # every verdict of every evaluation is stored once, with its completion
    assert SnippetResult.objects.filter(evaluation=imperfect).count() == 50
