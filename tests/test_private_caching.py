"""Private answers are never stored by a shared or browser cache; public pages keep their shared caching
(leaderboard.middleware.PrivateAnswersMiddleware, leaderboard.page_cache)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.services import api_token_create
from submissions.models import PredictionSubmission

from submissions_support import demo_release_create, predictions_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    # a queue nobody listens to: the upload is stored, its jobs' pushes fail and are logged
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}


def _private(response) -> bool:
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    return "private" in directives and bool(directives & {"no-store", "no-cache"})


def _varies(response) -> set[str]:
    return {v.strip().lower() for v in response.get("Vary", "").split(",")}


@pytest.fixture
def uploaded():
    demo_release_create(papers=["rope"])
    user = User.objects.create_user("alice", "alice@example.org", "a-long-Passphrase-42")
    token = api_token_create(user=user, name="t")[1]
    created = Client().post("/api/v1/submissions?model_name=Private-Model&allow_partial=1", data=predictions_bytes(papers=["rope"]),
                            content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
    assert created.status_code == 201, created.content
    assert _private(created) and {"authorization", "cookie"} <= _varies(created)
    return user, token, PredictionSubmission.objects.get(pk=created.json()["id"])


def test_token_authenticated_api_answers_are_private_and_vary_on_authorization(uploaded):
    user, token, submission = uploaded
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    for url in (f"/api/v1/submissions/{submission.pk}", f"/api/v1/submissions/{submission.pk}?results=1",
                f"/api/v1/models/{submission.model.key}"):
        response = client.get(url)
        assert response.status_code == 200, (url, response.content)
        assert response["Cache-Control"] == "private, no-store", url
        assert {"authorization", "cookie"} <= _varies(response), url
    # the private model is nobody else's business: anonymous visitors get a 404
    assert Client().get(f"/api/v1/models/{submission.model.key}").status_code == 404


def test_signed_in_pages_are_private(uploaded):
    user, _, submission = uploaded
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    for url in (f"/submissions/{submission.pk}/", "/submissions/", "/accounts/profile/", "/review/submissions/",
                "/contribute/review/", "/contribute/mine/"):
        response = client.get(url)
        assert response.status_code == 200, url
        assert _private(response), (url, response["Cache-Control"])
        assert {"authorization", "cookie"} <= _varies(response), url


def test_public_pages_and_tables_keep_their_shared_caching(uploaded, fresh_page_cache):
    user, token, _ = uploaded
    for url in ("/leaderboard/", "/api/v1/leaderboard", "/releases/"):
        anonymous = Client().get(url)
        assert anonymous.status_code == 200
        assert anonymous["Cache-Control"].startswith("public") and "s-maxage=" in anonymous["Cache-Control"], url
        assert {"authorization", "cookie"} <= _varies(anonymous), url
    # the API's tables are the same for everyone, token or not
    assert Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/v1/leaderboard")["Cache-Control"].startswith("public")
    # a page filled for a signed-in visitor (their account menu) revalidates, never shared
    client = Client()
    client.force_login(user)
    assert client.get("/leaderboard/")["Cache-Control"] == "private, no-cache"
