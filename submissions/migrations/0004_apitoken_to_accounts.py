"""API tokens move to the accounts app: the model leaves this app's state; its table stays as it is.

accounts/0002_apitoken takes the model over with the same table (``submissions_apitoken``), so no
row, id or constraint changes. State only: nothing runs on the database.
"""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("submissions", "0003_environment_error_states"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="APIToken")],
            database_operations=[],
        ),
    ]
