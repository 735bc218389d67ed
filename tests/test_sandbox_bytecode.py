"""The warm runner's rooms from the host's bytecode (sandbox/bytecode.py, warm/__main__.py): used
when its hash is the room's source's and its code names that source, ignored otherwise; bound into
bwrap and copied into docker beside the runner, where the runs go on as before."""
from __future__ import annotations

import importlib.util
import marshal
import shutil
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from benchmark_core.sandbox.bytecode import BYTECODE_FOLDER, runner_bytecode, runner_bytecode_dir
from benchmark_core.sandbox.warm.__main__ import _CHECKED_HASH
from benchmark_core.sandbox.warm_client import WARM_SCRIPT

TAG = sys.implementation.cache_tag

#: loads the runner folder given as argv[1] as the sandbox does (its __main__.py), then prints how
#: each of two rooms was loaded and the marker a planted .pyc may have set
_PROBE = """
import runpy, sys
folder = sys.argv[1]
sys.path[0] = folder
package = runpy.run_path(folder + "/__main__.py", run_name="probe")["_package"]()
common = sys.modules["_rcb_warm.common"]
print(type(common.__spec__.loader).__name__, getattr(common, "PLANTED", "-"),
      common.split_lines.__code__.co_filename == folder + "/common.py",
      sys.modules["_rcb_warm.server"].Server.serve.__code__.co_filename)
"""


def _runner_copy(tmp_path: Path) -> Path:
    """The runner as a sandbox holds it: ``<root>/warm.py`` (a folder), no bytecode of its own."""
    root = tmp_path / "rcb"
    shutil.copytree(WARM_SCRIPT, root / "warm.py", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "warm.py"


def _probe(folder: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(folder)], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _pyc(source: bytes, code, *, hash_of: bytes | None = None) -> bytes:
    return (importlib.util.MAGIC_NUMBER + _CHECKED_HASH.to_bytes(4, "little")
            + importlib.util.source_hash(source if hash_of is None else hash_of) + marshal.dumps(code))


def _planted(folder: Path, **kw) -> bytes:
    """A .pyc of common.py whose code also sets ``PLANTED``: seen only if the runner took it."""
    source = (folder / "common.py").read_bytes()
    code = compile(source + b"\nPLANTED = 'yes'\n", kw.pop("filename", str(folder / "common.py")), "exec",
                   dont_inherit=True)
    return _pyc(source, code, **kw)


def test_the_runner_takes_its_rooms_from_the_hosts_bytecode(tmp_path):
    folder = _runner_copy(tmp_path)
    assert _probe(folder)[:2] == ["SourceFileLoader", "-"]  # no folder: compiled from source, as before
    pyc = folder.parent / BYTECODE_FOLDER
    pyc.mkdir()
    files = runner_bytecode(str(folder))
    rooms = {p.stem for p in WARM_SCRIPT.glob("*.py")} - {"__main__"}
    assert set(files) == {f"{room}.{TAG}.pyc" for room in rooms}
    for name, data in files.items():
        (pyc / name).write_bytes(data)
    loader, planted, named, server_file = _probe(folder)
    assert (loader, planted, named, server_file) == ("_RoomLoader", "-", "True", str(folder / "server.py"))
    # the one planted below is taken: the runner reads the bytecode, not the source
    (pyc / f"common.{TAG}.pyc").write_bytes(_planted(folder))
    assert _probe(folder)[1] == "yes"


@pytest.mark.parametrize("case", ["source changed", "another source's hash", "another path", "not a pyc", "truncated"])
def test_bytecode_that_does_not_match_its_room_is_ignored(tmp_path, case):
    folder = _runner_copy(tmp_path)
    pyc = folder.parent / BYTECODE_FOLDER
    pyc.mkdir()
    target = pyc / f"common.{TAG}.pyc"
    if case == "source changed":
        target.write_bytes(_planted(folder))
        with (folder / "common.py").open("a") as fh:
            fh.write("\n# edited after the bytecode was made\n")
    elif case == "another source's hash":
        target.write_bytes(_planted(folder, hash_of=b"x = 1\n"))
    elif case == "another path":
        target.write_bytes(_planted(folder, filename="/elsewhere/common.py"))
    elif case == "not a pyc":
        target.write_bytes(b"\x00" * 64)
    else:
        target.write_bytes(_planted(folder)[:40])
    loader, planted, named, _server = _probe(folder)
    assert (loader, planted, named) == ("_RoomLoader", "-", "True")  # the source's code, as without it


def test_the_bytecode_folder_is_made_once_per_source_and_read_only_to_others(tmp_path, monkeypatch):
    monkeypatch.setenv("RCB_BYTECODE_DIR", str(tmp_path / "cache"))
    first = runner_bytecode_dir("/rcb/warm.py")
    assert first is not None and first.parent == tmp_path / "cache"
    assert runner_bytecode_dir("/rcb/warm.py") == first  # found again, not rebuilt
    assert {p.name for p in first.iterdir()} == set(runner_bytecode("/rcb/warm.py"))
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in first.iterdir()) and first.stat().st_mode & 0o777 == 0o755
    # another path inside (or another source) is another folder; no half-built folder is left behind
    other = runner_bytecode_dir("/elsewhere/warm.py")
    assert other is not None and other != first
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([first.name, other.name])
    # a cache that cannot be written: no folder, the runner compiles its rooms as before
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("RCB_BYTECODE_DIR", str(blocked / "cache"))
    assert runner_bytecode_dir("/rcb/warm.py") is None


def test_bwrap_binds_the_bytecode_and_docker_copies_it(tmp_path, monkeypatch):
    from benchmark_core.sandbox.base import PaperSpec
    from benchmark_core.sandbox.bwrap import BwrapSandbox, bwrap_available
    from benchmark_core.sandbox.docker_transport import files_archive

    monkeypatch.setenv("RCB_BYTECODE_DIR", str(tmp_path / "cache"))
    with tarfile.open(fileobj=io.BytesIO(files_archive()), mode="r") as tar:
        members = {m.name: m for m in tar.getmembers()}
        for name, data in runner_bytecode("/rcb/warm.py").items():
            member = members[f"{BYTECODE_FOLDER}/{name}"]
            assert (member.uid, member.mode, tar.extractfile(member).read()) == (0, 0o644, data)
    problem = bwrap_available()
    if problem:
        pytest.fail(f"bwrap must work here (scripts/test.sh installs bubblewrap): {problem}")
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "paper2code_test.py").write_text("print('ok')\n")
    args = BwrapSandbox(python=sys.executable).command(PaperSpec(id="p", folder=paper))
    at = args.index(f"/rcb/{BYTECODE_FOLDER}")
    assert args[at - 2] == "--ro-bind" and Path(args[at - 1]) == runner_bytecode_dir("/rcb/warm.py")
