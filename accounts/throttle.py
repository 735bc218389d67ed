"""Throttles of identity: failed sign-ins (django-axes, per account and per client address) and sign-ups.

Every sign-in goes through ``django.contrib.auth.authenticate`` (the site's login form, the admin's,
any later one), where axes' backend refuses a locked account or address before the password is
checked; its rows (``axes.AccessAttempt``) are in the database. Two limits, counted over the last
``RCB_LOGIN_COOLOFF_MINUTES`` (a lock ends that long after the last failure that counted):

- an account is locked after ``RCB_LOGIN_FAILURE_LIMIT`` failures, from any address;
- a client address is locked, for every account, after ``RCB_LOGIN_ADDRESS_FAILURE_LIMIT`` failures,
  whatever the accounts (higher: one address may be a whole office behind one NAT).

Refused attempts during a lock are not counted and do not extend it. Staff unlock in the admin
("Access attempts": delete the rows) or with ``manage.py axes_reset_username NAME`` /
``axes_reset_ip ADDRESS`` / ``axes_reset``. Sign-ups (POSTs of the sign-up form) are counted per
address in ``SignupAttempt``: ``RCB_SIGNUP_LIMIT`` per ``RCB_SIGNUP_WINDOW_MINUTES``.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import math
from dataclasses import dataclass
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from .models import SignupAttempt

__all__ = [
    "LoginThrottleHandler",
    "LoginLock",
    "client_address",
    "login_lock",
    "lockout_response",
    "signup_allowed",
]


def _address(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or behind ``RCB_TRUSTED_PROXIES`` reverse proxies
    the entry of ``X-Forwarded-For`` the outermost of them added (entries left of it are the
    client's word, never trusted)."""
    proxies = int(getattr(settings, "RCB_TRUSTED_PROXIES", 0))
    if proxies > 0:
        forwarded = [a for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if len(forwarded) >= proxies and (address := _address(forwarded[-proxies])):
            return address
    return _address(request.META.get("REMOTE_ADDR") or "")


@dataclass(frozen=True)
class LoginLock:
    reason: str  # "account" | "address"
    until: dt.datetime

    @property
    def minutes_left(self) -> int:
        return max(1, math.ceil((self.until - timezone.now()).total_seconds() / 60))

    @property
    def message(self) -> str:
        why = ("too many failed sign-ins for this account" if self.reason == "account"
               else "too many failed sign-ins from your network address")
        return (f"Sign-in refused: {why}. Try again in {self.minutes_left} minute"
                f"{'s' if self.minutes_left != 1 else ''} (after {self.until:%H:%M} UTC); "
                f"a site administrator can unlock it sooner.")


def _failures(attempts: Any) -> tuple[int, dt.datetime | None]:
    row = attempts.aggregate(n=Sum("failures_since_start"), last=Max("attempt_time"))
    return row["n"] or 0, row["last"]


def _login_state(request: HttpRequest, credentials: dict | None) -> tuple[int, LoginLock | None]:
    """The account's failures that count now, and the lock of the account or the address, if any."""
    attempts = AccessAttempt.objects.filter(attempt_time__gte=get_cool_off_threshold(request))
    cool_off = get_cool_off(request) or dt.timedelta(0)
    username = get_client_username(request, credentials)
    account = 0
    if username:
        account, last = _failures(attempts.filter(username=username))
        if account >= settings.AXES_FAILURE_LIMIT and last is not None:
            return account, LoginLock("account", last + cool_off)
    if request.axes_ip_address:
        count, last = _failures(attempts.filter(ip_address=request.axes_ip_address))
        if count >= settings.RCB_LOGIN_ADDRESS_FAILURE_LIMIT and last is not None:
            return account, LoginLock("address", last + cool_off)
    return account, None


def login_lock(request: HttpRequest, credentials: dict | None = None) -> LoginLock | None:
    """Why and until when sign-in is refused for this request's account and address, or None."""
    return _login_state(request, credentials)[1]


class LoginThrottleHandler(AxesDatabaseHandler):
    """Axes' database handler with a limit of its own for the client address (axes has one limit)."""

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        # axes compares this with AXES_FAILURE_LIMIT (the account's limit): a locked address counts
        # as the whole limit, else the account's own failures count
        account, lock = _login_state(request, credentials)
        return max(account, settings.AXES_FAILURE_LIMIT) if lock is not None else account


def lockout_response(request: HttpRequest, original_response: HttpResponse | None = None,
                     credentials: dict | None = None) -> HttpResponse:
    """The answer to a refused sign-in: 429, saying why and for how long (axes' AXES_LOCKOUT_CALLABLE)."""
    lock = login_lock(request, credentials) or LoginLock("account", timezone.now() + (get_cool_off(request) or
                                                                                      dt.timedelta(0)))
    response = render(request, "accounts/locked_out.html", {"lock": lock}, status=429)
    response["Retry-After"] = str(max(1, int((lock.until - timezone.now()).total_seconds())))
    return response


def signup_allowed(request: HttpRequest) -> bool:
    """Count this sign-up attempt of the client's address; False once it is over the limit."""
    now = timezone.now()
    address = client_address(request) or ""
    window = dt.timedelta(minutes=settings.RCB_SIGNUP_WINDOW_MINUTES)
    SignupAttempt.objects.filter(at__lt=now - window).delete()
    recent = SignupAttempt.objects.filter(ip_address=address, at__gte=now - window).count()
    if recent >= settings.RCB_SIGNUP_LIMIT:
        return False
    SignupAttempt.objects.create(ip_address=address, at=now)
    return True
