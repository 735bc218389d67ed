"""The admin's publishing action: freezes and hashes a draft; refuses an empty one; published stays frozen."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from contributions.models import PaperContribution
from leaderboard.models import Evaluation, Paper, Release, ReleasePaper

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
