"""Bad contribution uploads through the web form: a clear message each, no 500, nothing stored."""
from __future__ import annotations

import io
import os
import stat
import zipfile

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from contributions.models import ContributionRevision, PaperContribution

pytestmark = pytest.mark.django_db

FORM = {"paper_id": "bad-paper", "title": "A bad upload", "annotated_files": "", "context_files": "", "requirements": ""}
GOOD = {"mod.py": b'def f():\n    # <paper2code name="x">\n    return 1\n    # </paper2code name="x">\n',
        "paper2code_test.py": b"import mod\nassert mod.f() == 1\n"}


def zip_of(entries, compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def with_good(*extra) -> bytes:
    return zip_of([(f"paper/{k}", v) for k, v in GOOD.items()] + list(extra))


def link(name: str, target: bytes) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target


def latin1_name() -> bytes:
    data = with_good(("paper/placeholder.py", b"x"))
    return data.replace(b"placeholder.py", "caf\xe9.py".encode("latin-1") + b"_" * 7)


CASES = [
    ("not a zip", lambda: b"name,score\nfoo,1\n" * 50, "not a zip archive"),
    ("empty file", lambda: b"", "The submitted file is empty"),
    ("zip bomb", lambda: with_good(("paper/data.bin", b"\0" * (30 * 1024 * 1024))), "zip bomb"),
    ("path traversal", lambda: with_good(("paper/../../outside.py", b"x")), "points outside the paper folder"),
    ("absolute path", lambda: with_good(("/etc/cron.d/evil", b"x")), "is an absolute path"),
    ("link out of the folder", lambda: with_good(link("paper/secret", b"/etc/shadow")), "is a symbolic link"),
    ("non-UTF-8 name", latin1_name, "is not valid UTF-8"),
    ("no test script", lambda: zip_of([("paper/mod.py", GOOD["mod.py"])]),
     "the zip has no paper2code_test.py, the paper&#x27;s test that runs its annotated code (the zip holds: mod.py); "
     "add paper2code_test.py beside the code and zip again"),
    ("test script too deep", lambda: zip_of([("a/mod.py", GOOD["mod.py"]), ("b/x/paper2code_test.py", b"")]),
     "the zip has paper2code_test.py only inside b/x/, not at its top: zip the folder b/x itself"),
    ("too many files", lambda: with_good(*[(f"paper/f{i}.py", b"x") for i in range(12)]), "at most 10 are accepted"),
]


@pytest.fixture
def contributor(client):
    user = User.objects.create_user("carla", password="pw")
    client.force_login(user)
    return user


@pytest.mark.parametrize("label, make, message", CASES, ids=[c[0] for c in CASES])
def test_bad_zip_is_refused_with_a_message_and_nothing_stored(client, contributor, settings, tmp_path, label, make, message):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.RCB_CONTRIB_MAX_FILES = 10
    response = client.post(reverse("contributions:new"), {**FORM, "archive": SimpleUploadedFile("paper.zip", make())})
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page, page[page.find("data-error"):][:500]
    # every error at the top of the long form, linked to its field
    top = page.split('id="form-errors"')[1].split("</div>")[0]
    assert message in top and page.index('id="form-errors"') < page.index('id="id_paper_id"')
    assert not PaperContribution.objects.exists() and not ContributionRevision.objects.exists()
    uploads = tmp_path / "media" / "contributions"
    assert not uploads.exists() or os.listdir(uploads) == []


def test_oversize_zip_is_refused(client, contributor, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.RCB_CONTRIB_MAX_UPLOAD_MB = 1
    data = with_good(("paper/noise.bin", os.urandom(1536 * 1024)))
    response = client.post(reverse("contributions:new"), {**FORM, "archive": SimpleUploadedFile("big.zip", data)})
    assert response.status_code == 400
    assert "the zip is larger than 1 MB" in response.content.decode()
    assert not PaperContribution.objects.exists()


@pytest.mark.parametrize("field, value, message", [
    ("paper_id", "../etc", "Letters, digits"),
    ("annotated_files", "../../etc/passwd", "must be a path inside the paper folder"),
    ("context_files", "/etc/passwd", "must be a path inside the paper folder"),
    ("arxiv_url", "javascript:alert(1)", "Enter a valid URL"),
])
def test_bad_metadata_is_refused(client, contributor, settings, tmp_path, field, value, message):
    settings.MEDIA_ROOT = tmp_path / "media"
    data = {**FORM, field: value, "archive": SimpleUploadedFile("paper.zip", with_good())}
    response = client.post(reverse("contributions:new"), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not PaperContribution.objects.exists()
    assert not (tmp_path / "media" / "contributions").exists()


def test_anonymous_upload_goes_to_login(client):
    response = client.post(reverse("contributions:new"), FORM)
    assert response.status_code == 302 and "login" in response["Location"]


def test_others_cannot_see_a_contribution(client, contributor):
    other = User.objects.create_user("mallory", password="pw")
    contribution = PaperContribution.objects.create(contributor=contributor, paper_id="p", title="T")
    client.force_login(other)
    assert client.get(reverse("contributions:detail", args=[contribution.pk])).status_code == 404
    assert client.get(reverse("contributions:review", args=[contribution.pk])).status_code == 403
    assert client.get(reverse("contributions:queue")).status_code == 403


def test_paper_id_already_in_the_benchmark_or_in_review_is_refused(client, contributor, settings, tmp_path):
    from catalog.models import Paper

    settings.MEDIA_ROOT = tmp_path / "media"
    Paper.objects.create(paper_id="DyT", title="Transformers without Normalization")
    response = client.post(reverse("contributions:new"),
                           {**FORM, "paper_id": "dyt", "archive": SimpleUploadedFile("p.zip", with_good())})
    assert response.status_code == 400
    assert "a paper with this id is already in the benchmark" in response.content.decode()
    PaperContribution.objects.create(contributor=contributor, paper_id="taken", title="T")
    response = client.post(reverse("contributions:new"),
                           {**FORM, "paper_id": "taken", "archive": SimpleUploadedFile("p.zip", with_good())})
    assert "another contribution already uses this id" in response.content.decode()
    assert PaperContribution.objects.count() == 1
