"""Sign-in and sign-up throttling (accounts/throttle.py, django-axes): real requests, real database."""
from __future__ import annotations

import datetime as dt

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-Passphrase-42"


def _users(*names: str, staff: bool = False) -> None:
    for name in names:
        User.objects.create_user(name, f"{name}@example.org", PASSWORD, is_staff=staff, is_superuser=staff)


def _signed_in(client: Client) -> bool:
    return client.get(reverse("accounts:profile")).status_code == 200


def _hammer(client: Client, url: str, username: str, times: int = 30) -> list[int]:
    return [client.post(url, {"username": username, "password": f"wrong-{i}"}).status_code for i in range(times)]


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_thirty_wrong_passwords_lock_the_account_not_the_neighbours(url, settings):
    _users("alice", "bob", staff=True)
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    statuses = _hammer(attacker, url, "alice")
    limit = settings.RCB_LOGIN_FAILURE_LIMIT
    assert statuses[:limit - 1] == [200] * (limit - 1)  # the form again, with its error
    assert set(statuses[limit - 1:]) == {429}  # the limit-th failure locks, and every attempt after it is refused

    right = attacker.post(url, {"username": "alice", "password": PASSWORD})
    assert right.status_code == 429 and not _signed_in(attacker)
    text = right.content.decode()
    assert "too many failed sign-ins for this account" in text
    assert "Try again in 15 minutes" in text and "UTC" in text
    assert int(right["Retry-After"]) > 14 * 60
    # refused attempts were not counted: the account's failures stop at the limit
    assert sum(AccessAttempt.objects.filter(username="alice").values_list("failures_since_start", flat=True)) == limit

    # another account from the same address is not locked by it (the address is below its own limit)
    neighbour = Client(REMOTE_ADDR="203.0.113.7")
    assert neighbour.post(url, {"username": "bob", "password": PASSWORD}).status_code == 302
    assert _signed_in(neighbour)
    # and alice is locked from every address
    elsewhere = Client(REMOTE_ADDR="198.51.100.1")
    assert elsewhere.post(url, {"username": "alice", "password": PASSWORD}).status_code == 429


def test_the_address_limit_locks_every_account_from_that_address(settings):
    settings.RCB_LOGIN_ADDRESS_FAILURE_LIMIT = 8
    _users("bob")
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    # a spray: a few guesses for each of many accounts, none reaching the account limit
    statuses = [status for name in ("u1", "u2", "u3", "u4") for status in _hammer(attacker, "/accounts/login/", name, 2)]
    assert statuses == [200] * 7 + [429]  # the 8th failure from the address reaches its limit
    refused = attacker.post("/accounts/login/", {"username": "bob", "password": PASSWORD})
    assert refused.status_code == 429 and "from your network address" in refused.content.decode()
    # bob from his own address is not concerned
    assert Client(REMOTE_ADDR="198.51.100.2").post("/accounts/login/", {"username": "bob", "password": PASSWORD}).status_code == 302


def test_a_lock_ends_after_the_cool_off_or_when_staff_unlock_it(settings):
    _users("carol", "dave")
    client = Client(REMOTE_ADDR="203.0.113.10")
    for name in ("carol", "dave"):
        _hammer(client, "/accounts/login/", name, times=settings.RCB_LOGIN_FAILURE_LIMIT)
        assert client.post("/accounts/login/", {"username": name, "password": PASSWORD}).status_code == 429

    call_command("axes_reset_username", "carol")  # the documented unlock (the admin's "Access attempts" too)
    assert client.post("/accounts/login/", {"username": "carol", "password": PASSWORD}).status_code == 302

    cool_off = dt.timedelta(minutes=settings.RCB_LOGIN_COOLOFF_MINUTES)
    AccessAttempt.objects.filter(username="dave").update(attempt_time=dt.datetime.now(dt.timezone.utc) - cool_off)
    assert Client(REMOTE_ADDR="203.0.113.10").post(
        "/accounts/login/", {"username": "dave", "password": PASSWORD}).status_code == 302


def test_staff_see_and_delete_attempts_in_the_admin():
    _users("root", staff=True)
    _hammer(Client(REMOTE_ADDR="203.0.113.11"), "/accounts/login/", "erin", times=2)
    staff = Client()
    staff.force_login(User.objects.get(username="root"))
    page = staff.get("/admin/axes/accessattempt/")
    assert page.status_code == 200 and "erin" in page.content.decode()


def test_signups_are_throttled_per_address(settings):
    settings.RCB_SIGNUP_LIMIT = 3
    client = Client(REMOTE_ADDR="203.0.113.12")

    def signup(c: Client, name: str) -> int:
        return c.post(reverse("accounts:signup"), {"username": name, "email": f"{name}@example.org",
                                                   "password1": PASSWORD, "password2": "mismatch"}).status_code

    assert [signup(client, f"s{i}") for i in range(3)] == [400, 400, 400]
    refused = client.post(reverse("accounts:signup"), {"username": "s9", "email": "s9@example.org",
                                                       "password1": PASSWORD, "password2": PASSWORD})
    assert refused.status_code == 429 and "Too many sign-ups from your network address" in refused.content.decode()
    assert not User.objects.filter(username="s9").exists()
    assert signup(Client(REMOTE_ADDR="198.51.100.3"), "t1") == 400  # another address is not concerned


def test_client_address_behind_a_trusted_proxy(settings):
    from django.test import RequestFactory

    from accounts.throttle import client_address

    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.5")
    assert client_address(request) == "10.0.0.1"  # no proxy trusted: the header is the client's word
    settings.RCB_TRUSTED_PROXIES = 1
    assert client_address(request) == "203.0.113.5"  # what our one proxy saw, not what the client claimed
