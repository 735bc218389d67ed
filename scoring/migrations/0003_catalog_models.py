"""Foreign keys to the domain models point at the catalog app's (catalog/0001_initial): state only.

The referenced tables are the same (``leaderboard_*``), so the database's constraints already point
at them: nothing runs on the database (SeparateDatabaseAndState).
"""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0001_initial'),
        ('scoring', '0002_job_generation'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='job',
                    name='evaluation',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='baseline_jobs', to='catalog.evaluation'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='paper',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='catalog.paper'),
                ),
                migrations.AlterField(
                    model_name='job',
                    name='release_paper',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='catalog.releasepaper'),
                ),
            ],
            database_operations=[],
        ),
    ]
