"""The domain models leave the leaderboard app's state; their tables stay as they are.

catalog/0001_initial took them over on the same tables, and every foreign key of another app points
at catalog's models now (scoring/0003, submissions/0007, contributions/0003). State only: nothing
runs on the database.
"""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('contributions', '0003_catalog_models'),
        ('leaderboard', '0009_run_here_held_out'),
        ('scoring', '0003_catalog_models'),
        ('submissions', '0007_catalog_models'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='evaluation',
                    name='model',
                ),
                migrations.RemoveField(
                    model_name='evaluation',
                    name='release',
                ),
                migrations.RemoveField(
                    model_name='snippetresult',
                    name='evaluation',
                ),
                migrations.RemoveField(
                    model_name='snippet',
                    name='paper',
                ),
                migrations.RemoveField(
                    model_name='releasepaper',
                    name='paper',
                ),
                migrations.RemoveField(
                    model_name='release',
                    name='predecessor',
                ),
                migrations.RemoveField(
                    model_name='snippet',
                    name='release',
                ),
                migrations.RemoveField(
                    model_name='releasepaper',
                    name='release',
                ),
                migrations.AlterUniqueTogether(
                    name='releasepaper',
                    unique_together=None,
                ),
                migrations.AlterUniqueTogether(
                    name='snippet',
                    unique_together=None,
                ),
                migrations.RemoveField(
                    model_name='snippet',
                    name='parent',
                ),
                migrations.RemoveField(
                    model_name='snippetresult',
                    name='snippet',
                ),
                migrations.DeleteModel(
                    name='LLMModel',
                ),
                migrations.DeleteModel(
                    name='Evaluation',
                ),
                migrations.DeleteModel(
                    name='Paper',
                ),
                migrations.DeleteModel(
                    name='Release',
                ),
                migrations.DeleteModel(
                    name='ReleasePaper',
                ),
                migrations.DeleteModel(
                    name='Snippet',
                ),
                migrations.DeleteModel(
                    name='SnippetResult',
                ),
            ],
            database_operations=[],
        ),
    ]
