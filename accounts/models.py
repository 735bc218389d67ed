"""Identity the site stores beside Django's users: personal API tokens (roles are groups, ``accounts.roles``)."""
from __future__ import annotations

from django.conf import settings
from django.db import models

__all__ = ["APIToken"]


class APIToken(models.Model):
    """A personal API token; only its SHA-256 is stored, the token itself is shown once.

    The table keeps the name it had when the model lived in ``submissions`` (moved by a state-only
    migration: rows, ids and constraints untouched).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, help_text="first characters, to recognise a token")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "submissions_apitoken"
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None
