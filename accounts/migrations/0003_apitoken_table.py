"""API tokens' table takes the accounts app's name (``accounts_apitoken``): rows, ids and constraints stay."""
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0002_apitoken"),
    ]

    operations = [
        migrations.AlterModelTable(name="apitoken", table=None),
    ]
