"""Releases: which one is the default, new releases' slugs, the content hash of a release.

Drafts of the next release and publishing them with baselines belong to contributions
(contributions.release_services), which calls these.
"""
from __future__ import annotations

from django.db import transaction
from django.utils.text import slugify

from benchmark_core.hashing import release_hash

from .aggregates import release_memo_forget, release_touch
from .models import Release

__all__ = ["release_content_hash", "release_set_default", "release_slug_unique", "release_held_out_set",
           "ReleaseVisibilityError"]


class ReleaseVisibilityError(ValueError):
    """A change of a release's visibility that is not allowed (what was public stays public)."""


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


def release_held_out_set(*, release: Release, held_out: bool, force: bool = False) -> str:
    """Hold a release out, or make a held-out release public; returns what changes, in words.

    Holding out is for a release whose tasks were never served: a draft. A published one only with
    ``force`` (what was downloaded before cannot be taken back). Opening a held-out release makes its
    tasks download, its reference code, masked files and paper files public, and lets uploads in.
    """
    if release.held_out == held_out:
        return f"release {release.name} is already {'held out' if held_out else 'public'}; nothing changed"
    if held_out and release.frozen and not force:
        raise ReleaseVisibilityError(
            f"release {release.name} is published: its tasks and code may have been served already, so holding it "
            "out now hides nothing that was fetched (use --force if it was never announced)")
    Release.objects.filter(pk=release.pk).update(held_out=held_out)
    release.held_out = held_out
    release_touch(release_id=release.pk)  # its pages show, or stop showing, the code
    release_memo_forget()
    if held_out:
        return (f"release {release.name} is held out: its tasks download, reference code, masked files and paper "
                "files are served to staff only; uploads of predictions are refused; only evaluations run here are "
                "scored and shown")
    return (f"release {release.name} is public: its tasks download, reference code, masked files and paper files are "
            "served to everyone, and predictions may be uploaded to it")
