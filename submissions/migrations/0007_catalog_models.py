"""Foreign keys to the domain models point at the catalog app's (catalog/0001_initial): state only.

The referenced tables are the same (``leaderboard_*``), so the database's constraints already point
at them: nothing runs on the database (SeparateDatabaseAndState).
"""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0001_initial'),
        ('submissions', '0006_evaluationrun'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='evaluationrun',
                    name='release',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='evaluation_runs', to='catalog.release'),
                ),
                migrations.AlterField(
                    model_name='predictionsubmission',
                    name='evaluation',
                    field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='submission', to='catalog.evaluation'),
                ),
                migrations.AlterField(
                    model_name='predictionsubmission',
                    name='model',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='submissions', to='catalog.llmmodel'),
                ),
                migrations.AlterField(
                    model_name='predictionsubmission',
                    name='release',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='submissions', to='catalog.release'),
                ),
                migrations.AlterField(
                    model_name='submissionprediction',
                    name='snippet',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='catalog.snippet'),
                ),
            ],
            database_operations=[],
        ),
    ]
