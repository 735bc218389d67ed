"""docker-compose.yml runs the workers the way scripts/run.sh does: supervised, same queues and options.

Compose itself cannot run here (no compose plugin, no registry): these read the two files.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from scoring.management.commands.workers import Command as WorkersCommand

ROOT = Path(__file__).resolve().parent.parent


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _run_sh_workers() -> list[str]:
    """The arguments run.sh gives ``manage.py workers`` (its one line starting them)."""
    lines = [line for line in (ROOT / "scripts" / "run.sh").read_text().splitlines()
             if re.search(r"manage\.py workers\b", line) and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0].split(">>")[0])
    return words[words.index("workers") + 1:]


def test_compose_workers_are_the_supervised_workers_of_run_sh():
    services = _compose()["services"]
    command = services["worker"]["command"]
    assert command[:3] == ["python", "manage.py", "workers"]
    run_sh = _run_sh_workers()
    # the same options and queues; only the default count differs (run.sh 1, compose 2)
    assert [a if a != "$RCB_WORKERS" else "${RCB_WORKERS:-2}" for a in run_sh] == command[3:]
    options = WorkersCommand().create_parser("manage.py", "workers").parse_args(
        [a.replace("${RCB_WORKERS:-2}", "2") for a in command[3:]])
    assert options.count == 2 and options.queues == ["scoring", "contributions", "generation", "default"]
    # nothing runs a bare, unsupervised RQ worker
    assert not [name for name, s in services.items() if "rqworker" in " ".join(map(str, s.get("command") or []))]
    worker = services["worker"]
    assert worker["init"] is True and worker["restart"] == "unless-stopped" and "deploy" not in worker
