"""Synthetic leaderboard data at scale for the benchmarks (bench/web_load.py, ``manage.py generate_synthetic``).

Runs inside Django (the management command sets it up): it writes the leaderboard's models with
bulk writes and stores aggregates computed by benchmark_core.scoring from the same outcomes.
"""
from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from benchmark_core.scoring import SnippetOutcome, summarize
from catalog.aggregates import evaluation_summary_store, release_tiers_refresh
from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog.releases import release_slug_unique

__all__ = ["SYNTHETIC_RELEASE", "synthetic_generate"]

SYNTHETIC_RELEASE = "synthetic"


def synthetic_generate(
    *, models: int = 100, snippets: int = 2000, samples: int = 5, papers: int = 50, seed: int = 0,
    release_name: str = SYNTHETIC_RELEASE, log=None,
) -> Release:
    """Replace the release ``release_name`` by random data at scale (bulk writes), for bench/.

    Aggregates are computed with the same benchmark_core.scoring.summarize as real results, from
    the generated outcomes in memory, so the stored figures match the stored rows.
    """
    import random
    import time

    rng = random.Random(seed)
    say = log or (lambda msg: None)
    started = time.monotonic()
    old = Release.objects.filter(name=release_name).first()
    if old is not None:
        SnippetResult.objects.filter(evaluation__release=old).delete()  # one DELETE: no cascades, no signals
        Evaluation.objects.filter(release=old).delete()
        Snippet.objects.filter(release=old).update(parent=None)
        Snippet.objects.filter(release=old).delete()
        old.delete()
    LLMModel.objects.filter(key__startswith="syn-model-").delete()
    with transaction.atomic():
        release = Release.objects.create(
            name=release_name, slug=release_slug_unique(release_name), status=Release.PUBLISHED,
            release_date=timezone.now().date(), published_at=timezone.now(),
            description=f"Synthetic data: {models} models x {snippets} snippets x {samples} samples",
        )
        paper_rows = []
        for p in range(papers):
            paper, _ = Paper.objects.update_or_create(
                paper_id=f"syn-paper-{p:03d}",
                defaults={"title": f"Synthetic paper {p}",
                          "first_commit_date": dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 900))},
            )
            paper_rows.append(paper)
        snippet_objs = [
            Snippet(release=release, paper=paper_rows[i % papers], name=f"snippet-{i:05d}", file="code.py",
                    weight=rng.randint(1, 15), position=i)
            for i in range(snippets)
        ]
        snippet_objs = Snippet.objects.bulk_create(snippet_objs, batch_size=2000)
        by_paper: dict[int, list[Snippet]] = {}
        for s in snippet_objs:
            by_paper.setdefault(s.paper_id, []).append(s)
        ReleasePaper.objects.bulk_create(
            ReleasePaper(release=release, paper=p, snippet_count=len(by_paper.get(p.id, [])),
                         total_weight=sum(s.weight for s in by_paper.get(p.id, [])))
            for p in paper_rows
        )
        difficulty = [rng.random() for _ in snippet_objs]
        say(f"{papers} papers, {snippets} snippets ({time.monotonic() - started:.1f}s)")
        orgs = ["Alpha Labs", "Beta AI", "Gamma Research", "Delta", "Epsilon Open"]
        categories = ["syntax", "name", "type", "attribute", "index", "import", "logic", "timeout", "crash", "other"]
        for m in range(models):
            cutoff = dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 700))
            model = LLMModel.objects.create(
                key=f"syn-model-{m:03d}", display_name=f"Synthetic Model {m:03d}", organisation=orgs[m % len(orgs)],
                open_weights=m % 3 == 0, knowledge_cutoff=cutoff.isoformat(), knowledge_cutoff_date=cutoff,
                input_cost=round(rng.uniform(0.05, 15), 2), output_cost=round(rng.uniform(0.2, 60), 2),
            )
            ev = Evaluation(model=model, release=release, is_public=True, source=Evaluation.DEMO, samples=samples,
                            decoding={"temperature": 0.8, "samples": samples}, prompt_version="synthetic",
                            harness_version="synthetic")
            skill = rng.uniform(0.05, 0.95)
            rows, outcomes = [], []
            for sample in range(samples):
                for s, diff in zip(snippet_objs, difficulty):
                    passed = rng.random() < skill * (1.2 - diff)
                    category = "" if passed else categories[rng.randrange(len(categories))]
                    rows.append(SnippetResult(evaluation=ev, snippet=s, sample=sample, passed=passed, category=category,
                                              exit_code=0 if passed else 1, seconds=round(rng.uniform(0.05, 3), 2)))
                    outcomes.append(SnippetOutcome(paper=paper_rows[s.position % papers].paper_id, file=s.file,
                                                   snippet=s.name, sample=sample, weight=s.weight, passed=passed,
                                                   category=category or None))
            evaluation_summary_store(evaluation=ev, summary=summarize(outcomes, n_boot=200),
                                     snippets_total=len(snippet_objs), snippets_covered=len(snippet_objs))
            SnippetResult.objects.bulk_create(rows, batch_size=5000)
            if (m + 1) % 10 == 0:
                say(f"{m + 1}/{models} models ({time.monotonic() - started:.1f}s)")
    release_tiers_refresh(release=release, n_boot=200)
    say(f"done in {time.monotonic() - started:.1f}s")
    return release
