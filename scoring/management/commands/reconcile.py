"""reconcile: the one watchdog of every kind of job (``scoring.jobs.jobs_reconcile``)."""
import logging
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, close_old_connections
from redis.exceptions import RedisError

from scoring.jobs import jobs_reconcile

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Re-enqueue from the database whatever the queues lost (Redis restart, dead worker), for every kind of "
        "job (submission papers, contribution checks, release baselines); with --every S, keep doing it "
        "(the watchdog)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0, help="repeat every S seconds (0: once)")
        parser.add_argument("--stale-after", type=float, default=None,
                            help="seconds without heartbeat after which a running job counts as dead")

    def handle(self, *args, every: float, stale_after: float | None, **options):
        while True:
            try:
                report = jobs_reconcile(stale_after=stale_after)
            except (RedisError, DatabaseError) as exc:
                if not every:
                    raise CommandError(f"cannot reconcile: {exc}") from None
                logger.warning("reconcile: %s; retrying in %ss", exc, every)  # the watchdog outlives outages
            else:
                # a looping watchdog speaks only when it did something
                if not every or any(report.values()):
                    swept = ", ".join(f"{key.split(':', 1)[1]} repaired: {len(ids)}"
                                      for key, ids in report.items() if key.startswith("swept:"))
                    self.stdout.write(
                        f"requeued after a dead worker: {len(report['requeued'])}, failed after too many tries: "
                        f"{len(report['failed'])}, re-enqueued (lost by Redis): {len(report['reenqueued'])}, "
                        f"retried after a failure: {len(report['retried'])}" + (f", {swept}" if swept else "")
                    )
            if not every:
                return
            close_old_connections()
            time.sleep(every)
