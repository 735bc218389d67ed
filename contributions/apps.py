from django.apps import AppConfig


class ContributionsConfig(AppConfig):
    name = "contributions"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Paper contributions"
