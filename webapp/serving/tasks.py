"""Celery tasks of model servers.

- serve_model: start a checkpoint's server and supervise it until it stops (webapp.serving.supervisor),
  on the serve queue, which only the serve worker consumes. Acknowledged as it starts, not at its
  end: a server runs for hours, past the broker's visibility timeout, and one whose worker died is
  not started again by itself (it is marked failed; its owner starts it again).
- reap_servers: mark live servers whose worker died as failed (Celery beat, beside the run reaper).
"""
from __future__ import annotations

from celery import shared_task


@shared_task(name="webapp.serving.tasks.serve_model", bind=True, acks_late=False, ignore_result=True)
def serve_model(self, served_id: str) -> None:
    from webapp.serving import supervisor

    supervisor.supervise(served_id, node=getattr(self.request, "hostname", "") or "")


@shared_task(name="webapp.serving.tasks.reap_servers", ignore_result=True)
def reap_servers() -> int:
    from webapp.serving import services

    return services.reap_servers()
