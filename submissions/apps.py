from django.apps import AppConfig


class SubmissionsConfig(AppConfig):
    name = "submissions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from scoring.jobs import kind_register  # noqa: PLC0415
        from scoring.models import JobKind  # noqa: PLC0415

        from .runs import GENERATION  # noqa: PLC0415
        from .jobs import SUBMISSION_PAPER  # noqa: PLC0415

        kind_register(JobKind.SUBMISSION_PAPER, SUBMISSION_PAPER)
        kind_register(JobKind.GENERATION, GENERATION)
