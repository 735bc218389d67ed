"""API tokens are the accounts app's: the model joins this app's state on its existing table.

The table ``submissions_apitoken`` (made by submissions/0001_initial) keeps its name, rows and
constraints: the state moves, the database does not (SeparateDatabaseAndState). The model's
content type is renamed to this app, so permissions granted on tokens and admin history stay
attached to it.
"""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _content_type_move(apps, schema_editor, *, old: str, new: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if ContentType.objects.using(db).filter(app_label=new, model="apitoken").exists():
        return  # already there (made by a post_migrate run): the old row, if any, is left alone
    ContentType.objects.using(db).filter(app_label=old, model="apitoken").update(app_label=new)


def forwards(apps, schema_editor):
    _content_type_move(apps, schema_editor, old="submissions", new="accounts")


def backwards(apps, schema_editor):
    _content_type_move(apps, schema_editor, old="accounts", new="submissions")


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0001_reviewers_group"),
        ("contenttypes", "0002_remove_content_type_name"),
        # the table exists (0001) and the old app has let go of the model (0004)
        ("submissions", "0004_apitoken_to_accounts"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="APIToken",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                                   verbose_name="ID")),
                        ("name", models.CharField(blank=True, max_length=100)),
                        ("prefix", models.CharField(help_text="first characters, to recognise a token",
                                                    max_length=12)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                                   related_name="api_tokens", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "verbose_name": "API token",
                        "ordering": ["-created_at"],
                        "db_table": "submissions_apitoken",
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
