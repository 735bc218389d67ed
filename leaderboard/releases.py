"""Releases: which one is the default, new releases' slugs, the content hash of a release.

Drafts of the next release and publishing them with baselines belong to contributions
(contributions.release_services), which calls these.
"""
from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from benchmark_core.hashing import release_hash

from .aggregates import release_memo_forget
from .models import Release

__all__ = ["release_content_hash", "release_set_default", "release_slug_unique"]


def release_set_default(*, release: Release) -> None:
    """Make this the release shown when none is asked for."""
    with transaction.atomic():
        Release.objects.exclude(pk=release.pk).filter(is_default=True).update(is_default=False)
        Release.objects.filter(pk=release.pk).update(is_default=True)
    release.is_default = True
    release_memo_forget()


def release_slug_unique(name: str, *, exclude: Release | None = None) -> str:
    """A slug for a release named ``name`` ("v1.1" -> "v1-1"), unused by any other release so far."""
    base = slugify(name.replace(".", "-"))[:90] or "release"
    others = Release.objects.exclude(pk=exclude.pk) if exclude is not None else Release.objects.all()
    slug, n = base, 2
    while others.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


def release_content_hash(*, release: Release) -> str:
    """The release's content hash from its papers' stored folder hashes (benchmark_core.hashing)."""
    return release_hash((rp.paper.paper_id, rp.content_hash) for rp in release.release_papers.select_related("paper"))
