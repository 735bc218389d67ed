"""scoring.results.evaluation_results_write, the one writer of verdicts: replaces by (snippet, sample)
and keeps the evaluation's count of flagged rows (and a reviewer's clearing) right."""
import pytest
from django.utils import timezone

from catalog.models import Evaluation, LLMModel, Snippet, SnippetResult
from scoring.results import ResultRow, evaluation_results_write

from submissions_support import demo_release_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluation():
    release = demo_release_create(papers=["rope"])
    model = LLMModel.objects.create(key="writer-test", display_name="Writer test")
    return Evaluation.objects.create(model=model, release=release)


def _snippets(evaluation, count=2):
    return list(Snippet.objects.filter(release=evaluation.release).order_by("pk")[:count])


def _write(evaluation, *rows, **kw):
    evaluation_results_write(evaluation=evaluation.pk, aggregates=False, rows=rows, **kw)
    evaluation.refresh_from_db()


def test_a_second_verdict_of_a_snippet_sample_replaces_the_first(evaluation):
    a, b = _snippets(evaluation)
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=False, category="name", output_tail="x"))
    first = SnippetResult.objects.get(evaluation=evaluation, snippet=a, sample=0)
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=True, seconds=1.5, completion="c"),
           ResultRow(snippet_id=a.pk, sample=1, passed=False),
           ResultRow(snippet_id=b.pk, sample=0, passed=False),
           ResultRow(snippet_id=b.pk, sample=0, passed=True, category=""))  # the last of a key wins
    rows = {(r.snippet_id, r.sample): r for r in SnippetResult.objects.filter(evaluation=evaluation)}
    assert set(rows) == {(a.pk, 0), (a.pk, 1), (b.pk, 0)}
    again = rows[(a.pk, 0)]
    assert again.pk == first.pk and again.passed and again.category == "" and again.output_tail == ""
    assert again.seconds == 1.5 and again.completion == "c"
    assert rows[(b.pk, 0)].passed


def test_the_flagged_count_follows_new_and_replaced_rows_and_new_flags_undo_a_clearing(evaluation):
    a, b = _snippets(evaluation)
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=True))
    assert evaluation.flagged_results == 0
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=True, flags=["audit:spawn"]))
    assert evaluation.flagged_results == 1
    # a reviewer clears it; an unflagged verdict elsewhere keeps the clearing
    Evaluation.objects.filter(pk=evaluation.pk).update(flags_cleared_at=timezone.now(), flags_cleared_by="rev")
    _write(evaluation, ResultRow(snippet_id=b.pk, sample=0, passed=True))
    assert evaluation.flagged_results == 1 and evaluation.flags_cleared_at is not None
    # a new flagged row undoes the clearing
    _write(evaluation, ResultRow(snippet_id=b.pk, sample=0, passed=False, flags=["tampering:exec"]))
    assert evaluation.flagged_results == 2 and evaluation.flags_cleared_at is None
    # the flagged rows replaced by clean ones: the count goes down
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=True), ResultRow(snippet_id=b.pk, sample=0, passed=True))
    assert evaluation.flagged_results == 0
    # a whole replacement recounts too
    _write(evaluation, ResultRow(snippet_id=a.pk, sample=0, passed=True, flags=["ast:eval"]), replace=True)
    assert evaluation.flagged_results == 1 and SnippetResult.objects.filter(evaluation=evaluation).count() == 1
