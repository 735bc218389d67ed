"""Publish the successor of a release without some snippets, and re-score everything onto it."""
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from contributions.errata import release_errata
from contributions.succession import release_default_switch_warning
from catalog.models import Release
from contributions.selectors import release_succession


class Command(BaseCommand):
    help = ("Errata: create and publish the successor of release SLUG without the --retire snippets, with a "
            "public changelog; the predecessor's public evaluations are re-scored onto it (or carried over).")

    def add_arguments(self, parser):
        parser.add_argument("slug", help="the release to correct")
        parser.add_argument("--retire", nargs="+", required=True, metavar="PAPER/SNIPPET",
                            help='snippets to retire, e.g. rope/"attention scores" (nested snippets go too)')
        parser.add_argument("--reason", required=True, help="why (shown on the release page)")
        parser.add_argument("--name", default="", help="name of the new release (default: '<name> (errata N)')")

    def handle(self, *args, slug, retire, reason, name, **options):
        release = Release.objects.filter(slug=slug).first()
        if release is None:
            known = ", ".join(Release.objects.values_list("slug", flat=True)) or "none"
            raise CommandError(f"no release {slug!r} (known: {known})")
        try:
            new = release_errata(release=release, retire=retire, reason=reason, name=name)
        except ValidationError as exc:
            raise CommandError("\n".join(exc.messages)) from None
        retired = [e for e in new.changelog if e.get("release") == new.slug]
        self.stdout.write(f"release {new.name!r} ({new.slug}) published: {len(retired)} snippet(s) retired")
        for entry in retired:
            self.stdout.write(f"  retired {entry['paper']}/{entry['snippet']}")
        succession = release_succession(release=new)
        self.stdout.write(f"{len(succession.rescoring)} evaluation(s) queued for re-scoring, "
                          f"{len(succession.carried)} carried over (their unchanged snippets)")
        if new.is_default:
            warning = release_default_switch_warning(release=new)
            self.stdout.write(f"it is the default release now{': ' + warning if warning else ''}")
