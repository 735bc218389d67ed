"""The domain models join the catalog app on their existing tables: state only, no row moves.

``Paper``, ``Release``, ``ReleasePaper``, ``Snippet``, ``LLMModel``, ``Evaluation`` and ``SnippetResult``
were the leaderboard app's (leaderboard/0001..0009). Their state moves here with the same tables
(``db_table``: ``leaderboard_*``), index and constraint names, so nothing runs on the database
(SeparateDatabaseAndState); the other apps' foreign keys are repointed in their own state-only
migrations, then leaderboard/0010 lets go of the models. The content types follow the models, so
permissions granted on them and the admin's history stay attached.
"""
import django.db.models.deletion
from django.db import migrations, models

#: the models that move, by their content types' model names
MODELS = ("paper", "release", "releasepaper", "snippet", "llmmodel", "evaluation", "snippetresult")


def _content_types_move(apps, schema_editor, *, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for model in MODELS:
        if ContentType.objects.using(db).filter(app_label=new, model=model).exists():
            continue  # already there (made by a post_migrate run): the old row, if any, is left alone
        ContentType.objects.using(db).filter(app_label=old, model=model).update(app_label=new)


def forwards(apps, schema_editor):
    _content_types_move(apps, schema_editor, old="leaderboard", new="catalog")


def backwards(apps, schema_editor):
    _content_types_move(apps, schema_editor, old="catalog", new="leaderboard")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        # the tables exist as the leaderboard app made them
        ("leaderboard", "0009_run_here_held_out"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='LLMModel',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(max_length=200, unique=True)),
                        ('display_name', models.CharField(max_length=200)),
                        ('organisation', models.CharField(blank=True, max_length=200)),
                        ('developer', models.CharField(blank=True, max_length=200)),
                        ('open_weights', models.BooleanField(default=False)),
                        ('knowledge_cutoff', models.CharField(blank=True, help_text='as given: YYYY-MM or YYYY-MM-DD', max_length=20)),
                        ('knowledge_cutoff_date', models.DateField(blank=True, help_text='last day the cutoff covers', null=True)),
                        ('input_cost', models.FloatField(blank=True, help_text='USD per million input tokens', null=True)),
                        ('output_cost', models.FloatField(blank=True, help_text='USD per million output tokens', null=True)),
                        ('links', models.JSONField(blank=True, default=dict)),
                        ('metadata', models.JSONField(blank=True, default=dict, help_text='provider configuration as imported')),
                        ('baseline', models.CharField(blank=True, choices=[('', 'no'), ('reference', 'reference'), ('empty', 'empty')], max_length=20)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'leaderboard_llmmodel',
                        'ordering': ['display_name'],
                    },
                ),
                migrations.CreateModel(
                    name='Paper',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('paper_id', models.CharField(help_text='folder name in the problem set, e.g. DyT', max_length=100, unique=True)),
                        ('title', models.CharField(max_length=500)),
                        ('venue', models.CharField(blank=True, max_length=100)),
                        ('arxiv_abs', models.URLField(blank=True, max_length=500)),
                        ('arxiv_date', models.DateField(blank=True, null=True)),
                        ('arxiv_v1_date', models.DateField(blank=True, null=True)),
                        ('github_url', models.URLField(blank=True, max_length=500)),
                        ('first_commit_date', models.DateField(blank=True, db_index=True, null=True)),
                        ('last_commit_date', models.DateField(blank=True, null=True)),
                        ('summary', models.TextField(blank=True, help_text='Markdown; rendered sanitized')),
                        ('metadata', models.JSONField(blank=True, default=dict)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'leaderboard_paper',
                        'ordering': ['paper_id'],
                    },
                ),
                migrations.CreateModel(
                    name='Release',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100, unique=True)),
                        ('slug', models.SlugField(max_length=100, unique=True)),
                        ('status', models.CharField(choices=[('draft', 'draft'), ('published', 'published')], default='draft', max_length=20)),
                        ('content_hash', models.CharField(blank=True, max_length=64)),
                        ('description', models.TextField(blank=True)),
                        ('published_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('is_default', models.BooleanField(default=False, help_text='shown when no release is asked for')),
                        ('release_date', models.DateField(blank=True, help_text='the date the release stands for (citations)', null=True)),
                        ('data_version', models.PositiveIntegerField(default=0)),
                        ('tiers', models.JSONField(blank=True, default=dict)),
                        ('changelog', models.JSONField(blank=True, default=list)),
                        ('held_out', models.BooleanField(default=False, help_text='tasks and code served to staff only')),
                        ('predecessor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='successors', to='catalog.release')),
                    ],
                    options={
                        'db_table': 'leaderboard_release',
                        'ordering': ['-published_at', '-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='Evaluation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('with_paper', models.BooleanField(default=True)),
                        ('samples', models.PositiveIntegerField(default=1)),
                        ('decoding', models.JSONField(blank=True, default=dict, help_text='temperature, top_p, max_tokens, ...')),
                        ('prompt_version', models.CharField(blank=True, max_length=50)),
                        ('harness_version', models.CharField(blank=True, max_length=50)),
                        ('source', models.CharField(default='submission', max_length=20)),
                        ('is_public', models.BooleanField(default=False)),
                        ('hidden', models.BooleanField(default=False, help_text='hidden by an admin')),
                        ('verified', models.BooleanField(default=False, help_text='reproduced by the maintainers')),
                        ('flagged_results', models.PositiveIntegerField(default=0, help_text='results with engine flags')),
                        ('flags_cleared_at', models.DateTimeField(blank=True, help_text='a reviewer cleared the flags', null=True)),
                        ('flags_cleared_by', models.CharField(blank=True, max_length=150)),
                        ('input_hash', models.CharField(blank=True, help_text='hash of what was scored (re-imports skip it)', max_length=64)),
                        ('run_card', models.JSONField(blank=True, default=dict)),
                        ('cost_per_snippet', models.FloatField(blank=True, help_text='USD per snippet, measured (run card)', null=True)),
                        ('run_date', models.DateField(blank=True, help_text='day of the run the results come from (imports)', null=True)),
                        ('succession', models.JSONField(blank=True, default=dict)),
                        ('run_here', models.BooleanField(db_index=True, default=False, editable=False)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('scaled_pass_rate', models.FloatField(blank=True, db_index=True, null=True)),
                        ('pass_rate', models.FloatField(blank=True, null=True)),
                        ('scaled_ci_low', models.FloatField(blank=True, null=True)),
                        ('scaled_ci_high', models.FloatField(blank=True, null=True)),
                        ('scaled_std', models.FloatField(blank=True, null=True)),
                        ('pass_std', models.FloatField(blank=True, null=True)),
                        ('snippets_total', models.PositiveIntegerField(default=0)),
                        ('snippets_covered', models.PositiveIntegerField(default=0)),
                        ('categories', models.JSONField(blank=True, default=dict)),
                        ('per_paper', models.JSONField(blank=True, default=dict)),
                        ('paper_totals', models.JSONField(blank=True, default=dict, help_text='per paper [passed weight, weight, passed, n]')),
                        ('paper_covered', models.JSONField(blank=True, default=dict, help_text='per paper: snippets with a prediction in every sample')),
                        ('pass_at_k', models.JSONField(blank=True, default=dict)),
                        ('computed_at', models.DateTimeField(blank=True, null=True)),
                        ('model', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evaluations', to='catalog.llmmodel')),
                        ('release', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evaluations', to='catalog.release')),
                    ],
                    options={
                        'db_table': 'leaderboard_evaluation',
                        'ordering': ['-scaled_pass_rate'],
                    },
                ),
                migrations.CreateModel(
                    name='ReleasePaper',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('folder', models.CharField(blank=True, help_text='paper folder on the workers; empty: no code', max_length=500)),
                        ('content_hash', models.CharField(blank=True, max_length=64)),
                        ('archive', models.CharField(blank=True, help_text='paper files by content hash; empty: only at folder', max_length=64)),
                        ('snippet_count', models.PositiveIntegerField(default=0)),
                        ('total_weight', models.PositiveIntegerField(default=0)),
                        ('deterministic', models.BooleanField(default=False, help_text='repeated reference runs agreed')),
                        ('entry', models.JSONField(blank=True, default=dict)),
                        ('environment', models.CharField(blank=True, help_text='environment name; empty: inferred', max_length=100)),
                        ('environment_ok', models.BooleanField(blank=True, help_text='reference code passed; None: not checked', null=True)),
                        ('environment_error', models.TextField(blank=True)),
                        ('reference_seconds', models.FloatField(blank=True, null=True)),
                        ('environment_checked_at', models.DateTimeField(blank=True, null=True)),
                        ('paper', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='release_papers', to='catalog.paper')),
                        ('release', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='release_papers', to='catalog.release')),
                    ],
                    options={
                        'db_table': 'leaderboard_releasepaper',
                        'ordering': ['paper__paper_id'],
                    },
                ),
                migrations.CreateModel(
                    name='Snippet',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('file', models.CharField(blank=True, max_length=300)),
                        ('name', models.CharField(max_length=300)),
                        ('depth', models.PositiveSmallIntegerField(default=0)),
                        ('position', models.PositiveIntegerField(default=0)),
                        ('start_line', models.PositiveIntegerField(blank=True, null=True)),
                        ('end_line', models.PositiveIntegerField(blank=True, null=True)),
                        ('weight', models.PositiveIntegerField()),
                        ('code', models.TextField(blank=True)),
                        ('paper', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='snippets', to='catalog.paper')),
                        ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='children', to='catalog.snippet')),
                        ('release', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='snippets', to='catalog.release')),
                    ],
                    options={
                        'db_table': 'leaderboard_snippet',
                        'ordering': ['paper__paper_id', 'position'],
                    },
                ),
                migrations.CreateModel(
                    name='SnippetResult',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('sample', models.PositiveIntegerField(default=0)),
                        ('passed', models.BooleanField()),
                        ('category', models.CharField(blank=True, max_length=20)),
                        ('exit_code', models.IntegerField(blank=True, null=True)),
                        ('seconds', models.FloatField(blank=True, null=True)),
                        ('output_tail', models.TextField(blank=True)),
                        ('completion', models.TextField(blank=True)),
                        ('flags', models.JSONField(blank=True, default=list, help_text="the engine's flags, e.g. 'tampering:os.exec'")),
                        ('evaluation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='catalog.evaluation')),
                        ('snippet', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='catalog.snippet')),
                    ],
                    options={
                        'db_table': 'leaderboard_snippetresult',
                    },
                ),
                migrations.AddIndex(
                    model_name='evaluation',
                    index=models.Index(fields=['release', 'is_public', 'hidden'], name='leaderboard_release_9ca384_idx'),
                ),
                migrations.AlterUniqueTogether(
                    name='releasepaper',
                    unique_together={('release', 'paper')},
                ),
                migrations.AlterUniqueTogether(
                    name='snippet',
                    unique_together={('release', 'paper', 'file', 'name')},
                ),
                migrations.AddConstraint(
                    model_name='snippetresult',
                    constraint=models.UniqueConstraint(fields=('evaluation', 'snippet', 'sample'), name='one_result_per_snippet_sample'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
