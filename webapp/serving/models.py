"""A model server's row: what the page, the API and the worker that supervises it share.

starting (waiting for a serve worker, then for the server to listen) -> serving -> stopping ->
stopped; failed with a sentence from any of them (the server exited, refused to start, or its
worker died). At most one live (starting, serving, stopping) row per checkpoint: starting twice
gives the same server. A row is never reused: each start is a new row, so a worker still winding
down an old server only ever writes its own.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ServeStatus(models.TextChoices):
    STARTING = "starting", "Starting"
    SERVING = "serving", "Serving"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"


LIVE = (ServeStatus.STARTING, ServeStatus.SERVING, ServeStatus.STOPPING)


class ServedModel(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="served_models")
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="servers")
    status = models.CharField(max_length=20, choices=ServeStatus.choices, default=ServeStatus.STARTING)
    model_name = models.CharField(max_length=200)  # the server's model id (--name): what requests send as "model"
    host = models.CharField(max_length=255, blank=True)  # where clients reach it (SERVE_PUBLIC_HOST or the listen host)
    port = models.PositiveIntegerField(null=True, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)  # the server's process, on `machine`
    node = models.CharField(max_length=255, blank=True)  # the Celery node name of the worker that supervises it
    machine = models.CharField(max_length=255, blank=True)  # that worker's host name (pids are checked there)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)  # the worker process that supervises it
    endpoints = models.JSONField(default=list, blank=True)  # the server's /v1/capabilities, once it listens
    key_fingerprint = models.CharField(max_length=64, blank=True)  # of the API token it was started with
    error = models.TextField(blank=True)  # why it failed, a sentence
    stderr_tail = models.TextField(blank=True)  # the last lines the server wrote to stderr, when it failed
    stop_reason = models.CharField(max_length=300, blank=True)  # why it stopped (asked to, its worker shut down)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)  # serving since
    seen_at = models.DateTimeField(null=True, blank=True)  # the supervisor's last heartbeat
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["checkpoint"], condition=models.Q(status__in=[s.value for s in LIVE]),
                                    name="one_live_server_per_checkpoint"),
        ]

    def __str__(self) -> str:
        return f"Server of {self.checkpoint_id} ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in LIVE

    @property
    def claimed(self) -> bool:
        """A worker has taken it (before that it waits in the queue)."""
        return bool(self.node)

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL clients use, once it listens; else ""."""
        if self.status != ServeStatus.SERVING or not self.port:
            return ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"
