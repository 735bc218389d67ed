"""A paper whose reference code fails in its environment, on the site (issue 8).

The paper's test imports a module its interpreter lacks: its scoring job ends in "environment
error" with the reason, the submission waits (neither finished nor failed) and uses no quota, the
staff's environments page lists the paper and the staff get one e-mail. Once the module is
installed into the interpreter, ``environment_recheck`` queues the job again and the submission
finishes. Jobs run in this process (as test_submissions.py does); the sandbox is bwrap with a
virtual environment of our own as the paper's interpreter.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import call_command
from django.urls import reverse

from benchmark_core import runner
from catalog.models import ReleasePaper, Snippet
from leaderboard.importers.pset import pset_import
from submissions import jobs, upload
from scoring import health
from submissions.models import Status
from submissions.selectors import submission_quota

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
]

MODULE = "rcb_probe_dependency"

CALC = '''def double(x):
    # <paper2code name="double it">
    y = x * 2
    return y
    # </paper2code name="double it">
'''
TEST = f'''import unittest

import {MODULE}
from calc import double


class T(unittest.TestCase):
    def test_double(self):
        self.assertEqual(double(21), {MODULE}.ANSWER)


if __name__ == "__main__":
    unittest.main()
'''


@pytest.fixture
def interpreter(tmp_path) -> Path:
    """A bare venv (standard library only): the paper's environment, which an operator can repair."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path, interpreter):
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_PYTHON = str(interpreter)
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.RCB_HEARTBEAT_SECONDS = 3600


def _pset(root: Path) -> Path:
    (root / "probe-env").mkdir(parents=True)
    (root / "probe-env" / "calc.py").write_text(CALC, encoding="utf-8")
    (root / "probe-env" / "paper2code_test.py").write_text(TEST, encoding="utf-8")
    (root / "papers.yaml").write_text(yaml.safe_dump([{"id": "probe-env", "title": "Probe",
                                                       "annotated_file_paths": "calc.py", "timeout": 20}]))
    return root


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return Path(out)


def test_environment_error_waits_uses_no_quota_alerts_staff_and_recovers_after_repair(client, tmp_path, interpreter):
    release = pset_import(path=_pset(tmp_path / "pset"), release_name="Env probe", status="published").release
    staff = User.objects.create_user("ops", "ops@example.org", "pw-ops-123456!", is_staff=True)
    user = User.objects.create_user("rae", "rae@example.org", "pw-rae-123456!")
    code = Snippet.objects.get(release=release).code
    data = json.dumps({"paper": "probe-env", "snippet": "double it", "completion": f"```python\n{code}\n```"}).encode()
    sub, _ = upload.prediction_submission_create(user=user, release=release, data=data, model_name="Model E")
    job = sub.jobs.get()

    assert jobs.score_paper(job.pk, job.rq_job_id) == "environment"
    job.refresh_from_db()
    sub.refresh_from_db()
    assert job.status == Status.ENVIRONMENT and f"No module named '{MODULE}'" in job.error
    assert sub.status == Status.WAITING and sub.finished_at is None and MODULE in sub.failure_reason
    # no verdict is stored against the model, and its quota is not used
    assert not sub.evaluation.results.exists()
    assert submission_quota(user=user)["used"] == 0
    rp = ReleasePaper.objects.get(release=release)
    assert rp.environment_ok is False and rp.environment_checked_at is not None
    # the staff are told once (not the submitter: nothing ended for them)
    assert [m.to for m in mail.outbox] == [["ops@example.org"]]
    assert "probe-env" in mail.outbox[0].subject and "environment_recheck --paper probe-env" in mail.outbox[0].body
    # the environments page, for staff only
    client.force_login(user)
    assert client.get(reverse("submissions:environments")).status_code == 403
    client.force_login(staff)
    page = client.get(reverse("submissions:environments")).content.decode()
    assert "probe-env" in page and "fails" in page and MODULE in page
    # the submitter's page says it waits, and why
    client.force_login(user)
    detail = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert 'id="waiting-reason"' in detail and 'id="failure-reason"' not in detail
    # the release page lists the paper as not scorable, with the reason
    release_page = client.get(reverse("leaderboard:release_detail", args=[release.slug])).content.decode()
    assert "its reference code fails in environment" in release_page

    # a second submission of the same paper meets the same broken environment: no second e-mail
    sub2, _ = upload.prediction_submission_create(user=user, release=release, data=data + b"\n",
                                                    model_name="Model F")
    job2 = sub2.jobs.get()
    runner._REFERENCE.clear()  # an RQ work horse starts each job with an empty cache; in process we do it
    assert jobs.score_paper(job2.pk, job2.rq_job_id) == "environment"
    assert len(mail.outbox) == 1

    # repair: the module is installed into the environment; the command queues both jobs again
    (_site_packages(interpreter) / f"{MODULE}.py").write_text("ANSWER = 42\n", encoding="utf-8")
    runner._REFERENCE.clear()
    call_command("environment_recheck", "--paper", "probe-env")
    for s, j in ((sub, job), (sub2, job2)):
        j.refresh_from_db()
        s.refresh_from_db()
        assert j.status == Status.QUEUED and s.status == Status.QUEUED and s.failure_reason == ""
        assert jobs.score_paper(j.pk, j.rq_job_id) == "done"
        s.refresh_from_db()
        assert s.status == Status.FINISHED and s.evaluation.scaled_pass_rate == 100.0
    rp.refresh_from_db()
    assert rp.environment_ok is True and rp.reference_seconds is not None and rp.environment_error == ""
    client.force_login(staff)
    assert "passes" in client.get(reverse("submissions:environments")).content.decode()
    # now the quota counts the finished submissions
    assert submission_quota(user=user)["used"] == 2


