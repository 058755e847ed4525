"""The worker's side of a run (a Celery task, webapp.runs.tasks.train_run): claim it, train or
fine-tune it with a database+websocket sink, record how it ended, or queue it again when the
worker is told to stop. The web's launch commands are webapp.runs.services; crashed runs are
found by webapp.runs.reaper."""
from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from trainer.config import RunConfig
from trainer.errors import ConfigError, UserError
from webapp.server.storage import is_disk_full
from webapp.runs import capacity, multiproc, shutdown
from webapp.runs.events import send_run_event, status_event
from webapp.runs.models import MetricPoint, Run, RunKind, RunStatus
from webapp.runs.queueing import announce_end, enqueue, publish_on_commit
from webapp.runs.reaper import mark_dead_claims, mark_stale_runs
from webapp.runs.sink import DatabaseChannelsSink, StopCheck

log = logging.getLogger(__name__)

# How a run that found the disk full ends (the worker keeps trying to write it until there is room).
RUN_DISK_FULL = ("The disk is full: the server's storage had no space left for this run's metrics, log or "
                 "checkpoints, so it stopped. Its saved checkpoints are intact; free some space (delete runs, "
                 "checkpoints or corpora you no longer need), then resume it.")
END_RETRY_S = 2.0  # how often a worker tries again to record a run's end that the full disk refused


def resume_point(run_folder: Path) -> tuple[int, Path] | None:
    """(step, folder) of the newest checkpoint a resume continues from, or None."""
    from trainer.training import checkpoints

    folder = checkpoints.latest_resumable(run_folder)
    if folder is None:
        return None
    return int(checkpoints.read_state(folder)["step"]), folder


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_execute(*, run_id) -> None:
    """Claim a queued run, train it with a database+websocket sink, record how it ended.

    A redelivered task finds the row no longer queued and returns without doing anything.
    """
    me = worker_name()
    # A redelivered task of a dead worker's run: crashed (at once when its process on this host
    # is gone, as when a pool child is killed), not claimed again.
    mark_dead_claims(run_id=run_id)
    mark_stale_runs(run_id=run_id)
    if not _claim(run_id, me):
        log.info("Run %s is not queued (already claimed, cancelled or deleted); nothing to do.", run_id)
        return
    run = Run.objects.select_related("tokenizer", "dataset", "base_checkpoint").get(pk=run_id)
    sink = DatabaseChannelsSink(run.id, claimed_by=me)
    status, error, final_step = RunStatus.FAILED, "", run.current_step
    try:
        status, final_step = _run_engine(run, sink, me)
    except UserError as exc:
        error = str(exc)
        status = getattr(exc, "status", status)  # multiproc.ProcessesCrashed: crashed, not failed
    except Exception as exc:  # noqa: BLE001 - any bug becomes a failed run with a sentence, never a stuck one
        if is_disk_full(exc):  # a write of the sink (a point, a log line, the heartbeat, a checkpoint's row)
            log.warning("Run %s stopped: the disk is full (%s)", run_id, exc)
            error = RUN_DISK_FULL
        else:
            log.exception("Run %s stopped with an internal error", run_id)
            error = f"Training stopped with an internal error: {type(exc).__name__}: {exc}"
            _safe_log(sink, "".join(traceback.format_exception(exc)).rstrip())
    finally:
        if not (status == RunStatus.CANCELLED and requeue_on_shutdown(run, sink, me=me, step=final_step)):
            _finish(run, sink, me=me, status=status, error=error, final_step=final_step)


def _claim(run_id, me: str) -> bool:
    """queued -> running in one UPDATE: of two workers given the same run, exactly one wins."""
    now = timezone.now()
    return bool(Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, claimed_by=me, heartbeat_at=now, finished_at=None, cancel_requested=False,
        error="", started_at=Coalesce(F("started_at"), Value(now, output_field=DateTimeField())),
    ))


def _run_engine(run: Run, sink: DatabaseChannelsSink, me: str) -> tuple[str, int]:
    """Train or fine-tune the run with the engine of its kind, from its last checkpoint when it has
    one (a resume), with the sink, cancel check and heartbeat every run has; -> (status, final step).
    A pre-training run that this worker gives several devices trains under torchrun
    (webapp.runs.multiproc)."""
    from trainer.training.checkpoints import list_checkpoints

    tuning = run.kind == RunKind.FINETUNE
    if tuning and (run.base_checkpoint_id is None or run.dataset_id is None):
        raise ConfigError("The checkpoint or the dataset of this fine-tuning run was deleted.")
    if tuning:
        from trainer.finetune.config import FinetuneConfig

        config = FinetuneConfig.from_dict(run.config)
    else:
        config = RunConfig.from_dict(run.config)
    resume = bool(list_checkpoints(run.folder))  # the engine refuses to start over existing checkpoints
    resume_from = resume_point(run.folder) if resume else None
    _prepare_history(run, resume_from)
    lineage = f": {run.lineage}" if tuning else ""
    sink.log(f"Resuming on {me} from the checkpoint at step {resume_from[0]}{lineage}." if resume_from
             else f"Started on {me} ({run.queue} queue){lineage}.")
    send_run_event(run.id, {**status_event(run), "resumed_from": resume_from[0] if resume_from else None})
    run.folder.mkdir(parents=True, exist_ok=True)
    stop = StopCheck(run.id, claimed_by=me)
    if tuning:
        from trainer.finetune.engine import finetune  # imports torch: only workers pay for it

        result = finetune(config, out_dir=run.folder, sink=sink, should_stop=stop, resume=resume)
    else:
        processes = capacity.devices_here(config)  # what this worker gives the run, or a sentence why not
        if processes > 1:  # torchrun in a process group of its own (webapp.runs.multiproc)
            return multiproc.train(run, config, sink, stop, processes=processes, resume=resume)
        from trainer.training.engine import train  # imports torch: only workers pay for it

        result = train(config, data_dir=run.tokenizer.folder, out_dir=run.folder, sink=sink, should_stop=stop,
                       resume=resume)
    return (RunStatus.CANCELLED if result.status == "cancelled" else RunStatus.SUCCEEDED), result.final_step


