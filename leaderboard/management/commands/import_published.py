"""Import a published overall_stats.json as release "v1.0 (published)"."""
import datetime as dt

from django.core.management.base import BaseCommand, CommandError

from leaderboard.importers.common import ImportProblem
from leaderboard.importers.published import PUBLISHED_RUN_DATE, published_import


class Command(BaseCommand):
    help = "Import the published ResearchCodeBench results (overall_stats.json); safe to re-run."

    def add_arguments(self, parser):
        parser.add_argument("path", help="path to overall_stats.json")
        parser.add_argument("--papers", default=None, help="papers.yaml with the paper metadata (default: beside PATH)")
        parser.add_argument("--no-default", action="store_true", help="do not make it the default release")
        parser.add_argument("--run-date", type=dt.date.fromisoformat, default=PUBLISHED_RUN_DATE,
                            help=f"day of the published run, shown as the results' date "
                                 f"(default: {PUBLISHED_RUN_DATE}, the upstream results folder's name)")

    def handle(self, *args, path, papers, no_default, run_date, **options):
        try:
            result = published_import(path=path, papers_yaml=papers, make_default=not no_default, run_date=run_date)
        except ImportProblem as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"release {result.release.name!r}: {result.papers} papers, {result.snippets} snippets, {result.models} models"
        )
        for line in result.notes:
            self.stdout.write(line)
        for line in result.mismatches:
            self.stderr.write(f"warning: {line}")
        if not result.mismatches:
            self.stdout.write("every model's scaled pass rate and pass rate match the file's overall_scores")