def test_a_named_environment_waits_until_the_site_is_given_its_interpreter(tmp_path, settings):
    """RCB_ENV_PYTHONS (or RCB_ENVS_DIR): the interpreter of a paper's named environment. Without
    it the paper runs in RCB_PYTHON, here a bare venv without NumPy: an environment error."""
    root = _pset(tmp_path / "pset")
    (root / "probe-env" / "paper2code_test.py").write_text(
        TEST.replace(f"import {MODULE}", "import numpy").replace(f"{MODULE}.ANSWER", "int(numpy.int64(42))"),
        encoding="utf-8")
    entries = yaml.safe_load((root / "papers.yaml").read_text())
    entries[0]["environment"] = "numpy"
    (root / "papers.yaml").write_text(yaml.safe_dump(entries))
    release = pset_import(path=root, release_name="Env named", status="published").release
    assert ReleasePaper.objects.get(release=release).environment == "numpy"
    settings.RCB_ENVS_DIR = str(tmp_path / "envs")  # nothing built there
    settings.RCB_ENV_PYTHONS = ""
    user = User.objects.create_user("ned", "ned@example.org", "pw-ned-123456!")
    code = Snippet.objects.get(release=release).code
    data = json.dumps({"paper": "probe-env", "snippet": "double it", "completion": f"```python\n{code}\n```"}).encode()
    sub, _ = upload.prediction_submission_create(user=user, release=release, data=data, model_name="Model N")
    job = sub.jobs.get()
    assert jobs.score_paper(job.pk, job.rq_job_id) == "environment"
    job.refresh_from_db()
    assert job.status == Status.ENVIRONMENT and "environment numpy" in job.error and "numpy" in job.error
    # the operator names the environment's interpreter, then re-runs the waiting jobs
    settings.RCB_ENV_PYTHONS = f"numpy={sys.executable}"
    runner._REFERENCE.clear()
    assert health.environment_jobs_requeue(paper_id="probe-env") == [job.pk]
    job.refresh_from_db()
    assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED and sub.evaluation.scaled_pass_rate == 100.0
