"""Before fine-tuning: is the chosen checkpoint likely to help on the chosen dataset?

`check(checkpoint, dataset)` reads the checkpoint's pre-training record from its rows (steps,
tokens seen, validation loss and accuracy: trainer.inference.readiness.record_notes) and probes
the dataset's sentence vectors under it (trainer.inference.readiness.probe: ~64 examples, a
second or two on a CPU for a small model). The probe runs synchronously, at most once per
(checkpoint, its weights, dataset) within CACHE_S, from Django's cache; the fine-tune form and
the API show the result.

`no_gpu()` says whether no live training worker has a GPU (webapp.runs.capacity), so pages can say
what pre-training on a CPU means.

Reads only; the callers pass rows the user owns.
"""
from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache

from webapp.jobs.models import JobStatus
from webapp.runs import capacity

log = logging.getLogger(__name__)

CACHE_S = 24 * 3600
ACCURACY_KEYS = ("mlm_acc", "lm_acc")  # the pre-training objectives' validation accuracies, first found wins


def no_gpu() -> bool:
    """True when the live training workers are known and none of them has a GPU (False when Redis
    does not answer: then nothing is known)."""
    workers = capacity.live_workers()
    if workers is None:
        return False
    return not any((w.get("gpus") or 0) > 0 for w in workers)


def _valid_metrics(checkpoint) -> dict:
    valid = (checkpoint.metrics or {}).get("valid") if isinstance(checkpoint.metrics, dict) else None
    return valid if isinstance(valid, dict) else {}


def record(checkpoint) -> dict[str, Any]:
    """The checkpoint's pre-training record as pages show it, with the notes it calls for
    ({"imported": True, "notes": []} for an imported model: its record is not here)."""
    from trainer.inference.readiness import record_notes

    if checkpoint.is_imported or checkpoint.run_id is None:
        return {"imported": True, "notes": []}
    run = checkpoint.run
    valid = _valid_metrics(checkpoint)
    loss = valid.get("loss")
    accuracy = next((valid[k] for k in ACCURACY_KEYS if isinstance(valid.get(k), (int, float))), None)
    tokens = run.tokens_seen
    if run.current_step and checkpoint.step < run.current_step:  # the share seen by this step
        tokens = int(run.tokens_seen * checkpoint.step / run.current_step)
    vocab = run.tokenizer.vocab_size if run.tokenizer_id else None
    return {"imported": False, "steps": checkpoint.step, "tokens_seen": tokens, "valid_loss": loss,
            "valid_accuracy": accuracy,
            "notes": record_notes(steps=checkpoint.step, tokens_seen=tokens, valid_loss=loss, valid_accuracy=accuracy,
                                  vocab_size=vocab)}


def _weights_stamp(checkpoint) -> int:
    try:
        return (checkpoint.folder / "model.safetensors").stat().st_mtime_ns
    except OSError:
        return 0


def probe(checkpoint, dataset) -> dict[str, Any]:
    """trainer.inference.readiness.probe of the dataset under the checkpoint, cached; {"error":
    sentence} when it cannot be made (not an encoder, files missing)."""
    from trainer.errors import UserError
    from trainer.inference.readiness import probe as run_probe

    key = f"readiness:{checkpoint.pk}:{_weights_stamp(checkpoint)}:{dataset.pk}"
    found = cache.get(key)
    if found is not None:
        return found
    try:
        found = run_probe(checkpoint.folder, dataset.data_dir)
    except UserError as e:
        found = {"error": str(e)}
    except Exception:  # noqa: BLE001 - the form works without the probe
        log.exception("Readiness probe of checkpoint %s on dataset %s failed", checkpoint.pk, dataset.pk)
        found = {"error": "The checkpoint's sentence vectors could not be computed."}
    cache.set(key, found, CACHE_S)
    return found


def check(checkpoint, dataset) -> dict[str, Any]:
    """{"record", "probe" (None without a ready dataset), "warn": whether the checkpoint is
    unlikely to help, "collapsed": whether its sentence vectors are nearly identical}."""
    rec = record(checkpoint)
    found = probe(checkpoint, dataset) if dataset is not None and dataset.status == JobStatus.READY else None
    collapsed = bool(found and found.get("collapsed"))
    return {"record": rec, "probe": found, "collapsed": collapsed, "warn": collapsed or bool(rec["notes"])}


def _chosen(user, form, name: str, lookup):
    """The row the form has for `name` (posted, else its initial value) when the user owns it, else None."""
    from django.http import Http404

    value = form.data.get(name) if form.is_bound else form.initial.get(name)
    if value in (None, ""):
        return None
    try:
        return lookup(user, getattr(value, "pk", value))
    except Http404:
        return None


def form_context(user, form) -> dict[str, Any]:
    """What the fine-tune form's readiness include (templates/runs/_readiness.html) shows: the
    check of the chosen checkpoint on the chosen dataset (None until a checkpoint is chosen) and
    whether no worker has a GPU."""
    from webapp.datasets.selectors import dataset_get
    from webapp.runs.selectors import checkpoint_get

    checkpoint = _chosen(user, form, "checkpoint", checkpoint_get)
    dataset = _chosen(user, form, "dataset", dataset_get)
    return {"readiness": check(checkpoint, dataset) if checkpoint is not None else None,
            "readiness_checkpoint": checkpoint, "no_gpu": no_gpu()}
