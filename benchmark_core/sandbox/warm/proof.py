"""The supervisor's reading of a run's proof pipe (the server's side: no paper code runs here)."""
from __future__ import annotations

import re

from .audit import COSTS_FIELDS, proof_mac
from .common import is_runner

#: names of ``M`` lines kept, at the most
MODULES_MAX = 4096


def proof_read(data: bytes, *, paper_dir: str, test_script: str, runner: str, pid: int,
               trusted: tuple[str, ...] = ()) -> dict:
    """The supervisor's reading of a run's proof pipe: what the authenticated lines say.

    Lines without a valid MAC (the completion's own writes) are counted as ``forged``; each event
    keeps its innermost caller outside the runner (``paper`` for any file that is not the
    interpreter's own library, the test script or the runner) and whether paper code was on the stack.
    """
    import hmac

    out: dict = {"completed": False, "tests_run": 0, "skipped": 0, "authentic": False, "forged": 0,
                 "events": [], "snapshots": {}, "overflow": False, "forged_sample": [], "modules": []}
    lines = data.split(b"\n")
    if not lines or not lines[0].startswith(b"K "):
        out["forged"] = int(bool(data.strip()))
        return out
    try:
        key = bytes.fromhex(lines[0][2:].decode())
    except ValueError:
        out["forged"] = 1
        return out
    role = _proof_role(paper_dir, test_script, runner, trusted)
    events: dict[tuple, dict] = {}
    finished = False
    for raw in lines[1:]:
        if not raw:
            continue
        body, _, mac = raw.rpartition(b"\t")
        if not body or not hmac.compare_digest(mac, proof_mac(key, body)):
            out["forged"] += 1
            if len(out["forged_sample"]) < 3:
                out["forged_sample"].append(raw[:200].decode("utf-8", "replace"))
            continue
        parts = body.decode("utf-8", "replace").split("\t")
        kind = parts[0]
        if finished:
            out["forged"] += 1  # nothing authentic follows the final line
        elif kind == "T":
            if parts[1:2] == ["start"]:
                out["tests_run"] += 1
            elif parts[1:2] == ["skip"]:
                out["skipped"] += 1
        elif kind == "M" and len(parts) == 2:
            if len(out["modules"]) < MODULES_MAX:  # the server's import learning takes them (learn.py)
                out["modules"] += parts[1].split(" ")[:MODULES_MAX - len(out["modules"])]
        elif kind == "C" and len(parts) == 8:
            out["costs"] = _proof_costs(parts[1:])
        elif kind == "S" and len(parts) == 3:
            out["snapshots"].setdefault(parts[1], parts[2])
        elif kind == "E" and len(parts) >= 3:
            event = _proof_event(parts, paper_dir, role)
            key_ = (event["event"], event["detail"], event["caller"], event["paper"], event["importing"])
            if key_ in events:
                events[key_]["count"] += 1
            elif len(events) < 500:
                events[key_] = {**event, "count": 1}
            else:
                out["overflow"] = True
        elif kind == "F" and len(parts) == 4:
            if parts[3] != str(pid):
                out["forged"] += 1  # a forked copy of the run reached the end of the test
                continue
            out["completed"] = parts[1] == "1"
            out["authentic"] = True
            finished = True
    out["events"] = list(events.values())
    return out


def _proof_costs(fields: list[str]) -> dict:
    """The ``C`` line: what the run's detections cost it (``audit.COSTS_FIELDS``), figures for the bench
    only (the run's own process counted them: no verdict reads them)."""
    costs: dict = {}
    for name, text in zip(COSTS_FIELDS, fields):
        try:
            value = float(text)
        except ValueError:
            continue
        if 0 <= value < 1e9:
            costs[name] = int(value) if name in ("events", "checkpoints") else round(value, 6)
    return costs


def _proof_role(paper_dir: str, test_script: str, runner: str, trusted: tuple[str, ...]):
    """``role(path)``: who a stack's file is (the runner's own files, the test script, the standard
    library, a library by its site-packages folder, or ``paper`` for anything else)."""
    roots = tuple(r.rstrip("/") + "/" for r in trusted if r)
    prefix = paper_dir.rstrip("/") + "/"

    def role(path: str) -> str:
        if is_runner(path, runner):
            return "runner"
        if path == prefix + test_script:
            return "test"
        if path.startswith("<frozen "):
            return "std:" + path[8:-1]
        if "/site-packages/" in path and path.startswith(roots):
            return "lib:" + path.split("site-packages/", 1)[1].split("/", 1)[0]
        if path.startswith(roots):
            rest = path.rsplit("/", 2)
            return "std:" + (rest[-2] + "/" + rest[-1] if rest[-1] == "__init__.py" else rest[-1])
        return "paper"  # the paper's files, and anything a run wrote and imported or compiled

    return role


def _proof_event(parts: list[str], paper_dir: str, role) -> dict:
    """One ``E`` line's event: its detail with the run's own paths made generic, its caller's role."""
    detail = re.sub(r"/proc/\d+", "/proc/N", parts[2]).replace(paper_dir, "PAPER")
    caller = parts[3] if len(parts) > 3 else ""
    origin = parts[4] if len(parts) > 4 else ""
    return {"event": parts[1], "detail": detail, "caller": role(caller) if caller and caller != "?" else "?",
            "paper": "P" in origin, "importing": "I" in origin}
