"""Folders the host makes once for its sandboxes and keeps between processes (an environment's home
skeleton, ``skel``; the runner's bytecode, ``bytecode``): where they live, and how one is written so
that no worker ever sees half of one."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["cache_root", "folder_once"]


def cache_root(variable: str, name: str) -> Path:
    """The folder named by the environment variable ``variable``, else ``~/.cache/rcb-hub/<name>``
    (``XDG_CACHE_HOME`` when set)."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rcb-hub" / name


def folder_once(root: Path, key: str, fill: Callable[[Path], bool]) -> Path | None:
    """``root/key``, made now if missing: ``fill`` writes a new folder under ``root`` (False: it
    failed), which is made readable by any uid (folders 0755, files 0644) and renamed to ``key``
    (atomic; another worker may have been first). None when it cannot be made."""
    final = root / key
    if final.is_dir():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    except OSError:
        return None
    try:
        if not fill(building):
            return None
        for path in [building, *building.rglob("*")]:  # read by a sandbox's runner of any uid
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            building.rename(final)
        except OSError:
            pass
        return final if final.is_dir() else None
    except OSError:
        return None
    finally:
        shutil.rmtree(building, ignore_errors=True)
