"""The one job model: ``submissions.ScoringJob`` becomes ``scoring.Job``, for every kind of job.

First the state moves and the database does not (SeparateDatabaseAndState on the existing table
``submissions_scoringjob``; the content type follows, so permissions and admin history stay
attached). Then real schema changes: the table is renamed ``scoring_job``, the links become
optional, a job gets a kind (existing rows: ``submission_paper``), a queue, and links to a
contribution's revision and to a baseline evaluation; one job per (submission, paper), per
(contribution, revision) and per (baseline evaluation, paper).
"""
import django.db.models.deletion
from django.db import migrations, models

_STATUS_OLD = [("queued", "queued"), ("running", "running"), ("finished", "finished"), ("failed", "failed"),
               ("cancelled", "cancelled"), ("environment", "environment error"), ("waiting", "waiting (environment)")]


def _content_type_move(apps, schema_editor, *, old: tuple[str, str], new: tuple[str, str]) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if ContentType.objects.using(db).filter(app_label=new[0], model=new[1]).exists():
        return
    ContentType.objects.using(db).filter(app_label=old[0], model=old[1]).update(app_label=new[0], model=new[1])


def forwards(apps, schema_editor):
    _content_type_move(apps, schema_editor, old=("submissions", "scoringjob"), new=("scoring", "job"))


def backwards(apps, schema_editor):
    _content_type_move(apps, schema_editor, old=("scoring", "job"), new=("submissions", "scoringjob"))


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("contributions", "0002_alter_papercontribution_paper_id"),
        ("leaderboard", "0007_releasepaper_archive"),
        ("submissions", "0005_scoringjob_to_scoring"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Job",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("status", models.CharField(choices=_STATUS_OLD, db_index=True, default="queued",
                                                    max_length=20)),
                        ("attempt", models.PositiveIntegerField(default=0, help_text="times handed to the queue")),
                        ("rq_job_id", models.CharField(blank=True, help_text="the RQ job of the current attempt",
                                                       max_length=100)),
                        ("worker", models.CharField(blank=True, max_length=200)),
                        ("tasks_total", models.PositiveIntegerField(default=0)),
                        ("error", models.TextField(blank=True)),
                        ("enqueued_at", models.DateTimeField(blank=True, null=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, db_index=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("history", models.JSONField(blank=True, default=list,
                                                     help_text="what happened to this job, for operators")),
                        ("paper", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="+",
                                                    to="leaderboard.paper")),
                        ("release_paper", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT,
                                                            related_name="+", to="leaderboard.releasepaper")),
                        ("submission", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                         related_name="jobs",
                                                         to="submissions.predictionsubmission")),
                    ],
                    options={
                        "ordering": ["submission_id", "paper__paper_id"],
                        "db_table": "submissions_scoringjob",
                        "constraints": [models.UniqueConstraint(fields=("submission", "paper"),
                                                                name="one_job_per_submission_paper")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
        migrations.AlterModelTable(name="job", table=None),
        migrations.RemoveConstraint(model_name="job", name="one_job_per_submission_paper"),
        migrations.AlterModelOptions(name="job", options={"ordering": ["submission_id", "paper__paper_id", "id"]}),
        migrations.AddField(
            model_name="job", name="kind",
            field=models.CharField(choices=[("submission_paper", "submission paper"),
                                            ("contribution_check", "contribution checks"),
                                            ("release_baseline", "release baseline")],
                                   db_index=True, default="submission_paper", max_length=30),
        ),
        migrations.AddField(
            model_name="job", name="queue",
            field=models.CharField(default="scoring", help_text="the RQ queue its attempts go to", max_length=50),
        ),
        migrations.AddField(
            model_name="job", name="contribution",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="jobs", to="contributions.papercontribution"),
        ),
        migrations.AddField(
            model_name="job", name="revision",
            field=models.PositiveIntegerField(blank=True, help_text="the contribution's revision checked", null=True),
        ),
        migrations.AddField(
            model_name="job", name="evaluation",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="baseline_jobs", to="leaderboard.evaluation"),
        ),
        migrations.AlterField(
            model_name="job", name="submission",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="jobs", to="submissions.predictionsubmission"),
        ),
        migrations.AlterField(
            model_name="job", name="paper",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="leaderboard.paper"),
        ),
        migrations.AlterField(
            model_name="job", name="release_paper",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="+", to="leaderboard.releasepaper"),
        ),
        migrations.AlterField(
            model_name="job", name="status",
            field=models.CharField(choices=[("queued", "queued"), ("running", "running"), ("finished", "finished"),
                                            ("failed", "failed"), ("cancelled", "cancelled"),
                                            ("environment", "environment error")],
                                   db_index=True, default="queued", max_length=20),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(condition=models.Q(kind="submission_paper"), fields=("submission", "paper"),
                                               name="one_job_per_submission_paper"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(condition=models.Q(kind="contribution_check"),
                                               fields=("contribution", "revision"),
                                               name="one_job_per_contribution_revision"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(condition=models.Q(kind="release_baseline"), fields=("evaluation", "paper"),
                                               name="one_job_per_baseline_paper"),
        ),
    ]
