"""The Celery application. Tasks live in each app's tasks.py (webapp/corpora, runs, explorer, datasets),
found by autodiscovery; each takes an id and calls its service. The beat schedule (settings:
CELERY_BEAT_SCHEDULE) sends the periodic ones, e.g. the crashed-run reaper."""
import os

from celery import Celery
from celery.signals import celeryd_after_setup, worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_routes = {
    "trainer.tasks.train_run": {"queue": "cpu"},  # overridden per run by run_create
    "webapp.runs.tasks.reap_stale_runs": {"queue": "maintenance"},  # never behind a training run
    "webapp.sweeps.tasks.advance_sweeps": {"queue": "maintenance"},
    "webapp.serving.tasks.serve_model": {"queue": "serve"},  # a model server: only the serve worker's
    "webapp.serving.tasks.reap_servers": {"queue": "maintenance"},
}
app.autodiscover_tasks()  # <app>/tasks.py of every installed app


@worker_init.connect
def lower_worker_priority(**_) -> None:
    """Run the worker (and so the pool children it forks, and their torch threads) at the CPU
    priority settings.WORKER_NICENESS (default 10, 0 keeps the launcher's): where training and
    the web server share cores, a page or API request and a run's live events are served first,
    and training takes every cycle they leave. Only ever lowers the priority (an unprivileged
    process cannot raise it back)."""
    from django.conf import settings

    target = int(getattr(settings, "WORKER_NICENESS", 0))
    if target > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, min(19, target))


# A warm shutdown (SIGTERM) stops training runs at their next step and requeues them.
from webapp.runs import shutdown  # noqa: E402,F401 - connects its receivers to the worker's signals

# A training worker takes the runs it can give their devices: as it starts it adds the queues of
# the device counts it serves ("gpu.x2" ... for its GPUs) and advertises them in Redis while it
# lives (webapp/runs/capacity.py).
from webapp.runs import capacity  # noqa: E402

celeryd_after_setup.connect(capacity.on_worker_setup)
worker_process_init.connect(capacity.on_child_start)
app.steps["worker"].add(capacity.Advertise)
