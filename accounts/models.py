"""Identity the site stores beside Django's users: personal API tokens (roles are groups, ``accounts.roles``)."""
from __future__ import annotations

from django.conf import settings
from django.db import models

__all__ = ["APIToken", "SignupAttempt"]


class APIToken(models.Model):
    """A personal API token; only its SHA-256 is stored, the token itself is shown once.

    The model lived in ``submissions``: a state-only migration moved it with its rows, ids and
    constraints, then its table was renamed ``accounts_apitoken``.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, help_text="first characters, to recognise a token")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class SignupAttempt(models.Model):
    """A POST of the sign-up form from one client address (accounts.throttle.signup_allowed counts them)."""

    ip_address = models.CharField(max_length=45)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["ip_address", "at"])]
