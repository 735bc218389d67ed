"""A home skeleton per environment: what the environment's own imports write into a new home the
first time they run (matplotlib's font list, fontconfig's cache), made once by trusted code.

A user who runs ``python paper2code_test.py`` keeps their home between runs, so matplotlib builds its
font list once (0.1-0.3 s, ``fc-list`` included) and then reads it. Every home of ours is new: a warm
parent's (a fresh tmpfs), and each run of the ``local`` backend (the published way's runs in the
bench). Without a skeleton each of them rebuilt the list: time a user does not spend, added to our
start and to the published way's every run. With it, a warm parent copies the skeleton into its home
before its imports (runner option ``--skel``) and a local run's home starts as a copy of it.

Where the skeleton comes from:
- bwrap and local: ``skel_for(python)`` builds it on the host with the environment's interpreter in
  exactly a run's environment (``child_env`` with the skeleton as home), once per (interpreter,
  installed packages, system font folders), under ``RCB_SKEL_DIR`` (default
  ``~/.cache/rcb-hub/skel``). bwrap shows the same ``/usr`` and ``/etc/fonts`` as the host, and the
  interpreter's prefixes at the same paths, so the font list equals one built inside the sandbox.
- docker: the environment image's build runs the same code in the image (``IMAGE_SKEL``), so it lists
  the image's fonts.

Whatever goes wrong building it, there is no skeleton and the home is built as before (slower, never
different): matplotlib itself rebuilds a list that names a font file no longer there.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from .hostcache import cache_root, folder_once
from .process import child_env
from .warm import home_seed

__all__ = ["IMAGE_SKEL", "SKEL_CODE", "SKEL_FORMAT", "home_seed", "skel_for"]

#: bump when what a skeleton holds changes: old ones (and environment images) are not reused
SKEL_FORMAT = 1
#: what the environment imports to fill a new home: modules whose first import writes a cache there
_MODULES = ("matplotlib.font_manager",)
#: the code that fills a home: each module imported if the environment has it (stdlib + that module)
SKEL_CODE = (
    "import importlib\n"
    f"for name in {_MODULES!r}:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except Exception:\n"
    "        pass\n"
)
#: where an environment image holds its skeleton (docker_images.env_image_ensure)
IMAGE_SKEL = "/opt/rcb/skel"
#: the folders matplotlib and fontconfig read system fonts and their configuration from
_FONT_ROOTS = ("/usr/share/fonts", "/usr/local/share/fonts", "/usr/lib/X11/fonts", "/etc/fonts")


def _fonts_fingerprint() -> str:
    """Changes when a system font (or fontconfig's configuration) is added, removed or replaced: the
    folders' modification times (a folder's changes with what it holds) and the files' sizes."""
    seen = []
    for root in _FONT_ROOTS:
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            try:
                seen.append((folder, os.stat(folder).st_mtime_ns))
                seen += [(os.path.join(folder, f), os.stat(os.path.join(folder, f)).st_size) for f in sorted(files)]
            except OSError:
                continue
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:16]


def _root() -> Path:
    return cache_root("RCB_SKEL_DIR", "skel")


#: skeletons this process failed to build (by key and folder): not tried again at every parent's start
_FAILED: set[tuple[str, str]] = set()


def skel_for(python: str, packages: str, *, timeout: float = 60.0) -> Path | None:
    """The home skeleton of the environment of ``python`` (whose installed packages hash to
    ``packages``), built now when missing; None when it cannot be built (no skeleton: slower, same)."""
    key = hashlib.sha256(json.dumps([SKEL_FORMAT, os.path.realpath(python), packages, _fonts_fingerprint(),
                                     _MODULES]).encode()).hexdigest()[:20]
    root = _root()
    final = root / key
    if final.is_dir():
        return final
    if (key, str(root)) in _FAILED:
        return None
    made = _build(python, root, key, timeout)
    if made is None:
        _FAILED.add((key, str(root)))
    return made


def _build(python: str, root: Path, key: str, timeout: float) -> Path | None:
    """Fill a new folder under ``root`` as a run's first imports would fill its home, then rename it
    to ``key`` (or find another worker's there first); None when that fails."""

    def fill(building: Path) -> bool:
        try:
            proc = subprocess.run([python, "-I", "-c", SKEL_CODE], env=child_env(str(building)), cwd=str(building),
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.SubprocessError:
            return False
        return proc.returncode == 0

    return folder_once(root, key, fill)
