"""The web side of model servers: start one (the same one when the checkpoint already has a live
server), ask it to stop, read where it stands, and mark a server whose worker died as failed.

The web process never runs a server: serve_start stores a ServedModel row (starting) and sends
webapp.serving.tasks.serve_model to the serve queue once the row is committed; the serve worker
that takes it runs webapp.serving.supervisor. serve_stop only changes the row (stopping); the
supervisor sees that within a second and stops the process. Every read by a page or the API
goes through `current` / `refreshed`, which marks a server failed when its worker is known to
be gone (mark_dead), as the scheduler's periodic reap_servers does for all of them.
"""
from __future__ import annotations

import logging
import socket
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from trainer.errors import UserError
from webapp.runs.models import Checkpoint
from webapp.serving.models import LIVE, ServedModel, ServeStatus

log = logging.getLogger(__name__)

FILES_GONE = "This checkpoint's files are no longer on disk, so it cannot be served."
QUEUE_DOWN = ("The server could not be started because the task queue (Redis) did not answer. Check that Redis and "
              "the serve worker are running, then start it again.")
STOPPED_BY_USER = "Stopped by you."
STOPPED_BEFORE_START = "Stopped before a serve worker took it."


class ServeRefused(UserError):
    """The row's state does not allow the request (HTTP 409)."""

    status_code = 409


class TooManyServers(UserError):
    status_code = 429


# ---------------------------------------------------------------------------- reads
def latest(checkpoint: Checkpoint) -> ServedModel | None:
    """The checkpoint's newest server row (live or not), or None if it was never served."""
    return ServedModel.objects.select_related("checkpoint", "checkpoint__run").filter(
        checkpoint=checkpoint).first()


def current(checkpoint: Checkpoint) -> ServedModel | None:
    """latest(), once a live server whose worker died is marked failed (mark_dead)."""
    served = latest(checkpoint)
    if served is not None and served.is_live and mark_dead(served):
        served.refresh_from_db()
    return served


def servers_for(user):
    """The user's servers, newest first (the live ones' dead workers found as they are read)."""
    rows = list(ServedModel.objects.select_related("checkpoint", "checkpoint__run").filter(owner=user))
    for served in rows:
        if served.is_live and mark_dead(served):
            served.refresh_from_db()
    return rows


def server_get(user, served_id) -> ServedModel:
    """One of the user's servers; ServedModel.DoesNotExist for another user's or a missing one."""
    served = ServedModel.objects.select_related("checkpoint", "checkpoint__run").get(pk=served_id, owner=user)
    if served.is_live and mark_dead(served):
        served.refresh_from_db()
    return served


def model_name(checkpoint: Checkpoint) -> str:
    """The model id the server is started with (--name), what requests send as "model"."""
    return (slugify(checkpoint.label) or "model")[:200]


# ---------------------------------------------------------------------------- writes
def serve_start(*, checkpoint: Checkpoint) -> tuple[ServedModel, bool]:
    """Start serving the checkpoint unless it has a live server; returns (the row, whether a new
    server was queued). ServeRefused while its server is stopping, TooManyServers past
    SERVE_MAX_PER_USER, UserError when its files are gone."""
    existing = current(checkpoint)
    if existing is not None and existing.is_live:
        return _same(existing)
    if not (checkpoint.folder / "model_config.json").is_file():
        raise UserError(FILES_GONE)
    if checkpoint.run_id is not None:  # its run's retention keeps what a server reads (trainer.training.retention)
        from webapp.runs.retention import set_pinned

        try:
            set_pinned(checkpoint, True)
        except UserError:  # not a whole checkpoint on disk: the server itself says what is missing
            pass
    most = int(settings.SERVE_MAX_PER_USER)
    if ServedModel.objects.filter(owner_id=checkpoint.owner_id, status__in=LIVE).count() >= most:
        raise TooManyServers(f"You have {most} model servers running, the most one user may have at once "
                             f"(SERVE_MAX_PER_USER). Stop one first.")
    try:
        with transaction.atomic():
            served = ServedModel.objects.create(owner_id=checkpoint.owner_id, checkpoint=checkpoint,
                                                model_name=model_name(checkpoint))
            _enqueue(served)
    except IntegrityError:  # started at the same moment by another request: that one is the server
        live = ServedModel.objects.filter(checkpoint=checkpoint, status__in=LIVE).first()
        if live is None:
            raise
        return _same(live)
    return served, True


