"""The Celery application. Tasks live in each app's tasks.py (webapp/corpora, runs, explorer, datasets),
found by autodiscovery; each takes an id and calls its service. The beat schedule (settings:
CELERY_BEAT_SCHEDULE) sends the periodic ones, e.g. the crashed-run reaper."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_routes = {
    "trainer.tasks.train_run": {"queue": "cpu"},  # overridden per run by run_create
    "webapp.runs.tasks.reap_stale_runs": {"queue": "maintenance"},  # never behind a training run
}
app.autodiscover_tasks()  # <app>/tasks.py of every installed app

# A warm shutdown (SIGTERM) stops training runs at their next step and requeues them.
from webapp.runs import shutdown  # noqa: E402,F401 - connects its receivers to the worker's signals
