"""The one job model: a database made when scoring jobs were ``submissions.ScoringJob`` migrates with its rows.

Same ids and history, kind ``submission_paper``, the submission's ``jobs`` still there, the content
type (so permissions) follows the model, new jobs of any kind get the next id; and back again.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from catalog.models import LLMModel, ReleasePaper
from scoring.models import Job, JobKind, JobStatus
from submissions.models import PredictionSubmission
from submissions_support import demo_release_create

#: the newest migrations in which the submissions app still owned scoring jobs
_BEFORE_MOVE = [("submissions", "0004_apitoken_to_accounts"), ("scoring", None)]
#: the state of the models then (accounts brings the content types' and auth's last migrations along)
_OLD_STATE = [("submissions", "0004_apitoken_to_accounts"), ("accounts", "0002_apitoken")]


@pytest.mark.django_db(transaction=True)
def test_scoring_jobs_become_rows_of_the_one_job_model_and_back():
    release = demo_release_create(papers=["rope"])
    rp = ReleasePaper.objects.select_related("paper").get(release=release)
    user = User.objects.create_user("old-owner", password="pw")
    model = LLMModel.objects.create(key="old-model", display_name="Old model")
    submission = PredictionSubmission.objects.create(user=user, release=release, model=model, model_name="Old model",
                                                     content_hash="0" * 64)
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(_BEFORE_MOVE)
        old = MigrationExecutor(connection).loader.project_state(_OLD_STATE).apps
        with pytest.raises(LookupError):
            old.get_model("scoring", "Job")
        row = old.get_model("submissions", "ScoringJob").objects.create(
            submission_id=submission.pk, paper_id=rp.paper_id, release_paper_id=rp.pk, status="running", attempt=2,
            rq_job_id="rcb-score-1-2-abcdef", worker="host:1", tasks_total=7,
            history=[{"at": "2026-11-30T10:00:00+00:00", "event": "attempt 2 started on host:1"}])
        types = old.get_model("contenttypes", "ContentType").objects
        types.filter(model__in=["scoringjob", "job"]).delete()
        kind = types.create(app_label="submissions", model="scoringjob")
        permission = old.get_model("auth", "Permission").objects.create(
            content_type=kind, codename="view_scoringjob", name="Can view scoring job")
        old.get_model("auth", "User").objects.get(pk=user.pk).user_permissions.add(permission)

        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
        job = Job.objects.get()
        assert (job.pk, job.kind, job.queue, job.status, job.attempt, job.rq_job_id, job.tasks_total) == (
            row.pk, JobKind.SUBMISSION_PAPER, "scoring", JobStatus.RUNNING, 2, "rcb-score-1-2-abcdef", 7)
        assert job.history[0]["event"] == "attempt 2 started on host:1"
        assert list(submission.jobs.all()) == [job]
        assert Job._meta.db_table == "scoring_job" and "scoring_job" in connection.introspection.table_names()
        assert "submissions_scoringjob" not in connection.introspection.table_names()
        assert ContentType.objects.get(pk=kind.pk).natural_key() == ("scoring", "job")
        # the permission granted on the old model is the new model's (the codename is the old one's)
        assert User.objects.get(pk=user.pk).has_perm("scoring.view_scoringjob")
        # one job per (submission, paper) still holds; another kind of job gets the next id of the same table
        from django.db import IntegrityError, transaction

        with pytest.raises(IntegrityError), transaction.atomic():
            Job.objects.create(kind=JobKind.SUBMISSION_PAPER, submission=submission, paper_id=rp.paper_id)
        assert Job.objects.create(kind=JobKind.RELEASE_BASELINE, paper_id=rp.paper_id).pk > row.pk
        Job.objects.filter(kind=JobKind.RELEASE_BASELINE).delete()

        MigrationExecutor(connection).migrate(_BEFORE_MOVE)  # and back: the rows return to submissions
        back = old.get_model("submissions", "ScoringJob").objects.get()
        assert (back.pk, back.attempt, back.rq_job_id) == (row.pk, 2, "rcb-score-1-2-abcdef")
        assert old.get_model("contenttypes", "ContentType").objects.get(pk=kind.pk).app_label == "submissions"
    finally:
        MigrationExecutor(connection).migrate(latest)
        ContentType.objects.clear_cache()
