"""The domain models move from the leaderboard app to catalog (issue 22) by state-only migrations.

A database made when ``Paper``, ``Release``, ``ReleasePaper``, ``Snippet``, ``LLMModel``, ``Evaluation``
and ``SnippetResult`` were the leaderboard app's migrates with its rows: same tables, same ids, the
other apps' foreign keys (a submission's evaluation, a job's paper, a contribution's release paper)
still resolve, the content types (so permissions) follow the models; and back again.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from scoring.models import Job, JobKind
from submissions.models import PredictionSubmission

#: the newest migrations in which the leaderboard app still owned the domain models
_BEFORE_MOVE = [("catalog", None)]
#: the state of the models then
_OLD_STATE = [("leaderboard", "0009_run_here_held_out"), ("submissions", "0006_evaluationrun"),
              ("scoring", "0002_job_generation"), ("contributions", "0002_alter_papercontribution_paper_id")]
MODELS = ("paper", "release", "releasepaper", "snippet", "llmmodel", "evaluation", "snippetresult")
TABLES = {Paper: "leaderboard_paper", Release: "leaderboard_release", ReleasePaper: "leaderboard_releasepaper",
          Snippet: "leaderboard_snippet", LLMModel: "leaderboard_llmmodel", Evaluation: "leaderboard_evaluation",
          SnippetResult: "leaderboard_snippetresult"}


@pytest.mark.django_db(transaction=True)
def test_the_domain_models_move_to_catalog_with_their_rows_and_back():
    user = User.objects.create_user("old-owner", password="pw")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(_BEFORE_MOVE)
        old = MigrationExecutor(connection).loader.project_state(_OLD_STATE).apps
        with pytest.raises(LookupError):
            old.get_model("catalog", "Paper")
        o = {name: old.get_model("leaderboard", name) for name in
             ("Paper", "Release", "ReleasePaper", "Snippet", "LLMModel", "Evaluation", "SnippetResult")}
        paper = o["Paper"].objects.create(paper_id="old-paper", title="Old paper")
        release = o["Release"].objects.create(name="Old release", slug="old-release", status="published")
        rp = o["ReleasePaper"].objects.create(release=release, paper=paper, folder="/nowhere", snippet_count=1)
        snippet = o["Snippet"].objects.create(release=release, paper=paper, name="s", weight=3, code="x = 1")
        model = o["LLMModel"].objects.create(key="old-model", display_name="Old model")
        ev = o["Evaluation"].objects.create(model=model, release=release, is_public=True, scaled_pass_rate=50.0)
        result = o["SnippetResult"].objects.create(evaluation=ev, snippet=snippet, sample=0, passed=True)
        submission = old.get_model("submissions", "PredictionSubmission").objects.create(
            user_id=user.pk, release=release, model=model, evaluation=ev, model_name="Old model", content_hash="0" * 64)
        job = old.get_model("scoring", "Job").objects.create(kind=JobKind.SUBMISSION_PAPER, submission=submission,
                                                             paper=paper, release_paper=rp)
        types = old.get_model("contenttypes", "ContentType").objects
        types.filter(model__in=MODELS).delete()
        kinds = {name: types.create(app_label="leaderboard", model=name) for name in MODELS}
        permission = old.get_model("auth", "Permission").objects.create(
            content_type=kinds["evaluation"], codename="view_evaluation", name="Can view evaluation")
        old.get_model("auth", "User").objects.get(pk=user.pk).user_permissions.add(permission)

        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
        # the same rows, read through the catalog's models, on the tables they always had
        for model_class, table in TABLES.items():
            assert model_class._meta.db_table == table and table in connection.introspection.table_names()
        moved = Evaluation.objects.select_related("model", "release").get(pk=ev.pk)
        assert (moved.model.key, moved.release.slug, moved.scaled_pass_rate) == ("old-model", "old-release", 50.0)
        assert list(SnippetResult.objects.filter(evaluation=moved).values_list("pk", flat=True)) == [result.pk]
        assert ReleasePaper.objects.get(pk=rp.pk).paper.paper_id == "old-paper"
        # the other apps' foreign keys resolve to the catalog's models
        assert PredictionSubmission.objects.get(pk=submission.pk).evaluation == moved
        moved_job = Job.objects.select_related("release_paper", "paper").get(pk=job.pk)
        assert moved_job.release_paper.pk == rp.pk and moved_job.paper.paper_id == "old-paper"
        assert Paper.objects.create(paper_id="new-paper", title="New").pk > paper.pk  # the same sequence
        # the content types follow, so does the permission granted on the old model
        for name, kind in kinds.items():
            assert ContentType.objects.get(pk=kind.pk).natural_key() == ("catalog", name)
        assert User.objects.get(pk=user.pk).has_perm("catalog.view_evaluation")
        Paper.objects.filter(paper_id="new-paper").delete()

        MigrationExecutor(connection).migrate(_BEFORE_MOVE)  # and back: the rows are the leaderboard app's again
        back = MigrationExecutor(connection).loader.project_state(_OLD_STATE).apps
        assert back.get_model("leaderboard", "Evaluation").objects.get(pk=ev.pk).scaled_pass_rate == 50.0
        assert back.get_model("contenttypes", "ContentType").objects.get(pk=kinds["paper"].pk).app_label == "leaderboard"
    finally:
        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
