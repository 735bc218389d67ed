"""Print a new API token for a user (made without a password if new): for scripts and CI."""
from django.core.management.base import BaseCommand

from accounts.services import api_token_create, user_get_or_create


class Command(BaseCommand):
    help = "Print a new API token for USERNAME, creating the user (without a password) if needed."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument("--name", default="created by manage.py create_token")

    def handle(self, *args, username: str, email: str, name: str, **options):
        user, created = user_get_or_create(username=username, email=email)
        if created:
            self.stderr.write(f"created user {username}")
        _, raw = api_token_create(user=user, name=name)
        self.stdout.write(raw)
