"""One folder hash and one release hash (benchmark_core.hashing) for the engine, the site and the run card."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmark_core.generate import problemset_hash
from benchmark_core.hashing import folder_hash, release_hash
from benchmark_core.problemset import load_problemset
from catalog.models import ReleasePaper
from leaderboard.importers.pset import pset_import

DEMO = Path(__file__).resolve().parent.parent / "demo"


def test_caches_do_not_change_the_hash_and_files_do(tmp_path):
    """Caches (__pycache__, .git, *.pyc, ...) are left out; a changed byte or a new file is not."""
    paper = shutil.copytree(DEMO / "lion", tmp_path / "lion")
    before = folder_hash(paper)
    (paper / "__pycache__").mkdir(exist_ok=True)
    (paper / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (paper / "stray.pyc").write_bytes(b"\1")
    (paper / ".git").mkdir()
    (paper / ".git" / "HEAD").write_text("ref: x\n")
    assert folder_hash(paper) == before
    (paper / "notes.txt").write_text("new\n")
    assert folder_hash(paper) != before
    assert release_hash([("a", "1"), ("b", "2")]) == release_hash([("b", "2"), ("a", "1")])


@pytest.mark.django_db
def test_site_copy_and_release_hash_match_the_engine(tmp_path, settings):
    """The stored copy hashes as the original folder does, and the release hash is the run card's."""
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    pset_dir = shutil.copytree(DEMO, tmp_path / "demo")
    (pset_dir / "lion" / "__pycache__").mkdir(exist_ok=True)
    (pset_dir / "lion" / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    result = pset_import(path=pset_dir, release_name="hash check")
    pset = load_problemset(pset_dir)
    for paper in pset.papers:
        rp = ReleasePaper.objects.get(release=result.release, paper__paper_id=paper.id)
        assert rp.content_hash == folder_hash(paper.folder) == folder_hash(rp.folder)
        assert not list(Path(rp.folder).rglob("*.pyc"))
    assert result.release.content_hash == problemset_hash(pset)
