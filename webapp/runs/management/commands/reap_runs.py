"""manage.py reap_runs: mark running runs whose worker stopped sending heartbeats as crashed."""
from django.conf import settings
from django.core.management.base import BaseCommand

from webapp.runs.reaper import mark_stale_runs


class Command(BaseCommand):
    help = "Mark runs whose worker has been silent longer than RUN_HEARTBEAT_TIMEOUT_S as crashed."

    def handle(self, *args, **options):
        count = mark_stale_runs()
        timeout = getattr(settings, "RUN_HEARTBEAT_TIMEOUT_S", 120)
        self.stdout.write(f"Marked {count} run{'s' if count != 1 else ''} as crashed "
                          f"(no heartbeat for more than {timeout} s).")
