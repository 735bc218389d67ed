"""Writes of identity: API tokens (made, revoked, checked) and users made from a shell.

The one token check of the site is here: ``api_token_user`` reads a request's
``Authorization: Token <token>`` (or ``Bearer``) header for the read API and the submissions API alike.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.utils import timezone

from .models import APIToken

__all__ = ["api_token_create", "api_token_revoke", "api_token_authenticate", "api_token_user", "user_get_or_create"]

#: what a token starts with, so a leaked one is recognisable (secret scanners, logs)
TOKEN_PREFIX = "rcb_"


def _token_hash(raw: str) -> str:
    return hashlib.sha256(raw.strip().encode("utf-8")).hexdigest()


def api_token_create(*, user: Any, name: str = "") -> tuple[APIToken, str]:
    """Create a token; the returned string is the only copy of it (the database keeps a hash)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = APIToken.objects.create(user=user, name=name.strip()[:100], prefix=raw[:10], key_hash=_token_hash(raw))
    return token, raw


def api_token_revoke(*, user: Any, token_id: int) -> bool:
    """Revoke one of the user's active tokens; False when there is no such token."""
    return bool(
        APIToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())
    )


def api_token_authenticate(*, raw: str) -> Any | None:
    """The active user of an active token, or None."""
    if not raw or len(raw) > 200:
        return None
    token = (
        APIToken.objects.select_related("user")
        .filter(key_hash=_token_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    # one write a minute at most: a polling client must not turn every GET into a write
    if token.last_used_at is None or now - token.last_used_at > dt.timedelta(minutes=1):
        APIToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


def api_token_user(request: HttpRequest) -> Any | None:
    """The user of the request's ``Authorization: Token <token>`` (or ``Bearer``) header, or None."""
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() not in ("token", "bearer") or not raw.strip():
        return None
    return api_token_authenticate(raw=raw.strip())


def user_get_or_create(*, username: str, email: str = "") -> tuple[Any, bool]:
    """The user of that name, made without a usable password (it signs in with tokens) when new."""
    user, created = get_user_model().objects.get_or_create(username=username, defaults={"email": email})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user, created
