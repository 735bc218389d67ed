"""Hold a release out (tasks and code for staff only; only evaluations run here) or make it public."""
from django.core.management.base import BaseCommand, CommandError

from catalog.models import Release
from catalog.releases import ReleaseVisibilityError, release_held_out_set


class Command(BaseCommand):
    help = "Mark a release held out (--held-out) or public (--public); says what becomes visible."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--held-out", action="store_true", help="tasks, reference and paper code for staff only")
        which.add_argument("--public", action="store_true", help="serve its tasks and code to everyone")
        parser.add_argument("--force", action="store_true", help="hold out a release that is already published")

    def handle(self, *args, slug, held_out, public, force, **options):
        release = Release.objects.filter(slug=slug).first()
        if release is None:
            raise CommandError(f"no release {slug!r}")
        try:
            self.stdout.write(release_held_out_set(release=release, held_out=held_out, force=force))
        except ReleaseVisibilityError as exc:
            raise CommandError(str(exc)) from None