def _same(served: ServedModel) -> tuple[ServedModel, bool]:
    if served.status == ServeStatus.STOPPING:
        raise ServeRefused("This checkpoint's server is stopping; start it again once it has stopped.")
    return served, False


def _enqueue(served: ServedModel) -> None:
    from webapp.serving.tasks import serve_model

    pk = served.pk

    def send() -> None:
        try:
            serve_model.apply_async(args=[str(pk)], queue=settings.SERVE_QUEUE)
        except Exception:  # the broker is down: a sentence on the page instead of "starting" for ever
            log.exception("Could not enqueue the server %s", pk)
            ServedModel.objects.filter(pk=pk, status=ServeStatus.STARTING, node="").update(
                status=ServeStatus.FAILED, error=QUEUE_DOWN, stopped_at=timezone.now())

    transaction.on_commit(send)


def serve_stop(*, served: ServedModel) -> ServedModel:
    """Ask a live server to stop: one no worker has taken yet is stopped at once; otherwise the row
    says stopping and its supervisor stops the process (SIGTERM, then SIGKILL after
    SERVE_STOP_GRACE_S) and marks it stopped. A server that is not live is answered as it is."""
    now = timezone.now()
    if not ServedModel.objects.filter(pk=served.pk, status=ServeStatus.STARTING, node="").update(
            status=ServeStatus.STOPPED, stop_reason=STOPPED_BEFORE_START, stopped_at=now):
        ServedModel.objects.filter(pk=served.pk, status__in=(ServeStatus.STARTING, ServeStatus.SERVING)).update(
            status=ServeStatus.STOPPING, stop_reason=STOPPED_BY_USER)
    served.refresh_from_db()
    if served.is_live and mark_dead(served):
        served.refresh_from_db()
    return served


# ---------------------------------------------------------------------------- dead workers
def _process_alive(pid: int) -> bool:
    from webapp.runs.reaper import _process_alive as alive

    return alive(pid)


def death(served: ServedModel, *, now=None) -> str:
    """Why a claimed live server's worker counts as gone, a sentence; "" while it lives. On the
    worker's own machine its process is looked up; anywhere, a heartbeat older than
    SERVE_HEARTBEAT_TIMEOUT_S means it went silent."""
    if not served.is_live or not served.claimed:
        return ""
    if served.machine == socket.gethostname() and served.worker_pid and not _process_alive(served.worker_pid):
        return (f"The serve worker process that supervised it (pid {served.worker_pid} on {served.machine}) died, "
                f"and its model server with it. Start it again.")
    now = now or timezone.now()
    seen = served.seen_at or served.created_at
    if seen < now - timedelta(seconds=int(settings.SERVE_HEARTBEAT_TIMEOUT_S)):
        return (f"The serve worker supervising it ({served.node or 'an unknown worker'}) stopped answering "
                f"(last seen {seen:%Y-%m-%d %H:%M:%S} UTC). Start it again.")
    return ""


def mark_dead(served: ServedModel, *, now=None) -> bool:
    """Mark the server failed if its worker is gone (death); whether it did."""
    reason = death(served, now=now)
    if not reason:
        return False
    changed = ServedModel.objects.filter(pk=served.pk, status=served.status, worker_pid=served.worker_pid,
                                         seen_at=served.seen_at).update(
        status=ServeStatus.FAILED, error=reason, stopped_at=now or timezone.now())
    if changed:
        log.warning("Model server %s failed: %s", served.pk, reason)
    return bool(changed)


def reap_servers(*, now=None) -> int:
    """Mark every live server whose worker is gone as failed; returns how many (the periodic task)."""
    return sum(mark_dead(served, now=now) for served in ServedModel.objects.filter(status__in=LIVE).exclude(node=""))
