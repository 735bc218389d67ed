"""The admin's publishing action: freezes and hashes a draft; refuses an empty one; published stays frozen."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from contributions.models import PaperContribution
from catalog.models import Evaluation, Paper, Release, ReleasePaper

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def publish_action(client, release):
    url = reverse("admin:contributions_publishablerelease_changelist")
    return client.post(url, {"action": "publish", "_selected_action": [release.pk]}, follow=True)


def test_admin_publishes_a_draft_and_it_is_frozen(admin_client, django_capture_on_commit_callbacks, tmp_path):
    import django_rq

    from contributions_support import contribution_env

    with contribution_env(tmp_path):
        _publish_and_check(admin_client, django_capture_on_commit_callbacks, django_rq.get_queue("scoring"))


def _publish_and_check(admin_client, django_capture_on_commit_callbacks, queue):
    draft = Release.objects.create(name="Next", slug="next", status=Release.DRAFT)
    paper = Paper.objects.create(paper_id="p1", title="P1")
    ReleasePaper.objects.create(release=draft, paper=paper, folder="", content_hash="a" * 64)
    with django_capture_on_commit_callbacks(execute=True):
        response = publish_action(admin_client, draft)
    assert "Next published" in response.content.decode()
    draft.refresh_from_db()
    assert draft.frozen and draft.published_at and len(draft.content_hash) == 64
    assert {ev.model.baseline for ev in Evaluation.objects.filter(release=draft)} == {"reference", "empty"}
    assert queue.count == 0  # no code in this release: nothing to score (the flow tests score baselines)

    # again: refused with a message, nothing changes
    before = draft.content_hash
    response = publish_action(admin_client, draft)
    assert "already published" in response.content.decode()
    draft.refresh_from_db()
    assert draft.content_hash == before
    # and its admin page is read-only
    page = admin_client.get(reverse("admin:contributions_publishablerelease_change", args=[draft.pk])).content.decode()
    assert 'name="name"' not in page


def test_admin_refuses_to_publish_an_empty_draft(admin_client):
    draft = Release.objects.create(name="Empty", slug="empty", status=Release.DRAFT)
    response = publish_action(admin_client, draft)
    assert "has no paper yet" in response.content.decode()
    draft.refresh_from_db()
    assert draft.status == Release.DRAFT


def test_contribution_admin_lists_contributions(admin_client):
    user = User.objects.create_user("carla")
    PaperContribution.objects.create(contributor=user, paper_id="p", title="T <b>x</b>")
    page = admin_client.get(reverse("admin:contributions_papercontribution_changelist")).content.decode()
    assert "T &lt;b&gt;x&lt;/b&gt;" in page


def test_the_next_release_draft_is_our_own_and_starts_from_the_latest_published(tmp_path, settings):
    """Without a default release, the latest published one; every paper comes, with its code when attached."""
    from django.utils import timezone

    from contributions.release_services import release_draft_get_or_create
    from catalog.models import Snippet

    settings.RCB_PSET_ROOT = tmp_path / "psets"
    imported = Release.objects.create(name="Imported draft", slug="imported", status=Release.DRAFT)
    old = Release.objects.create(name="Old", slug="old", status=Release.PUBLISHED,
                                 published_at=timezone.now() - timezone.timedelta(days=9))
    latest = Release.objects.create(name="Latest", slug="latest", status=Release.PUBLISHED, published_at=timezone.now())
    folder = tmp_path / "src" / "p1"
    folder.mkdir(parents=True)
    (folder / "paper2code_test.py").write_text("print('ok')\n")
    p1, p2 = Paper.objects.create(paper_id="p1", title="P1"), Paper.objects.create(paper_id="p2", title="P2")
    ReleasePaper.objects.create(release=latest, paper=p1, folder=str(folder), content_hash="h1", snippet_count=2)
    ReleasePaper.objects.create(release=latest, paper=p2, folder="", content_hash="")  # figures only, no code
    ReleasePaper.objects.create(release=old, paper=p2, folder=str(folder), content_hash="h2")
    outer = Snippet.objects.create(release=latest, paper=p1, file="a.py", name="outer", weight=2, position=0)
    Snippet.objects.create(release=latest, paper=p1, file="a.py", name="inner", weight=1, position=1, parent=outer, depth=1)

    draft = release_draft_get_or_create()
    assert draft not in (imported, old, latest) and draft.status == Release.DRAFT
    assert release_draft_get_or_create() == draft  # one draft at a time
    assert draft.predecessor == latest
    # a paper without code here (published figures) comes too: its snippets and results carry over
    assert dict(draft.release_papers.values_list("paper__paper_id", "folder")) == {
        "p1": str(tmp_path / "psets" / draft.slug / "p1"), "p2": ""}
    copied = draft.release_papers.get(paper__paper_id="p1")
    assert copied.folder == str(tmp_path / "psets" / draft.slug / "p1") and copied.content_hash == "h1"
    inner = Snippet.objects.get(release=draft, name="inner")
    assert inner.parent.name == "outer" and inner.parent.release == draft
    assert (tmp_path / "psets" / draft.slug / "papers.yaml").read_text().count("id: p1") == 1


def test_reviewers_cannot_approve_their_own_contribution():
    from django.contrib.auth.models import Group
    from django.core.exceptions import PermissionDenied

    from contributions.services import contribution_review

    rita = User.objects.create_user("rita")
    rita.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    own = PaperContribution.objects.create(contributor=rita, paper_id="mine", title="Mine",
                                           status=PaperContribution.AWAITING_REVIEW, report={"passed": True})
    with pytest.raises(PermissionDenied):
        contribution_review(contribution=own, reviewer=rita, decision="approve")
    own.refresh_from_db()
    assert own.status == PaperContribution.AWAITING_REVIEW and not own.reviews.exists()
    nobody = User.objects.create_user("nobody")
    with pytest.raises(PermissionDenied):
        contribution_review(contribution=own, reviewer=nobody, decision="reject", comment="no")
