"""Accounts: sign-up, login/logout, password reset by e-mail, tokens on the profile page, roles."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail
from django.urls import reverse

from submissions.models import APIToken
from submissions.selectors import user_is_reviewer

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
    assert client.login(username="frank", password="new-Passphrase-43")


def test_profile_creates_a_token_once_and_revokes_it(client):
    user = User.objects.create_user("gina", "gina@example.org", "a-long-Passphrase-42")
    client.force_login(user)
    page = client.post(reverse("accounts:profile"), {"name": "ci"}).content.decode()
    raw = re.search(r'id="new-token" class="token">(rcb_[^<]+)<', page).group(1)
    token = APIToken.objects.get(user=user)
    assert token.prefix == raw[:10] and raw not in client.get(reverse("accounts:profile")).content.decode()
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
