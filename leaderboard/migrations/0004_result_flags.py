from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leaderboard", "0003_release_succession"),
    ]

    operations = [
        migrations.AddField(
            model_name="snippetresult",
            name="flags",
            field=models.JSONField(blank=True, default=list, help_text="the engine's flags, e.g. 'tampering:os.exec'"),
        ),
        migrations.AddField(
            model_name="evaluation",
            name="flagged_results",
            field=models.PositiveIntegerField(default=0, help_text="results with engine flags"),
        ),
        migrations.AddField(
            model_name="evaluation",
            name="flags_cleared_at",
            field=models.DateTimeField(blank=True, help_text="a reviewer cleared the flags", null=True),
        ),
        migrations.AddField(
            model_name="evaluation",
            name="flags_cleared_by",
            field=models.CharField(blank=True, max_length=150),
        ),
    ]
