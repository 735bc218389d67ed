"""Scoring jobs become rows of the one job model, ``scoring.Job``: the model leaves this app's state.

scoring/0001_job takes the model over on its table (``submissions_scoringjob``), renames the table
and widens it to every kind of job. State only here: nothing runs on the database.
"""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0004_apitoken_to_accounts"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ScoringJob")],
            database_operations=[],
        ),
    ]
