"""Paper contributions end to end: upload, checks by a real RQ worker, review, publishing, baselines."""
from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from contributions.models import PaperContribution, Review
from catalog.models import Evaluation, LLMModel, Release, Snippet, SnippetResult

from contributions_support import DEMO, WEAK_MODULE, contribution_env, run_worker, weak_paper_zip, zip_files, zip_folder

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FORM = {
    "paper_id": "focal-loss-contrib",
    "title": "Focal Loss for Dense Object Detection <script>alert(1)</script>",
    "venue": "ICCV2017",
    "arxiv_url": "https://arxiv.org/abs/1708.02002",
    "code_url": "https://github.com/facebookresearch/Detectron",
    "first_commit_date": "2018-01-22",
    "annotated_files": "focal_loss.py",
    "context_files": "",
    "requirements": "",
}


@pytest.fixture
def env(tmp_path):
    with contribution_env(tmp_path) as conn:
        yield tmp_path


@pytest.fixture
def people(db):
    contributor = User.objects.create_user("carla", password="pw-carla-123", email="carla@example.org")
    reviewer = User.objects.create_user("rita", password="pw-rita-123")
    reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    admin = User.objects.create_user("adam", password="pw-adam-123", is_staff=True)
    return contributor, reviewer, admin


def upload(client, data: bytes, name: str = "paper.zip", **fields):
    return client.post(reverse("contributions:new"), {**FORM, **fields, "archive": SimpleUploadedFile(name, data)})


def checks_of(contribution: PaperContribution) -> dict[str, dict]:
    return {c["key"]: c for c in contribution.report["checks"]}


