"""Foreign keys to the domain models point at the catalog app's (catalog/0001_initial): state only.

The referenced tables are the same (``leaderboard_*``), so the database's constraints already point
at them: nothing runs on the database (SeparateDatabaseAndState).
"""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0001_initial'),
        ('contributions', '0002_alter_papercontribution_paper_id'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                # the admin's proxy of Release follows its base (a proxy has no table)
                migrations.DeleteModel(name='PublishableRelease'),
                migrations.CreateModel(
                    name='PublishableRelease',
                    fields=[],
                    options={
                        'verbose_name': 'release to publish',
                        'verbose_name_plural': 'releases to publish',
                        'proxy': True,
                        'indexes': [],
                        'constraints': [],
                    },
                    bases=('catalog.release',),
                ),
                migrations.AlterField(
                    model_name='papercontribution',
                    name='release_paper',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='contributions', to='catalog.releasepaper'),
                ),
            ],
            database_operations=[],
        ),
    ]
