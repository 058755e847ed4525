"""The Celery application. Tasks live in trainer.tasks (the trainer's one Django-aware module)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_routes = {
    "trainer.tasks.train_run": {"queue": "cpu"},  # overridden per run by run_create
}
app.conf.include = ["trainer.tasks"]
