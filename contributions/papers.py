"""A contribution as a paper of a problem set: its papers.yaml entry and a copy of its folder.

Used by the checks (contributions.services) and by the release draft (release_services) alike,
so neither borrows the other's private helpers.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from .models import ContributionRevision, PaperContribution

__all__ = ["REQUIREMENTS_FILE", "contribution_media_root", "contribution_entry", "contribution_pset_materialize",
           "contribution_pset_write"]

#: the requirements the form asked for, written next to the paper's code
REQUIREMENTS_FILE = "paper2code_requirements.txt"


def contribution_media_root() -> Path:
    """Where uploads are stored (MEDIA_ROOT); a revision's folder is relative to it."""
    return Path(settings.MEDIA_ROOT)


def contribution_entry(contribution: PaperContribution) -> dict[str, Any]:
    """The paper's papers.yaml entry, in the published layout."""
    return {
        "id": contribution.paper_id,
        "title": contribution.title,
        "venue": contribution.venue or None,
        "arxiv_abs": contribution.arxiv_url or None,
        "github_url": contribution.code_url or None,
        "first_commit_date": contribution.first_commit_date.isoformat() if contribution.first_commit_date else None,
        "annotated_file_paths": list(contribution.annotated_files) or None,
        "context_file_paths": list(contribution.context_files) or None,
    }


def contribution_pset_materialize(*, contribution: PaperContribution, revision: ContributionRevision, dest: Path) -> Path:
    """Copy the revision's folder to ``dest`` (a new folder), adding the form's requirements; return it."""
    source = contribution_media_root() / revision.folder
    shutil.copytree(source, dest, symlinks=False)
    if contribution.requirements:
        (dest / REQUIREMENTS_FILE).write_text("\n".join(contribution.requirements) + "\n", encoding="utf-8")
    return dest


def contribution_pset_write(*, contribution: PaperContribution, revision: ContributionRevision, root: Path) -> Path:
    """A one-paper problem set at ``root``: the revision's folder and its papers.yaml entry; return root."""
    contribution_pset_materialize(contribution=contribution, revision=revision, dest=root / contribution.paper_id)
    (root / "papers.yaml").write_text(yaml.safe_dump([contribution_entry(contribution)], sort_keys=False),
                                      encoding="utf-8")
    return root
