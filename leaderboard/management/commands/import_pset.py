"""Load a problem-set folder into a release (or attach it to the published one it matches)."""
from django.core.management.base import BaseCommand, CommandError

from leaderboard.importers.common import ImportProblem
from leaderboard.importers.pset import pset_import


class Command(BaseCommand):
    help = "Load a problem-set folder (papers.yaml + paper folders) into a draft release; safe to re-run."

    def add_arguments(self, parser):
        parser.add_argument("path", help="problem-set folder")
        parser.add_argument("--release", default=None, help="release name (default: the folder's name)")

    def handle(self, *args, path, release, **options):
        try:
            result = pset_import(path=path, release_name=release)
        except ImportProblem as exc:
            raise CommandError(str(exc)) from None
        how = "attached to the published release" if result.attached else f"loaded into {result.release.status} release"
        self.stdout.write(f"{result.papers} papers, {result.snippets} snippets {how} {result.release.name!r}")
        if result.attached:
            from catalog.ranking import release_scorability

            scorable = release_scorability(release=result.release)
            if scorable.not_scorable:
                self.stdout.write(
                    f"{len(scorable.scorable)} papers of the release can be scored here; not the "
                    f"{len(scorable.not_scorable)} without their code: "
                    + ", ".join(row["paper"] for row in scorable.not_scorable)
                )
        for line in result.warnings:
            self.stderr.write(f"warning: {line}")
