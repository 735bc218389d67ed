"""A contribution whose files are byte-identical to a paper already in a release is flagged to reviewers."""
from __future__ import annotations

import shutil

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from contributions.models import PaperContribution
from leaderboard.importers.pset import pset_import
from tests.contributions_support import DEMO, contribution_env, zip_folder

pytestmark = pytest.mark.django_db(transaction=True)

FORM = {
    "title": "Rotary position embeddings", "venue": "", "arxiv_url": "", "code_url": "",
    "first_commit_date": "2021-03-01", "annotated_files": "", "context_files": "", "requirements": "",
}


@pytest.fixture
def env(tmp_path):
    with contribution_env(tmp_path):
        yield tmp_path


def test_a_copy_of_an_existing_paper_is_flagged_and_a_new_paper_is_not(env, client):
    pset_import(path=DEMO, release_name="demo copy")

    contributor = User.objects.create_user("carla", password="pw-carla-123")
    reviewer = User.objects.create_user("rita", password="pw-rita-123")
    reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    client.force_login(contributor)
    for paper_id, data in (("rope-again", zip_folder(DEMO / "rope")), ("lion-changed", _changed_lion(env))):
        response = client.post(reverse("contributions:new"), {
            **FORM, "paper_id": paper_id, "archive": SimpleUploadedFile("paper.zip", data),
        })
        assert response.status_code == 302, response.content.decode()[:2000]
    copy = PaperContribution.objects.get(paper_id="rope-again")
    changed = PaperContribution.objects.get(paper_id="lion-changed")

    client.force_login(reviewer)
    queue = client.get(reverse("contributions:queue") + "?status=all").content.decode()
    rows = {row.split("</th>")[0]: row for row in queue.split("<tr>")[1:]}
    flagged = [head for head in rows if "data-duplicate" in head]
    assert len(flagged) == 1 and "rope-again" in flagged[0] and "identical to rope (demo copy)" in flagged[0]

    review = client.get(reverse("contributions:review", args=[copy.pk])).content.decode()
    assert "data-duplicate" in review and "byte-identical" in review and ">rope</a>" in review
    review = client.get(reverse("contributions:review", args=[changed.pk])).content.decode()
    assert "data-duplicate" not in review


def _changed_lion(env) -> bytes:
    """The demo's Lion paper with one byte changed: not a copy."""
    folder = env / "lion-changed"
    shutil.copytree(DEMO / "lion", folder)
    test = folder / "paper2code_test.py"
    test.write_text(test.read_text() + "\n")
    return zip_folder(folder, top="lion")
