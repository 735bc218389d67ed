from django.core.management.base import BaseCommand, CommandError

from catalog.models import Release
from scoring.health import environment_jobs_requeue


class Command(BaseCommand):
    help = (
        "Once a paper's environment is repaired, queue again the jobs that ended in an environment error (a "
        "submission's paper, a release baseline); their submissions leave 'waiting'. A job whose environment "
        "still fails waits again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--paper", default="", help="only this paper's jobs (paper id, e.g. DyT)")
        parser.add_argument("--release", default="", help="only jobs of this release (slug)")

    def handle(self, *args, paper: str, release: str, **options):
        target = None
        if release:
            target = Release.objects.filter(slug=release).first()
            if target is None:
                raise CommandError(f"no release with slug {release!r}")
        requeued = environment_jobs_requeue(paper_id=paper.strip() or None, release=target)
        what = f" of paper {paper}" if paper else ""
        self.stdout.write(f"queued again: {len(requeued)} job(s){what} that waited for their environment")
