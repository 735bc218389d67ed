"""Small, deterministic demo-like data for page tests: a release, papers, snippets, models, evaluations."""
from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field

from django.utils import timezone

from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog.aggregates import evaluation_aggregates_refresh

CATEGORIES = ("syntax", "name", "type", "logic", "timeout")

REFERENCE_FILE = '''import numpy as np


def scale(x, factor):
    # <paper2code name="scale input">
    y = np.asarray(x, dtype=float)
    # <paper2code name="multiply">
    y = y * factor
    # </paper2code name="multiply">
    # </paper2code name="scale input">
    return y
'''


@dataclass
class Demo:
    release: Release
    papers: list[Paper] = field(default_factory=list)
    snippets: list[Snippet] = field(default_factory=list)
    models: list[LLMModel] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)


def _paper(index: int, *, summary: str) -> Paper:
    paper, _ = Paper.objects.get_or_create(
        paper_id=f"paper-{index}",
        defaults=dict(
            title=f"Paper number {index}: a study",
            venue="ICLR2025" if index % 2 else "NeurIPS2024",
            arxiv_abs=f"https://arxiv.org/abs/2501.0000{index}",
            github_url=f"https://github.com/example/paper-{index}",
            # spread the first commits over 2024-2025 so the contamination window has something to cut
            first_commit_date=dt.date(2024, 1, 15) + dt.timedelta(days=75 * index),
            summary=summary,
        ),
    )
    return paper


def make_demo(
    *,
    n_models: int = 3,
    n_papers: int = 4,
    slug: str = "v-test",
    with_ablation: bool = True,
    with_baselines: bool = True,
    incomplete_model: bool = True,
    seed: int = 0,
    summary: str = "A **bold** claim with `code` and a [link](https://example.org).",
    pset_dir=None,
) -> Demo:
    """Create a published default release with results; every number comes from SnippetResult rows."""
    rng = random.Random(seed)
    release = Release.objects.create(
        name=f"Test release {slug}",
        slug=slug,
        status=Release.PUBLISHED,
        content_hash="ab" * 32,
        description="A release made by the test factory.",
        published_at=timezone.now(),
        is_default=True,
    )
    demo = Demo(release=release)
    for i in range(n_papers):
        paper = _paper(i, summary=summary)
        demo.papers.append(paper)
        parent = Snippet.objects.create(
            release=release, paper=paper, file="scale.py", name="scale input", depth=0, position=0,
            start_line=5, end_line=10, weight=2, code="    y = np.asarray(x, dtype=float)\n    y = y * factor",
        )
        child = Snippet.objects.create(
            release=release, paper=paper, file="scale.py", name="multiply", parent=parent, depth=1, position=1,
            start_line=7, end_line=9, weight=1, code="    y = y * factor",
        )
        extra = Snippet.objects.create(
            release=release, paper=paper, file="other.py", name="helper", depth=0, position=2,
            start_line=1, end_line=3, weight=3, code="def helper():\n    a = 1\n    return a",
        )
        demo.snippets += [parent, child, extra]
        folder = ""
        if pset_dir is not None:  # real files, so the masked view can be built from them
            folder_path = pset_dir / paper.paper_id
            folder_path.mkdir(parents=True, exist_ok=True)
            (folder_path / "scale.py").write_text(REFERENCE_FILE, encoding="utf-8")
            folder = str(folder_path)
        ReleasePaper.objects.create(release=release, paper=paper, snippet_count=3, total_weight=6, folder=folder)

    def evaluate(model: LLMModel, *, skill: float, with_paper: bool = True, skip: int = 0, source: str = Evaluation.DEMO) -> Evaluation:
        ev = Evaluation.objects.create(
            model=model, release=release, with_paper=with_paper, samples=1, is_public=True, source=source,
            decoding={"temperature": 0.0, "max_tokens": 4096}, prompt_version="rcbhub-prompt-1", harness_version="0.1.0",
            verified=model.key.endswith("0"),
        )
        results = []
        for n, snip in enumerate(demo.snippets):
            if n < skip:
                continue
            passed = rng.random() < skill
            results.append(
                SnippetResult(
                    evaluation=ev, snippet=snip, sample=0, passed=passed,
                    category="" if passed else CATEGORIES[n % len(CATEGORIES)],
                    exit_code=0 if passed else 1, seconds=0.5,
                    output_tail="ok\n" if passed else "Traceback (most recent call last):\nAssertionError: mismatch\n",
                    completion=snip.code if passed else snip.code.replace("factor", "factor + 1") + "\n    # wrong",
                )
            )
        SnippetResult.objects.bulk_create(results)
        evaluation_aggregates_refresh(evaluation=ev, n_boot=50)
        demo.evaluations.append(ev)
        return ev

    for m in range(n_models):
        model = LLMModel.objects.create(
            key=f"model-{m}", display_name=f"Model {m}", organisation=("OrgA", "OrgB", "OrgC")[m % 3],
            open_weights=m % 2 == 1, knowledge_cutoff=f"2024-{(m % 12) + 1:02d}",
            knowledge_cutoff_date=dt.date(2024, (m % 12) + 1, 28), input_cost=1.0 + m, output_cost=4.0 + m,
        )
        demo.models.append(model)
        evaluate(model, skill=0.2 + 0.6 * m / max(n_models, 1))
        if with_ablation and m < 2:
            evaluate(model, skill=0.1 + 0.5 * m / max(n_models, 1), with_paper=False)
    if incomplete_model:
        model = LLMModel.objects.create(key="partial-model", display_name="Partial Model", organisation="OrgD")
        demo.models.append(model)
        evaluate(model, skill=0.9, skip=3)
    if with_baselines:
        for key, kind, skill in (("reference", LLMModel.REFERENCE, 1.0), ("empty", LLMModel.EMPTY, 0.0)):
            model = LLMModel.objects.create(key=key, display_name=f"{kind.title()} baseline", baseline=kind)
            demo.models.append(model)
            evaluate(model, skill=skill, source=Evaluation.BASELINE)
    return demo
