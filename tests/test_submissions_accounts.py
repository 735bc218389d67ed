"""Accounts: sign-up, login/logout, password reset by e-mail, tokens on the profile page, roles."""
from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType
from django.core import mail
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from accounts.models import APIToken
from accounts.roles import user_is_reviewer
from accounts.services import api_token_authenticate, api_token_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _mail(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


def test_signup_logs_in_and_lands_on_the_profile(client):
    resp = client.post(reverse("accounts:signup"), {
        "username": "carol", "email": "carol@example.org",
        "password1": "a-long-Passphrase-42", "password2": "a-long-Passphrase-42",
    })
    assert resp.status_code == 302 and resp["Location"] == reverse("accounts:profile")
    page = client.get(reverse("accounts:profile")).content.decode()
    assert "carol" in page and "role: submitter" in page
    # the same e-mail twice is refused with a message, not an error page
    client.post(reverse("logout"))
    again = client.post(reverse("accounts:signup"), {
        "username": "carol2", "email": "CAROL@example.org",
        "password1": "a-long-Passphrase-42", "password2": "a-long-Passphrase-42",
    })
    assert again.status_code == 400 and "an account with this e-mail exists" in again.content.decode()


def test_weak_password_is_refused_with_reasons(client):
    resp = client.post(reverse("accounts:signup"), {
        "username": "dave", "email": "dave@example.org", "password1": "123", "password2": "123"})
    assert resp.status_code == 400 and "too short" in resp.content.decode()
    assert not User.objects.filter(username="dave").exists()


def test_login_logout(client):
    User.objects.create_user("erin", "erin@example.org", "a-long-Passphrase-42")
    resp = client.post(reverse("login"), {"username": "erin", "password": "a-long-Passphrase-42"})
    assert resp.status_code == 302 and resp["Location"] == reverse("accounts:profile")
    assert client.get(reverse("accounts:profile")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("accounts:profile")).status_code == 302  # to the login page


def test_password_reset_by_mail(client):
    User.objects.create_user("frank", "frank@example.org", "old-Passphrase-42")
    client.post(reverse("password_reset"), {"email": "frank@example.org"})
    assert len(mail.outbox) == 1
    link = re.search(r"https?://[^/]+(/accounts/reset/\S+)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and "Choose a new password" in form.content.decode()
    done = client.post(form.redirect_chain[-1][0], {"new_password1": "new-Passphrase-43", "new_password2": "new-Passphrase-43"})
    assert done.status_code == 302
    # through the sign-in form: authenticate() without a request is refused (axes needs the client's address)
    assert client.post(reverse("login"), {"username": "frank", "password": "new-Passphrase-43"}).status_code == 302
    assert client.get(reverse("accounts:profile")).status_code == 200


def test_profile_creates_a_token_once_and_revokes_it(client):
    user = User.objects.create_user("gina", "gina@example.org", "a-long-Passphrase-42")
    client.force_login(user)
    made = client.post(reverse("accounts:profile"), {"name": "ci"})
    # post/redirect/get: the token is shown once, on the page the redirect leads to; a reload makes no other
    assert made.status_code == 302 and made["Location"] == reverse("accounts:profile")
    page = client.get(made["Location"]).content.decode()
    raw = re.search(r'id="new-token" class="token">(rcb_[^<]+)<', page).group(1)
    assert 'data-copy-target="new-token"' in page
    token = APIToken.objects.get(user=user)
    assert token.prefix == raw[:10] and raw not in client.get(reverse("accounts:profile")).content.decode()
    assert "accounts.new_token" not in client.session and APIToken.objects.filter(user=user).count() == 1
    assert client.post(reverse("accounts:profile"), {"name": "x" * 500}).status_code == 400  # the form's error
    assert client.get("/api/v1/submissions/1", HTTP_AUTHORIZATION=f"Token {raw}").status_code == 404  # known user
    client.post(reverse("accounts:token_revoke", args=[token.pk]))
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.logout()
    assert client.get("/api/v1/submissions/1", HTTP_AUTHORIZATION=f"Token {raw}").status_code == 401
    # someone else's token cannot be revoked by id
    other = User.objects.create_user("hank", "hank@example.org", "a-long-Passphrase-42")
    client.force_login(other)
    second = APIToken.objects.create(user=user, prefix="x", key_hash="0" * 64)
    client.post(reverse("accounts:token_revoke", args=[second.pk]))
    second.refresh_from_db()
    assert second.revoked_at is None


def test_roles(client):
    plain = User.objects.create_user("ivy", "ivy@example.org", "pw-ivy-123!x")
    reviewer = User.objects.create_user("jo", "jo@example.org", "pw-jo-123!x")
    reviewer.groups.add(Group.objects.get(name="reviewers"))
    admin = User.objects.create_user("kim", "kim@example.org", "pw-kim-123!x", is_staff=True)
    assert [user_is_reviewer(u) for u in (plain, reviewer, admin)] == [False, True, True]
    client.force_login(plain)
    assert client.get(reverse("submissions:review_queue")).status_code == 403
    client.force_login(reviewer)
    assert client.get(reverse("submissions:review_queue")).status_code == 200


#: the newest migrations in which the submissions app still owned API tokens
_BEFORE_MOVE = [("submissions", "0003_environment_error_states"), ("accounts", "0001_reviewers_group")]


@pytest.mark.django_db(transaction=True)
def test_token_move_to_accounts_keeps_the_rows_and_the_permissions():
    """A database made before the move (tokens in ``submissions``) migrates with its rows: same ids,
    hashes; the content type (so granted permissions) follows the model; back and forth again."""
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(_BEFORE_MOVE)
        old = MigrationExecutor(connection).loader.project_state(_BEFORE_MOVE).apps
        with pytest.raises(LookupError):
            old.get_model("accounts", "APIToken")
        owner = old.get_model("auth", "User").objects.create(username="old-owner", password="!")
        raw = "rcb_made-before-the-move"
        row = old.get_model("submissions", "APIToken").objects.create(
            user=owner, name="ci", prefix=raw[:10], key_hash=hashlib.sha256(raw.encode()).hexdigest())
        # what post_migrate had made on such a database: the old app's content type and its permissions
        types = old.get_model("contenttypes", "ContentType").objects
        types.filter(model="apitoken").delete()
        kind = types.create(app_label="submissions", model="apitoken")
        permission = old.get_model("auth", "Permission").objects.create(
            content_type=kind, codename="view_apitoken", name="Can view API token")
        owner.user_permissions.add(permission)

        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
        token = APIToken.objects.get()
        assert (token.pk, token.name, token.user.username) == (row.pk, "ci", "old-owner")
        assert api_token_authenticate(raw=raw).username == "old-owner"
        tables = connection.introspection.table_names()
        assert APIToken._meta.db_table == "accounts_apitoken" and "accounts_apitoken" in tables
        assert "submissions_apitoken" not in tables
        assert ContentType.objects.get(pk=kind.pk).app_label == "accounts"
        assert User.objects.get(username="old-owner").has_perm("accounts.view_apitoken")
        # new tokens get the next id of the same table
        assert api_token_create(user=token.user, name="new")[0].pk > row.pk

        MigrationExecutor(connection).migrate(_BEFORE_MOVE)  # and back: the content type returns to submissions
        assert old.get_model("contenttypes", "ContentType").objects.get(pk=kind.pk).app_label == "submissions"
        assert old.get_model("submissions", "APIToken").objects.count() == 2
    finally:
        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