def _prepare_history(run: Run, resume_from: tuple[int, Path] | None) -> None:
    """Drop metric points the resumed run will produce again (logged after its last checkpoint)."""
    if resume_from:
        step = resume_from[0]
        MetricPoint.objects.filter(run=run, step__gt=step).delete()
        Run.objects.filter(pk=run.pk).update(current_step=step)
        run.current_step = step
    else:
        MetricPoint.objects.filter(run=run).delete()  # a fresh start: no stale history


def _safe_log(sink: DatabaseChannelsSink, text: str) -> bool:
    """Write a log line of the run; False when it could not be written."""
    try:
        sink.log(text)
    except Exception:  # noqa: BLE001 - the database itself may be what failed
        log.warning("Could not write a log line", exc_info=True)
        return False
    return True


def _finish(run: Run, sink: DatabaseChannelsSink, *, me: str, status: str, error: str, final_step: int) -> None:
    try:
        sink.close()
    except Exception:  # noqa: BLE001
        log.exception("Could not write the last heartbeat of run %s", run.id)
    line = error or f"Finished: {RunStatus(status).label.lower()} at step {final_step}."
    logged = _safe_log(sink, line)
    updates: dict[str, Any] = {
        "status": status, "error": error, "finished_at": timezone.now(), "cancel_requested": False,
        "heartbeat_at": timezone.now(),
    }
    if not error:
        updates["current_step"] = final_step
    ended = _record_end(run, me=me, updates=updates)
    if ended is None:
        return  # still no room, and the worker is shutting down: the reaper ends the run later
    if not logged:
        _safe_log(sink, line)  # the disk had no room for it before the end was written
    try:
        run.refresh_from_db()
    except Run.DoesNotExist:
        return  # deleted while it trained
    send_run_event(run.id, status_event(run))
    if ended:
        announce_end(run.id, status)


def _record_end(run: Run, *, me: str, updates: dict[str, Any]) -> int | None:
    """Write how the run ended; returns how many rows changed (0: not this worker's run any more).

    Only the worker that owns the run records its end (a resume elsewhere may have taken it over).
    When the disk is full the row cannot be written either (SQLite shares the volume), so the
    worker tries again every END_RETRY_S until it can: the run then ends with its own sentence as
    soon as there is room, instead of staying "running" until the reaper calls it silent. (A
    reaper that got there first is overruled: the claim is still this worker's.) None when the
    worker is told to stop meanwhile."""
    while True:
        try:
            return Run.objects.filter(pk=run.pk, claimed_by=me).update(**updates)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            if shutdown.requested():
                log.error("Run %s: the disk is full and the worker is stopping; its end was not recorded", run.pk)
                return None
            log.warning("Run %s: the disk is full; trying again in %s s to record its end", run.pk, END_RETRY_S)
            time.sleep(END_RETRY_S)


def requeue_on_shutdown(run: Run, sink: DatabaseChannelsSink, *, me: str, step: int) -> bool:
    """After the engine stopped because this worker is shutting down (webapp.runs.shutdown; the
    engine saved a checkpoint at `step`): the run is queued again and its task sent again, so the
    next worker resumes it from that checkpoint (a fine-tuning run, which has no resume, starts
    over). False, with nothing changed, when the worker is not shutting down or the run is no
    longer this worker's to requeue (a cancel requested meanwhile wins: the run ends cancelled)."""
    if not shutdown.requested():
        return False
    try:
        sink.close()
    except Exception:  # noqa: BLE001
        log.exception("Could not write the last heartbeat of run %s", run.id)
    updates: dict[str, Any] = {"status": RunStatus.QUEUED, "claimed_by": "", "heartbeat_at": None}
    if run.kind != RunKind.FINETUNE:
        updates["current_step"] = step
    with transaction.atomic():
        if not Run.objects.filter(pk=run.pk, claimed_by=me, status=RunStatus.RUNNING,
                                  cancel_requested=False).update(**updates):
            return False
        run.refresh_from_db()
        enqueue(run)
        publish_on_commit(run)
    then = ("starts it over (a fine-tuning run cannot resume)" if run.kind == RunKind.FINETUNE
            else f"resumes it from the checkpoint at step {step}")
    _safe_log(sink, f"The worker {me} is shutting down: the run stopped at step {step} and is queued again; "
                    f"the next worker {then}.")
    log.info("Run %s requeued at step %s: the worker is shutting down", run.id, step)
    return True
