"""The warm runner's own defences, without a sandbox: cleanup that cannot recurse, the reading of
the proof pipe (MAC'd lines only), and the seccomp program bwrap loads."""
from __future__ import annotations

import os
import struct

from benchmark_core.sandbox import warm
from benchmark_core.sandbox.bwrap import seccomp_program


def test_remove_tree_survives_a_deep_unreadable_chain_and_keeps_link_targets(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    root = tmp_path / "run"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=fd)
        os.symlink(str(outside), "link", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    os.chmod(root / "d", 0)  # unreadable on the way down
    warm.remove_tree(str(root))
    assert not root.exists()
    assert outside.read_text() == "keep me"
    warm.remove_tree(str(outside))  # a plain file goes too
    assert not outside.exists()


def _line(key: bytes, body: str) -> bytes:
    data = body.encode()
    return data + b"\t" + warm.proof_mac(key, data) + b"\n"


def test_proof_read_keeps_only_authenticated_lines():
    key = os.urandom(32)
    paper = "/rcb/runs/r1/paper"
    data = (b"K " + key.hex().encode() + b"\n" + _line(key, "T\tstart") + _line(key, "T\tstart")
            + b"T\tstart\tdeadbeef\n"  # a completion's try: no valid MAC
            + _line(key, f"E\tgc.get_objects\t\t{paper}/solution.py\tP")
            + _line(key, "F\t1\t0\t99")  # a forked copy's final line
            + _line(key, "F\t1\t0\t42"))
    out = warm.proof_read(data, paper_dir=paper, test_script="paper2code_test.py", runner="/rcb/warm.py", pid=42)
    assert out["tests_run"] == 2 and out["completed"] is True and out["authentic"] is True
    assert out["forged"] == 2
    assert out["events"] == [{"event": "gc.get_objects", "detail": "", "caller": "paper", "paper": True,
                              "importing": False, "count": 1}]
    # no key first: nothing counts
    assert warm.proof_read(_line(key, "F\t1\t0\t42"), paper_dir=paper, test_script="t.py", runner="r",
                           pid=42)["authentic"] is False


def test_seccomp_program_refuses_new_user_namespaces():
    program = seccomp_program("x86_64")
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    assert (0x15, 4, 0, 272) in insns  # unshare -> the flags check
    assert (0x45, 1, 0, 0x10000000) in insns  # CLONE_NEWUSER -> EPERM
    assert insns[-1] == (0x06, 0, 0, 0x00050000 | 38)  # clone3 -> ENOSYS
    assert seccomp_program("sparc") is None
