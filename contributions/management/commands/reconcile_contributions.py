import datetime as dt
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from redis.exceptions import RedisError

from contributions.release_services import baselines_reconcile
from contributions.services import contribution_reconcile


class Command(BaseCommand):
    help = ("Queue again, from the database, the contribution checks and release baselines whose jobs Redis "
            "lost or whose worker died; with --every S, keep doing it.")

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0, help="repeat every S seconds (0: once)")
        parser.add_argument("--stale-after", type=float, default=None,
                            help="seconds 'validating' after which a check counts as dead (default: job timeout + 60)")

    def handle(self, *args, every: float, stale_after: float | None, **options):
        while True:
            try:
                stale = dt.timedelta(seconds=stale_after) if stale_after is not None else None
                checks, baselines = contribution_reconcile(stale_after=stale), baselines_reconcile()
            except RedisError as exc:
                if not every:
                    raise CommandError(f"Redis is not reachable: {exc}") from None
                self.stderr.write(f"Redis is not reachable ({exc}); retrying")
            else:
                self.stdout.write(f"contribution checks queued again: {len(checks)}, baseline jobs queued again: "
                                  f"{len(baselines)}")
            if not every:
                return
            close_old_connections()
            time.sleep(every)