def test_demo_paper_upload_checks_review_publish_and_baselines(env, client, people):
    contributor, reviewer, admin = people
    client.force_login(contributor)
    response = upload(client, zip_folder(DEMO / "focal-loss"))
    assert response.status_code == 302, response.content.decode()[:2000]
    contribution = PaperContribution.objects.get()
    assert contribution.status == PaperContribution.SUBMITTED

    assert run_worker() == 0
    contribution.refresh_from_db()
    checks = checks_of(contribution)
    assert list(checks) == ["archive", "tags", "reference", "blanked", "repeatable", "runtime", "requirements"]
    assert all(c["status"] == "ok" for c in checks.values()), checks
    assert "13 snippets" in checks["tags"]["summary"]
    assert contribution.status == PaperContribution.AWAITING_REVIEW
    assert all(row["blanked_passed"] is False for row in contribution.report["snippets"])
    assert mail.outbox[-1].to == ["carla@example.org"] and "checks passed" in mail.outbox[-1].subject

    page = client.get(reverse("contributions:detail", args=[contribution.pk])).content.decode()
    for title in ("Snippet tags are valid", "Every snippet, blanked, fails the test", "Three reference runs agree"):
        assert title in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # the contributor cannot reach the review pages
    assert client.get(reverse("contributions:review", args=[contribution.pk])).status_code == 403

    client.force_login(reviewer)
    queue = client.get(reverse("contributions:queue")).content.decode()
    assert "focal-loss-contrib" in queue
    review_page = client.get(reverse("contributions:review", args=[contribution.pk])).content.decode()
    assert 'data-snippet="focal loss"' in review_page or "snippet-tree" in review_page
    assert 'class="highlight"' in review_page  # Pygments code view
    response = client.post(reverse("contributions:review", args=[contribution.pk]), {"decision": "approve", "comment": "Nice."})
    assert response.status_code == 302
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.APPROVED
    draft = contribution.release_paper.release
    assert draft.status == Release.DRAFT
    folder = Path(contribution.release_paper.folder)
    assert (folder / "paper2code_test.py").is_file() and folder.parent == env / "psets" / draft.slug
    assert Snippet.objects.filter(release=draft, paper__paper_id="focal-loss-contrib").count() == 13

    # a reviewer is not an admin: publishing is staff-only
    assert client.post(reverse("contributions:release", args=[draft.slug]), {"confirm": "on"}).status_code == 302
    draft.refresh_from_db()
    assert draft.status == Release.DRAFT

    client.force_login(admin)
    response = client.post(reverse("contributions:release", args=[draft.slug]), {"confirm": "on"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.frozen and draft.published_at and re.fullmatch(r"[0-9a-f]{64}", draft.content_hash)
    assert not draft.description.startswith("Draft")
    assert run_worker() == 0

    baselines = {ev.model.baseline: ev for ev in Evaluation.objects.filter(release=draft, source=Evaluation.BASELINE)}
    assert set(baselines) == {LLMModel.REFERENCE, LLMModel.EMPTY}
    assert baselines["reference"].scaled_pass_rate == 100.0 and baselines["reference"].pass_rate == 100.0
    assert baselines["empty"].scaled_pass_rate == 0.0 and baselines["empty"].pass_rate == 0.0
    assert all(ev.complete and ev.is_public for ev in baselines.values())
    assert SnippetResult.objects.filter(evaluation=baselines["reference"]).count() == 13

    page = client.get(reverse("contributions:release", args=[draft.slug])).content.decode()
    assert 'data-paper="focal-loss-contrib"' in page and "100.0 %" in page
    public = client.get(reverse("leaderboard:release_detail", args=[draft.slug]))
    assert public.status_code == 200 and "focal-loss-contrib" in public.content.decode()

    # frozen: the next approval goes to a new draft, which starts from the published release
    client.force_login(contributor)
    strong = zip_files({"calc.py": WEAK_MODULE, "paper2code_test.py":
                        "import calc\nassert calc.add(2, 3) == 5\nassert calc.mul(2, 3) == 6\n"})
    assert upload(client, strong, paper_id="calc-paper", title="Calc", annotated_files="").status_code == 302
    assert run_worker() == 0
    second = PaperContribution.objects.get(paper_id="calc-paper")
    client.force_login(reviewer)
    client.post(reverse("contributions:review", args=[second.pk]), {"decision": "approve"})
    second.refresh_from_db()
    next_draft = second.release_paper.release
    assert next_draft != draft and next_draft.status == Release.DRAFT
    assert sorted(next_draft.release_papers.values_list("paper__paper_id", flat=True)) == ["calc-paper", "focal-loss-contrib"]
    assert list(draft.release_papers.values_list("paper__paper_id", flat=True)) == ["focal-loss-contrib"]
    draft_hash = draft.content_hash
    draft.refresh_from_db()
    assert draft.content_hash == draft_hash and Snippet.objects.filter(release=draft).count() == 13
    assert (Path(next_draft.release_papers.get(paper__paper_id="focal-loss-contrib").folder) / "focal_loss.py").is_file()


def test_weak_snippet_is_named_and_changes_are_requested(env, client, people):
    contributor, reviewer, _ = people
    client.force_login(contributor)
    response = upload(client, weak_paper_zip(), paper_id="calc-paper", title="Calc", annotated_files="")
    assert response.status_code == 302
    assert run_worker() == 0
    contribution = PaperContribution.objects.get()
    checks = checks_of(contribution)
    assert checks["reference"]["status"] == "ok"
    assert checks["blanked"]["status"] == "failed"
    assert "multiply numbers" in checks["blanked"]["summary"]
    assert "add numbers" not in checks["blanked"]["summary"]
    assert checks["blanked"]["details"] == ["calc.py: multiply numbers"]
    assert contribution.status == PaperContribution.CHANGES_REQUESTED
    assert "checks failed" in mail.outbox[-1].subject and "Every snippet, blanked" in mail.outbox[-1].body
    page = client.get(reverse("contributions:detail", args=[contribution.pk])).content.decode()
    assert "multiply numbers" in page and "revision-form" in page

    # approving a paper whose checks failed is refused
    client.force_login(reviewer)
    response = client.post(reverse("contributions:review", args=[contribution.pk]), {"decision": "approve"})
    assert response.status_code == 400
    assert "automatic checks passed" in response.content.decode()
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.CHANGES_REQUESTED

    # the contributor fixes the test and uploads a revision: checked again, now clean
    client.force_login(contributor)
    fixed = zip_files({"calc.py": WEAK_MODULE, "paper2code_paper.md": "# Calc\n",
                       "paper2code_test.py": "import calc\nassert calc.add(2, 3) == 5\nassert calc.mul(2, 3) == 6\n"})
    data = {**FORM, "paper_id": "calc-paper", "title": "Calc", "annotated_files": "",
            "archive": SimpleUploadedFile("fixed.zip", fixed)}
    response = client.post(reverse("contributions:revise", args=[contribution.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    contribution.refresh_from_db()
    assert contribution.revision == 2 and contribution.status == PaperContribution.SUBMITTED
    assert run_worker() == 0
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.AWAITING_REVIEW, contribution.report
    assert contribution.revisions.count() == 2
    assert contribution.revisions.get(number=1).report["passed"] is False
    # each revision's checks were a job of their own, both finished
    from scoring.models import Job, JobKind

    assert sorted(Job.objects.filter(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution)
                  .values_list("revision", "status", "attempt")) == [(1, "finished", 1), (2, "finished", 1)]

    client.force_login(reviewer)
    response = client.post(reverse("contributions:review", args=[contribution.pk]),
                           {"decision": "request_changes", "comment": "Please add the paper text."})
    assert response.status_code == 302
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.CHANGES_REQUESTED
    assert Review.objects.get().comment == "Please add the paper text."
    assert "request changes" in mail.outbox[-1].subject and "Please add the paper text." in mail.outbox[-1].body


def test_unclosed_tag_and_wrong_file_are_reported_line_by_line(env, client, people):
    contributor, _, _ = people
    client.force_login(contributor)
    broken = "def f(x):\n    # <paper2code name=\"body\">\n    return x\n"
    data = zip_files({"mod.py": broken, "paper2code_test.py": "import mod\n"})
    buf = io.BytesIO(data)
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("paper/latin.py", '# <paper2code name="caf\xe9">\nx = 1\n# </paper2code name="caf\xe9">\n'.encode("latin-1"))
    data = buf.getvalue()
    response = upload(client, data, paper_id="broken", title="Broken", annotated_files="mod.py\nmissing.py\nlatin.py")
    assert response.status_code == 302
    assert run_worker() == 0
    contribution = PaperContribution.objects.get()
    checks = checks_of(contribution)
    assert checks["tags"]["status"] == "failed"
    details = "\n".join(checks["tags"]["details"])
    assert 'mod.py:2: tag "body" is never closed' in details
    assert "missing.py does not exist" in details
    assert "latin.py:1: not UTF-8 text" in details
    assert checks["reference"]["status"] == "skipped"
    assert contribution.status == PaperContribution.CHANGES_REQUESTED


def test_requirements_are_resolved_with_pip_and_bad_ones_reported(env, client, people):
    import numpy

    contributor, _, _ = people
    client.force_login(contributor)
    response = upload(client, weak_paper_zip(), paper_id="calc-ok", title="Calc", annotated_files="",
                      requirements=f"numpy=={numpy.__version__}")
    assert response.status_code == 302
    response = upload(client, weak_paper_zip(), paper_id="calc-bad", title="Calc", annotated_files="",
                      requirements="numpy==0.0.0.1")
    assert response.status_code == 302
    assert run_worker() == 0
    ok_row, bad_row = (PaperContribution.objects.get(paper_id=p) for p in ("calc-ok", "calc-bad"))
    ok, bad = checks_of(ok_row)["requirements"], checks_of(bad_row)["requirements"]
    docker = ok_row.report["backend"].startswith("docker")
    assert ok["status"] == "ok"
    assert ("environment image" in ok["summary"]) if docker else ("pip install --dry-run" in ok["summary"])
    assert bad["status"] == "failed"
    assert ("building the environment image failed" if docker else "pip cannot install them") in bad["summary"]
    assert "0.0.0.1" in bad["summary"] + "\n".join(bad["details"])
    # without installable requirements the runs would prove nothing: they are skipped, and said so
    assert checks_of(bad_row)["reference"]["status"] == "skipped"
    assert bad_row.status == PaperContribution.CHANGES_REQUESTED


@pytest.mark.parametrize("requirement, message", [
    ("git+https://github.com/example/pkg.git", "not a valid requirement"),
    ("pkg @ https://example.org/pkg.whl", "URL and path requirements are not accepted"),
    ("-e .", "pip options are not accepted"),
    ("--index-url https://evil.example/simple", "pip options are not accepted"),
])
def test_requirements_that_fetch_or_run_code_are_refused_by_the_form(env, client, people, requirement, message):
    client.force_login(people[0])
    response = upload(client, weak_paper_zip(), paper_id="calc-x", title="Calc", requirements=requirement)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not PaperContribution.objects.exists()
