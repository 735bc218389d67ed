"""workers: N supervised RQ workers (``scoring.workers``), the way scripts/run.sh runs them."""
import os

from django.core.management.base import BaseCommand, CommandError

from scoring.queue import CONTRIBUTIONS, SCORING
from scoring.workers import WorkerSupervisor, rqworker_command


class Command(BaseCommand):
    help = (
        "Run N RQ workers (manage.py rqworker) on the given queues and keep them running: a worker that ends "
        "(Redis unreachable, killed) is started again after a pause that grows with quick failures in a row. "
        "SIGTERM/SIGINT are passed on to the workers (RQ's warm shutdown; a second one is its cold shutdown)."
    )

    def add_arguments(self, parser):
        parser.add_argument("queues", nargs="*", help=f"queues to work on (default: {SCORING} {CONTRIBUTIONS} default)")
        parser.add_argument("--count", type=int, default=int(os.environ.get("RCB_WORKERS") or 1),
                            help="how many workers (default: RCB_WORKERS, else 1)")
        parser.add_argument("--max-backoff", type=float, default=30.0,
                            help="longest pause in seconds before starting an ended worker again (default 30)")

    def handle(self, *args, queues: list[str], count: int, max_backoff: float, **options):
        if count < 1:
            raise CommandError("--count must be at least 1")
        if max_backoff <= 0:
            raise CommandError("--max-backoff must be positive")
        queues = queues or [SCORING, CONTRIBUTIONS, "default"]
        extra = [] if options["verbosity"] == 1 else ["-v", str(options["verbosity"])]

        def say(line: str) -> None:
            self.stdout.write(f"[workers] {line}")
            self.stdout.flush()

        # the workers' settings share the host's cores between them (RCB_SCORING_THREADS' default:
        # the cores // RCB_WORKERS runs at once per job, rcbsite/settings.py)
        os.environ["RCB_WORKERS"] = str(count)
        WorkerSupervisor(rqworker_command(queues, *extra), count=count, max_backoff=max_backoff, say=say).run()
