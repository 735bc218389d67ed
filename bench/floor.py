#!/usr/bin/env python3
"""The floor of one paper's runs: each test forked, one at a time, from a plain warm parent.

    python bench/floor.py PAPER_DIR < runs.jsonl > times.jsonl

The parent imports what the paper's files import (third-party and standard modules, never the
paper's own) once, with torch held to one thread as the published way's runs are not; then, for
each line of stdin (``{"files": {relpath: text}}``), it copies the paper folder, writes the files,
forks a child that runs ``paper2code_test.py`` as ``__main__`` in that copy, and waits for it. No
sandbox, no audit hook, no proof, no uid: what is left is the test's own work. stdout: first
``{"import_seconds": s}``, then one ``{"seconds": s, "exit_code": n, "cpu_seconds": c, "minor_faults":
f}`` per run, in order (``cpu_seconds``: the child's user + system time, from ``wait4``).

This is the bench's yardstick (bench/score_speed.py), measured in the same run as ours; it runs
only trusted code (the bench's own problem sets or the reference code of a published set).
"""
from __future__ import annotations

import json
import os
import runpy
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmark_core", "sandbox"))
import warm  # noqa: E402  (stdlib-only: the same import scan the runner uses)


def main() -> int:
    paper = os.path.abspath(sys.argv[1])
    started = time.perf_counter()
    for name in (warm.scan_imports(paper) + warm.scan_imports(paper, stdlib=True) + ["unittest"]
                 + warm.scan_submodules(paper)):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the test fails the same way in its run
            pass
    warm.import_testing()  # numpy.testing, torch.testing: imported ahead as our runner does
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    out = sys.stdout
    out.write(json.dumps({"import_seconds": round(time.perf_counter() - started, 4)}) + "\n")
    out.flush()
    work = tempfile.mkdtemp(prefix="rcb-floor-")
    try:
        for line in sys.stdin:
            request = json.loads(line)
            folder = os.path.join(work, "paper")
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(paper, folder, ignore=shutil.ignore_patterns("__pycache__"))
            for rel, text in request.get("files", {}).items():
                with open(os.path.join(folder, rel), "w", encoding="utf-8") as fh:
                    fh.write(text)
            begun = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, 1)
                    os.dup2(null, 2)
                    os.chdir(folder)
                    sys.path[0] = folder
                    sys.argv = ["paper2code_test.py"]
                    runpy.run_path("paper2code_test.py", run_name="__main__")
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                except BaseException:  # noqa: BLE001
                    code = 1
                os._exit(code)
            _pid, status, usage = os.wait4(pid, 0)
            seconds = time.perf_counter() - begun
            out.write(json.dumps({"seconds": round(seconds, 4), "exit_code": os.waitstatus_to_exitcode(status),
                                  "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 4),
                                  "minor_faults": usage.ru_minflt}) + "\n")
            out.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
