"""Load the demo problem set and score the demo predictions (safe to re-run)."""
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from leaderboard.importers.common import ImportProblem
from leaderboard.importers.demo import demo_load


class Command(BaseCommand):
    help = "Load demo/ as the published release 'demo' and score demo/predictions/*.jsonl plus the baselines."

    def add_arguments(self, parser):
        parser.add_argument("--path", default=str(Path(settings.BASE_DIR) / "demo"), help="demo problem set folder")
        parser.add_argument("--backend", default=None, help="sandbox backend (default: RCB_SANDBOX_BACKEND)")
        parser.add_argument("--timeout", type=float, default=20.0, help="seconds per test run")

    def handle(self, *args, path, backend, timeout, **options):
        try:
            result = demo_load(demo_dir=path, backend=backend, timeout=timeout)
        except ImportProblem as exc:
            raise CommandError(str(exc)) from None
        for line in result.warnings:
            self.stderr.write(f"warning: {line}")
        if result.scored:
            self.stdout.write(f"scored {', '.join(result.scored)} with {result.backend}")
        if result.skipped:
            self.stdout.write(f"already scored: {', '.join(result.skipped)}")
        self.stdout.write(f"demo release {result.release.name!r} is ready")
