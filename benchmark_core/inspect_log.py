"""``inspect-log``: an Inspect AI log of ``inspect_task.py`` -> this Hub's predictions file and run card.

Each sample (and epoch) becomes a prediction line with the model's raw answer as ``completion``,
the epoch as ``sample`` (epoch 1 is sample 0), the stop reason and the tokens; the run card is
``generate``'s (``card_build``), filled from the log: model, endpoint host, decoding, epochs,
prompt version, with/without paper, the problem set's hash, tokens and wall time. Both are what
``submit`` sends. Needs the optional ``inspect-ai`` package.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .generate import GenerateOptions, GenTask, _card_write, card_build, card_path
from .masking import PROMPT_VERSION

__all__ = ["InspectLogError", "inspect_log_convert", "add_inspect_log_parser", "cmd_inspect_log"]


class InspectLogError(ValueError):
    """A log this command cannot turn into predictions: why."""


def _text(value: Any) -> str:
    """A sample's input as the prompt text (a string, or the last user message's text)."""
    if isinstance(value, str):
        return value
    for message in reversed(value or []):
        if getattr(message, "role", "") == "user":
            return str(getattr(message, "text", "") or "")
    return ""


def inspect_log_convert(log_path: str | Path) -> tuple[list[dict], dict]:
    """(prediction lines, run card) of an Inspect log of this project's task."""
    from inspect_ai import __version__ as inspect_version
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(log_path))
    except (OSError, ValueError) as exc:
        raise InspectLogError(f"cannot read the Inspect log {log_path}: {exc}") from None
    spec = log.eval
    meta = spec.metadata or {}
    if meta.get("benchmark") != "ResearchCodeBench":
        raise InspectLogError(f"{log_path} is a log of task {spec.task!r}, not of benchmark_core/inspect_task.py")
    if not log.samples:
        raise InspectLogError(f"{log_path} holds no sample (status {log.status})")
    rows: list[dict] = []
    tasks: dict[tuple[str, str, str], GenTask] = {}
    failed: list[dict] = []
    for sample in log.samples:
        info = sample.metadata or {}
        key = (str(info.get("paper")), str(info.get("file") or ""), str(info.get("snippet")))
        tasks.setdefault(key, GenTask(*key, _text(sample.input), str(info.get("prompt_version") or PROMPT_VERSION)))
        if sample.error is not None or sample.output is None:
            failed.append({"paper": key[0], "file": key[1], "snippet": key[2], "samples": [sample.epoch - 1],
                           "error": (sample.error.message if sample.error else "no output")[:300]})
            continue
        usage = sample.output.usage
        rows.append({
            "paper": key[0], "file": key[1], "snippet": key[2], "sample": sample.epoch - 1,
            "completion": sample.output.completion,
            "finish_reason": sample.output.stop_reason,
            "usage": {"prompt_tokens": usage.input_tokens, "completion_tokens": usage.output_tokens,
                      "total_tokens": usage.total_tokens} if usage else {},
            "request": f"{sample.uuid or sample.id}#{sample.epoch}",
            "seconds": sample.total_time,
        })
    config = spec.model_generate_config
    options = GenerateOptions(
        base_url=spec.model_base_url or "", model=spec.model, samples=int(spec.config.epochs or 1),
        temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens, seed=config.seed,
        with_paper=bool(meta.get("with_paper", True)),
    )
    stats = log.stats
    wall = 0.0
    if stats.started_at and stats.completed_at:
        from datetime import datetime

        wall = (datetime.fromisoformat(stats.completed_at) - datetime.fromisoformat(stats.started_at)).total_seconds()
    run = {"started_at": stats.started_at, "seconds": round(wall, 2), "answers": len(rows), "errors": {},
           "inspect_log": Path(log_path).name, "inspect_status": log.status}
    card = card_build(rows=rows, tasks=list(tasks.values()), options=options, source=meta.get("source") or {},
                      runs=[run], failed=failed)
    usage_all = list((stats.model_usage or {}).values())
    card["tokens"] = {"input": sum(u.input_tokens for u in usage_all), "output": sum(u.output_tokens for u in usage_all)}
    card["protocol"] = f"inspect-ai ({spec.model.split('/', 1)[0]})"
    card["generator"] = f"inspect_ai {inspect_version}, benchmark_core {__version__}"
    if log.results is not None:
        card["inspect_metrics"] = {f"{s.name}/{name}": m.value for s in log.results.scores for name, m in s.metrics.items()}
    return rows, card


def add_inspect_log_parser(sub: Any) -> None:
    p = sub.add_parser("inspect-log", help="turn an Inspect AI log of inspect_task.py into predictions and a run card")
    p.add_argument("log", metavar="LOG", help="the Inspect log (.eval or .json)")
    p.add_argument("-o", "--output", required=True,
                   help="predictions.jsonl to write; the run card goes beside it (NAME.card.json)")


def cmd_inspect_log(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        rows, card = inspect_log_convert(args.log)
    except ImportError:
        print("error: reading Inspect logs needs the inspect-ai package (pip install inspect-ai)", file=err)
        return 1
    except InspectLogError as exc:
        print(f"error: {exc}", file=err)
        return 1
    output = Path(args.output)
    output.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    _card_write(card_path(output), card)
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in (card.get("inspect_metrics") or {}).items())
    print(f"wrote {len(rows)} predictions to {output} and the run card {card_path(output)}"
          + (f" (the log's {metrics})" if metrics else ""), file=out)
    if card["failed"]:
        print(f"{len(card['failed'])} sample(s) of the log had no answer (listed in the run card's 'failed')", file=err)
    return 0
