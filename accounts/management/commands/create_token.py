"""Print a new API token for an existing user (``--create`` makes a new one, without a password): for scripts and CI."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.services import api_token_create, user_get_or_create


class Command(BaseCommand):
    help = ("Print a new API token for the existing user USERNAME; with --create, make the user (without a "
            "password: it signs in with tokens only) when there is none.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--create", action="store_true", help="create the user when there is none")
        parser.add_argument("--email", default="", help="the new user's e-mail address (with --create)")
        parser.add_argument("--name", default="created by manage.py create_token")

    def handle(self, *args, username: str, create: bool, email: str, name: str, **options):
        if create:
            user, created = user_get_or_create(username=username, email=email)
            if created:
                self.stderr.write(f"created user {username} (no password: it signs in with tokens only)")
        else:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"no user {username!r}: check the name, or add --create to make one "
                                   "(without a password)")
        _, raw = api_token_create(user=user, name=name)
        self.stdout.write(raw)
