"""Apply a unified diff (as ``diff -u`` or ``git diff`` write it) to one file's text, strictly.

No fuzz and no offsets: every hunk must match the file at the lines it names, and the patch may
touch that one file only (a second file, a created or deleted file, an absolute path or one with
``..`` is refused). Used for answers given as a patch against a masked file.
"""
from __future__ import annotations

import re

from .masking import text_lines

__all__ = ["PatchError", "apply_unified_diff"]

_HUNK = re.compile(r"^@@ -(?P<a>\d+)(?:,(?P<b>\d+))? \+(?P<c>\d+)(?:,(?P<d>\d+))? @@")
#: header lines git writes between ``diff --git`` and ``---`` (ignored; paths come from ---/+++)
_GIT_HEADERS = ("index ", "old mode ", "new mode ", "similarity index ", "dissimilarity index ")


class PatchError(ValueError):
    """A patch that cannot be applied to the file: why, in one sentence."""


def _header_path(line: str, prefix: str) -> str:
    """The path of a ``---``/``+++`` line without its timestamp and its ``a/``/``b/`` prefix."""
    path = line[4:].split("\t", 1)[0].strip()
    if path.startswith('"') and path.endswith('"') and len(path) > 1:
        path = path[1:-1]
    return path[2:] if path.startswith(prefix) else path


def _path_check(path: str, file: str) -> None:
    if path == "/dev/null":
        raise PatchError(f"the patch creates or deletes a file; it may only change {file}")
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", path):
        raise PatchError(f"the patch names a path outside the paper ({path[:200]!r}); it may only change {file}")
    if path != file and not path.endswith("/" + file):
        raise PatchError(f"the patch changes {path[:200]!r}; it may only change {file}")


def _hunks(patch: str, file: str) -> list[tuple[int, list[str], list[str]]]:
    """(first old line, old lines, new lines) of each hunk, the file names checked."""
    lines = text_lines(patch)
    hunks: list[tuple[int, list[str], list[str]]] = []
    sections = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git ") or line.startswith("--- "):
            if line.startswith("diff --git "):
                i += 1
                while i < len(lines) and lines[i].startswith(_GIT_HEADERS):
                    i += 1
                if i < len(lines) and lines[i].startswith(("new file mode", "deleted file mode", "rename ", "copy ")):
                    raise PatchError(f"the patch creates, deletes, renames or copies a file; it may only change {file}")
                if i < len(lines) and lines[i].startswith("Binary files"):
                    raise PatchError("the patch holds a binary change")
                if i >= len(lines) or not lines[i].startswith("--- "):
                    continue
            if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
                raise PatchError(f"patch line {i + 1}: a '---' line must be followed by a '+++' line")
            sections += 1
            if sections > 1:
                raise PatchError(f"the patch has a second file section (patch line {i + 1}); it may only change {file}")
            _path_check(_header_path(lines[i], "a/"), file)
            _path_check(_header_path(lines[i + 1], "b/"), file)
            i += 2
            continue
        match = _HUNK.match(line)
        if match is None:
            if hunks:
                raise PatchError(f"patch line {i + 1} is neither a hunk line nor a header: {line[:120]!r}")
            i += 1  # text before the first header (a commit message, a description) is not part of it
            continue
        start = int(match["a"])
        old_count = int(match["b"]) if match["b"] is not None else 1
        new_count = int(match["d"]) if match["d"] is not None else 1
        old: list[str] = []
        new: list[str] = []
        i += 1
        while i < len(lines) and (len(old) < old_count or len(new) < new_count):
            body = lines[i]
            tag, text = (body[:1], body[1:]) if body else (" ", "")  # an empty line: context stripped of its space
            if tag == " ":
                old.append(text)
                new.append(text)
            elif tag == "-":
                old.append(text)
            elif tag == "+":
                new.append(text)
            elif tag != "\\":  # "\ No newline at end of file": final newlines are normalised anyway
                raise PatchError(f"patch line {i + 1} is not part of hunk {len(hunks) + 1}: {body[:120]!r}")
            i += 1
        while i < len(lines) and lines[i].startswith("\\"):
            i += 1
        if len(old) != old_count or len(new) != new_count:
            raise PatchError(f"hunk {len(hunks) + 1} (patch line {line[:60]!r}) is cut short: it announces "
                             f"{old_count} old and {new_count} new lines")
        hunks.append((start, old, new))
    if not hunks:
        raise PatchError("the patch holds no hunk ('@@ -l,s +l,s @@')")
    return hunks


def apply_unified_diff(original: str, patch: str, *, file: str) -> str:
    """``original`` (the text of ``file``) with ``patch`` applied; PatchError says why it cannot be."""
    source = text_lines(original)
    out: list[str] = []
    done = 0  # lines of the source already copied or replaced
    for number, (start, old, new) in enumerate(_hunks(patch, file), start=1):
        begin = start - 1 if old else start  # "-l,0" inserts after line l
        if begin < done:
            raise PatchError(f"hunk {number} starts at line {start}, before the end of the previous hunk")
        for offset, expected in enumerate(old):
            at = begin + offset
            if at >= len(source):
                raise PatchError(f"hunk {number} does not apply: the file has {len(source)} lines, the hunk "
                                 f"expects line {at + 1} to be {expected[:120]!r}")
            if source[at] != expected:
                raise PatchError(f"hunk {number} does not apply: line {at + 1} of {file} is {source[at][:120]!r}, "
                                 f"the hunk expects {expected[:120]!r}")
        out.extend(source[done:begin])
        out.extend(new)
        done = begin + len(old)
    out.extend(source[done:])
    return "\n".join(out) + "\n"
