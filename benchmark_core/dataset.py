"""The tasks as a dataset: one Parquet row per snippet and a dataset card the Hugging Face hub reads.

A row holds the snippet's ids, its weight and environment, the prompt with and without the paper
(exactly ``tasks``' prompts) and the masked file; never the reference code. ``pyarrow`` writes it,
so ``datasets.load_dataset("parquet", data_files=...)`` and ``pyarrow.parquet.read_table`` read it.
"""
from __future__ import annotations

import io
import json
from typing import Any, Iterable

from .annotation import Snippet
from .masking import PROMPT_VERSION, task_record
from .problemset import Paper
from .runner import environment_name

__all__ = ["COLUMNS", "dataset_rows", "tasks_parquet", "dataset_card"]

#: the columns, in order, with their Arrow type and what they hold (the card lists them)
COLUMNS: list[tuple[str, str, str]] = [
    ("paper", "string", "paper id"),
    ("file", "string", "the annotated file, relative to the paper's folder"),
    ("snippet", "string", "snippet name, unique within its file"),
    ("parent", "string", "the enclosing snippet's name (null at the top level)"),
    ("depth", "int32", "nesting depth (0 at the top level)"),
    ("weight", "int32", "code lines of the reference body: the snippet's weight in the scaled pass rate"),
    ("environment", "string", "the named environment the paper's test runs in"),
    ("prompt_version", "string", "version of the prompt text"),
    ("prompt", "string", "the prompt with the paper's text (`tasks`)"),
    ("prompt_without_paper", "string", "the prompt without it (`tasks --without-paper`)"),
    ("masked_file", "string", "the file with the snippet replaced by TODO lines and every tag removed"),
]


def dataset_rows(snippets: Iterable[tuple[Paper, Snippet]]) -> list[dict[str, Any]]:
    """One row per snippet, from the same records ``tasks`` writes (with and without the paper)."""
    rows = []
    for paper, snip in snippets:
        record = task_record(paper, snip, with_paper=True)
        rows.append({
            "paper": record["paper"], "file": record["file"], "snippet": record["snippet"],
            "parent": record["parent"], "depth": record["depth"], "weight": record["weight"],
            "environment": environment_name(paper), "prompt_version": record["prompt_version"],
            "prompt": record["prompt"],
            "prompt_without_paper": task_record(paper, snip, with_paper=False)["prompt"],
            "masked_file": record["masked_file"],
        })
    return rows


def tasks_parquet(rows: list[dict[str, Any]]) -> bytes:
    """The rows as a Parquet file (zstd-compressed), columns in ``COLUMNS``' order and types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind, _ in COLUMNS])
    table = pa.Table.from_pylist(rows, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _yaml_text(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML scalar


def dataset_card(*, title: str, data_file: str, rows: list[dict[str, Any]], source: str = "") -> str:
    """The dataset card (README.md) of a Parquet tasks file: the hub's YAML header, then what it holds."""
    papers = sorted({row["paper"] for row in rows})
    size = "n<1K" if len(rows) < 1000 else "1K<n<10K" if len(rows) < 10000 else "10K<n<100K"
    arrow_to_hf = {"string": "string", "int32": "int32"}
    features = "\n".join(f"  - name: {name}\n    dtype: {arrow_to_hf[kind]}" for name, kind, _ in COLUMNS)
    columns = "\n".join(f"| `{name}` | {kind} | {meaning} |" for name, kind, meaning in COLUMNS)
    header = f"""---
pretty_name: {_yaml_text(title)}
language:
- en
license: other
task_categories:
- text-generation
tags:
- code
- machine-learning-research
- researchcodebench
size_categories:
- {size}
configs:
- config_name: default
  data_files:
  - split: test
    path: {_yaml_text(data_file)}
dataset_info:
  features:
{features}
  splits:
  - name: test
    num_examples: {len(rows)}
---
"""
    return header + f"""
# {title}

ResearchCodeBench tasks: implement one masked block ("snippet") of a machine-learning paper's
official code. {len(rows)} snippets of {len(papers)} papers ({", ".join(papers)}){f"; {source}" if source else ""}.
Prompt version `{PROMPT_VERSION}`. The reference code is not included: answers are scored by running
each paper's own test in a sandbox, with `python -m benchmark_core score` or by submitting them to
a ResearchCodeBench Hub (JSON lines of `{{"paper", "file", "snippet", "completion"}}`). The headline
metric is the scaled pass rate: passed snippets weighted by `weight`.

```python
from datasets import load_dataset
tasks = load_dataset("parquet", data_files={_yaml_text(data_file)}, split="train")
```

| column | type | meaning |
| --- | --- | --- |
{columns}

License: each paper's code keeps its own repository's license; see the papers' metadata.
"""
