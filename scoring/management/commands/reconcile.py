"""reconcile: the one watchdog of every kind of job (scoring jobs, contribution checks, release baselines)."""
import logging
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from redis.exceptions import RedisError

from contributions.release_services import baselines_reconcile
from contributions.services import contribution_reconcile
from submissions.services import scoring_queue_reconcile

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Re-enqueue from the database whatever the queues lost (Redis restart, dead worker): scoring jobs, "
        "contribution checks and release baselines; with --every S, keep doing it (the watchdog)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0, help="repeat every S seconds (0: once)")
        parser.add_argument("--stale-after", type=float, default=None,
                            help="seconds without heartbeat after which a running job counts as dead")

    def handle(self, *args, every: float, stale_after: float | None, **options):
        while True:
            try:
                report = scoring_queue_reconcile(stale_after=stale_after)
                # one watchdog for every queue: contribution checks and baselines are jobs too
                report["contributions"] = contribution_reconcile()
                report["baselines"] = baselines_reconcile()
            except (RedisError, DatabaseError) as exc:
                if not every:
                    raise CommandError(f"cannot reconcile: {exc}") from None
                logger.warning("reconcile: %s; retrying in %ss", exc, every)  # the watchdog outlives outages
            else:
                # a looping watchdog speaks only when it did something
                if not every or any(report.values()):
                    self.stdout.write(
                        f"requeued after a dead worker: {len(report['requeued'])}, failed after too many tries: "
                        f"{len(report['failed'])}, re-enqueued (lost by Redis): {len(report['reenqueued'])}, "
                        f"settled: {len(report['settled'])}, contribution checks re-queued: "
                        f"{len(report['contributions'])}, baseline jobs re-queued: {len(report['baselines'])}"
                    )
            if not every:
                return
            close_old_connections()
            time.sleep(every)
