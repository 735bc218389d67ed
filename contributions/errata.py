"""Errata: the published successor of a release without some snippets, with a public changelog.

``release_errata`` makes a draft from the release, retires the named snippets (and those nested in
them) from its rows and its copy of the files, publishes it through ``release_services`` (so every
public result is re-scored or carried over, ``contributions.succession``) and rebases the drafts
that started from the old release. It sits above both modules; neither imports it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from benchmark_core.annotation import TAG_RE
from benchmark_core.hashing import folder_hash
from benchmark_core.problemset import ProblemSetError, load_problemset
from catalog.models import Release, ReleasePaper, Snippet

from .release_services import release_draft_create, release_publish, release_pset_write

__all__ = ["release_errata", "retire_targets_parse"]


def retire_targets_parse(*, release: Release, targets: list[str]) -> list[Snippet]:
    """'PAPER/SNIPPET' strings -> the snippets to retire with their descendants; every bad one is named."""
    wanted, problems = [], []
    for raw in targets:
        paper_id, sep, name = raw.strip().partition("/")
        if not sep or not paper_id or not name.strip():
            problems.append(f"{raw!r}: write PAPER/SNIPPET, e.g. rope/attention scores")
            continue
        found = list(Snippet.objects.filter(release=release, paper__paper_id=paper_id, name=name.strip()))
        if not found:
            known = ReleasePaper.objects.filter(release=release, paper__paper_id=paper_id).exists()
            problems.append(f"{raw!r}: no snippet {name.strip()!r} in paper {paper_id!r} of {release.name}"
                            if known else f"{raw!r}: no paper {paper_id!r} in {release.name}")
        wanted.extend(found)
    if problems:
        raise ValidationError(problems)
    if not wanted:
        raise ValidationError("name at least one snippet to retire (PAPER/SNIPPET)")
    by_parent: dict[int | None, list[Snippet]] = {}
    for s in Snippet.objects.filter(release=release, paper_id__in={w.paper_id for w in wanted}):
        by_parent.setdefault(s.parent_id, []).append(s)
    out: dict[int, Snippet] = {}
    stack = list(wanted)
    while stack:  # a retired snippet takes the snippets nested in it along
        s = stack.pop()
        if s.pk not in out:
            out[s.pk] = s
            stack.extend(by_parent.get(s.pk, []))
    return sorted(out.values(), key=lambda s: (s.paper_id, s.position))


def _untag(folder: Path, snippets: list[Snippet]) -> None:
    """Remove the tag lines of these snippets from the paper's files: the code stays, the task goes."""
    by_file: dict[str, set[str]] = {}
    for s in snippets:
        by_file.setdefault(s.file, set()).add(s.name)
    for file, names in by_file.items():
        path = folder / file
        text = path.read_text(encoding="utf-8")
        kept = [line for line in text.splitlines(keepends=True)
                if not ((m := TAG_RE.match(line.rstrip("\r\n"))) and m.group("name") in names)]
        path.write_text("".join(kept), encoding="utf-8")


def _retire_in(release: Release, snippets: list[Snippet]) -> None:
    """Drop the snippets from the draft ``release``: rows, tags in its files, paper counts."""
    for paper_id in sorted({s.paper_id for s in snippets}):
        rp = ReleasePaper.objects.select_related("paper").get(release=release, paper_id=paper_id)
        mine = [s for s in snippets if s.paper_id == paper_id]
        Snippet.objects.filter(pk__in=[s.pk for s in mine]).delete()
        remaining = Snippet.objects.filter(release=release, paper_id=paper_id)
        if rp.folder:
            folder = Path(rp.folder)
            _untag(folder, mine)
            try:
                core = load_problemset(folder.parent, papers=[folder.name]).paper(folder.name)
            except ProblemSetError as exc:
                raise ValidationError(f"{rp.paper.paper_id}: the paper does not load without those tags: {exc}")
            lines = {(s.file, s.name): (s.start_line, s.end_line, i) for i, s in enumerate(core.snippets)}
            rows = list(remaining)
            if {(r.file, r.name) for r in rows} != set(lines):
                raise ValidationError(f"{rp.paper.paper_id}: the files and the release's snippets disagree after "
                                      "retiring; nothing was changed")
            for r in rows:  # the tags are gone: later lines moved up
                r.start_line, r.end_line, r.position = lines[(r.file, r.name)]
            Snippet.objects.bulk_update(rows, ["start_line", "end_line", "position"])
            rp.snippet_count, rp.total_weight = len(core.snippets), core.total_weight
            rp.content_hash = folder_hash(folder)
            rp.archive = ""  # the files changed: stored again by content hash when jobs are made (scoring.paper_store)
        else:
            rp.snippet_count = remaining.count()
            rp.total_weight = sum(remaining.values_list("weight", flat=True))
        rp.save(update_fields=["snippet_count", "total_weight", "content_hash", "archive"])


def release_errata(*, release: Release, retire: list[str], reason: str, by: Any = None, name: str = "") -> Release:
    """Make and publish the successor of ``release`` without the named snippets; re-score everything.

    ``retire``: 'PAPER/SNIPPET' strings (nested snippets go too). The successor's public changelog
    records what was retired and why; it is the default release if ``release`` was.
    """
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError("say why (--reason): the changelog is public")
    if not release.frozen:
        raise ValidationError(f"release {release.name} is a draft: retire snippets by editing it, not by errata")
    snippets = retire_targets_parse(release=release, targets=retire)
    now = timezone.now()
    name = name or _errata_name(release)
    with transaction.atomic():
        draft = release_draft_create(source=release, name=name, by=by,
                                     description=f"Errata of {release.name}: {reason}")
        keys = {(s.paper.paper_id, s.file, s.name) for s in snippets}
        targets = [s for s in Snippet.objects.filter(release=draft).select_related("paper")
                   if (s.paper.paper_id, s.file, s.name) in keys]
        _retire_in(draft, targets)
        who = getattr(by, "username", "") or "maintainers"
        draft.changelog = list(release.changelog or []) + [
            {"at": now.isoformat(timespec="seconds"), "release": draft.slug, "kind": "retired",
             "paper": s.paper.paper_id, "file": s.file, "snippet": s.name, "reason": reason, "by": who}
            for s in snippets
        ]
        draft.save(update_fields=["changelog"])
        release_pset_write(release=draft)
        release_publish(release=draft, by=by, make_default=release.is_default)
        _open_drafts_rebase(old=release, new=draft, keys=keys)
    draft.refresh_from_db()
    return draft


def _open_drafts_rebase(*, old: Release, new: Release, keys: set[tuple[str, str, str]]) -> None:
    """A draft started from ``old`` now succeeds ``new``: the retired snippets leave it too."""
    for open_draft in Release.objects.filter(status=Release.DRAFT, predecessor=old):
        stale = [s for s in Snippet.objects.filter(release=open_draft).select_related("paper")
                 if (s.paper.paper_id, s.file, s.name) in keys]
        if stale:
            _retire_in(open_draft, stale)
        open_draft.predecessor = new
        open_draft.save(update_fields=["predecessor"])
        release_pset_write(release=open_draft)


def _errata_name(release: Release) -> str:
    base = re.sub(r"\s+\(errata \d+\)$", "", release.name)
    n = 1
    while Release.objects.filter(name=f"{base} (errata {n})").exists():
        n += 1
    return f"{base} (errata {n})"
