"""Generate a synthetic release at scale for bench/ (replaces the previous one): bench.synthetic does it."""
from django.core.management.base import BaseCommand, CommandError

from bench.synthetic import synthetic_generate


class Command(BaseCommand):
    help = "Replace the release 'synthetic' by random models x snippets x samples (bulk writes)."

    def add_arguments(self, parser):
        parser.add_argument("--models", type=int, default=100)
        parser.add_argument("--snippets", type=int, default=2000)
        parser.add_argument("--samples", type=int, default=5)
        parser.add_argument("--papers", type=int, default=50)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, models, snippets, samples, papers, seed, **options):
        if min(models, snippets, samples, papers) < 1 or papers > snippets:
            raise CommandError("--models, --snippets, --samples and --papers must be positive, papers <= snippets")
        release = synthetic_generate(models=models, snippets=snippets, samples=samples, papers=papers, seed=seed,
                                     log=self.stdout.write)
        self.stdout.write(f"release {release.name!r} (slug {release.slug}) is ready")
