from django.apps import AppConfig


class ContributionsConfig(AppConfig):
    name = "contributions"
    default_auto_field = "django.db.models.BigAutoField"
    verbose_name = "Paper contributions"

    def ready(self) -> None:
        # the contributions' kinds of job: their checks and the baselines of the releases they make
        from scoring.jobs import kind_register  # noqa: PLC0415
        from scoring.models import JobKind  # noqa: PLC0415

        from .release_services import RELEASE_BASELINE  # noqa: PLC0415
        from .services import CONTRIBUTION_CHECK  # noqa: PLC0415

        kind_register(JobKind.CONTRIBUTION_CHECK, CONTRIBUTION_CHECK)
        kind_register(JobKind.RELEASE_BASELINE, RELEASE_BASELINE)
