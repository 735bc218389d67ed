"""Reads kept in Django's cache: ``cached`` under a key that names ``release_version``.

A release's version moves with every write that changes what it shows (catalog.aggregates), so
a kept figure is never served after its data changed.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from django.core.cache import cache

from catalog.models import Release

__all__ = ["cached", "release_version"]


def cached(key_parts: Iterable[Any], compute, *, timeout: int = 3600):
    """Return compute() cached under a key made of key_parts (include the release data_version)."""
    raw = json.dumps([str(p) for p in key_parts])
    key = "rcb:sel:" + hashlib.sha256(raw.encode()).hexdigest()[:32]
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, timeout)
    return value


def release_version(release: Release) -> str:
    """What a cached figure of this release depends on: changes with every write (data_version),
    and differs between two releases that happen to reuse an id (created_at)."""
    return f"{release.id}:{release.created_at.isoformat()}:{release.data_version}"
