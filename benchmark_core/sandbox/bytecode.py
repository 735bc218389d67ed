"""The warm runner's bytecode, compiled once on the host for the sandboxes.

A sandbox writes no bytecode (``PYTHONDONTWRITEBYTECODE``, the runner's folder bound read-only or
copied in), so every warm parent, and every run of a paper that needs a fresh interpreter, compiled
the runner's rooms from source: 0.05-0.2 s of CPU each time, on the path where the parent imports and
a core waits for it. The host compiles them once instead, for the interpreter tag it runs
(``sys.implementation.cache_tag``: an interpreter of another version ignores them), as hash-based
``.pyc`` files (PEP 552) whose code names the room's path inside the sandbox. The backends put them
beside the runner as ``/rcb/warm-pyc`` (bwrap binds ``runner_bytecode_dir``, read-only; docker copies
``runner_bytecode`` into the container with the runner, owned by root), and the runner's
``__main__.py`` takes a room's code from there only when the hash in it is its source's there.

Nothing here changes what runs: without the folder (it cannot be written, another interpreter) the
rooms are compiled from source as before. The folder is keyed by the rooms' sources, the tag and the
path inside, under ``RCB_BYTECODE_DIR`` (default ``~/.cache/rcb-hub/runner-bytecode``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import marshal
import sys
import threading
from pathlib import Path

from .hostcache import cache_root, folder_once
from .warm.__main__ import _CHECKED_HASH, BYTECODE_FOLDER
from .warm_client import WARM_SCRIPT

__all__ = ["BYTECODE_FOLDER", "runner_bytecode", "runner_bytecode_dir"]

_LOCK = threading.Lock()
#: (inside, the sources' sizes and times) -> (key, {file name: .pyc bytes})
_MADE: dict[tuple, tuple[str, dict[str, bytes]]] = {}


def _rooms() -> list[Path]:
    return sorted(p for p in WARM_SCRIPT.glob("*.py") if p.name != "__main__.py")


def _compiled(inside: str) -> tuple[str, dict[str, bytes]]:
    """(key, {``<room>.<tag>.pyc``: bytes}) of the rooms as the sandbox sees them at ``inside``."""
    rooms = _rooms()
    stats = [(p.name, p.stat()) for p in rooms]
    stamp = (inside, tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats))
    with _LOCK:
        made = _MADE.get(stamp)
    if made is not None:
        return made
    digest = hashlib.sha256(f"{sys.implementation.cache_tag}\0{inside}\0".encode())
    files = {}
    for path in rooms:
        source = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + source + b"\0")
        code = compile(source, f"{inside}/{path.name}", "exec", dont_inherit=True, optimize=0)
        header = importlib.util.MAGIC_NUMBER + _CHECKED_HASH.to_bytes(4, "little") + importlib.util.source_hash(source)
        files[f"{path.stem}.{sys.implementation.cache_tag}.pyc"] = header + marshal.dumps(code)
    made = (digest.hexdigest()[:20], files)
    with _LOCK:
        _MADE[stamp] = made
    return made


def runner_bytecode(inside: str) -> dict[str, bytes]:
    """The runner's rooms compiled for a sandbox that holds the runner at ``inside`` (``/rcb/warm.py``):
    ``{file name: .pyc bytes}``, for ``<inside's folder>/warm-pyc``; empty when they cannot be compiled."""
    try:
        return dict(_compiled(inside)[1])
    except (OSError, SyntaxError, ValueError):
        return {}


def runner_bytecode_dir(inside: str) -> Path | None:
    """A folder holding ``runner_bytecode(inside)``, written once under the cache (``RCB_BYTECODE_DIR``);
    None when it cannot be written (the runner then compiles its rooms, as before)."""
    try:
        key, files = _compiled(inside)
    except (OSError, SyntaxError, ValueError):
        return None

    def fill(building: Path) -> bool:
        for name, data in files.items():
            (building / name).write_bytes(data)
        return True

    return folder_once(cache_root("RCB_BYTECODE_DIR", "runner-bytecode"), key, fill)
