"""Migration 0008 fills each stored evaluation's per-paper coverage from its results (issue 21):
a database made before it ranks on a scorable subset by the same rule as one made after."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from catalog.aggregates import evaluation_aggregates_refresh
from catalog.models import Evaluation, LLMModel, Snippet, SnippetResult
from submissions_support import demo_release_create


@pytest.mark.django_db(transaction=True)
def test_per_paper_coverage_is_filled_as_the_aggregates_count_it():
    release = demo_release_create(papers=["rope", "focal-loss"])
    model = LLMModel.objects.create(key="old", display_name="Old")
    ev = Evaluation.objects.create(model=model, release=release, is_public=True, samples=2)
    rope = list(Snippet.objects.filter(release=release, paper__paper_id="rope").order_by("position"))
    # rope: every snippet in both samples but the first (one sample only) and the second (a 'missing' row)
    for i, s in enumerate(rope):
        for sample in (0, 1):
            if i == 0 and sample == 1:
                continue
            SnippetResult.objects.create(evaluation=ev, snippet=s, sample=sample, passed=True,
                                         category="missing" if i == 1 and sample == 0 else "")
    expected = dict(evaluation_aggregates_refresh(evaluation=ev, refresh_release=False).paper_covered)
    assert expected == {"rope": len(rope) - 2, "focal-loss": 0}
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate([("leaderboard", "0007_releasepaper_archive")])
        MigrationExecutor(connection).migrate(latest)
        assert Evaluation.objects.get(pk=ev.pk).paper_covered == expected
    finally:
        MigrationExecutor(connection).migrate(latest)
