"""Shared by the tests that need a fine-tuned checkpoint: a demo dataset ingested, and a short
fine-tuning run on it from a pre-training checkpoint."""
from __future__ import annotations

from pathlib import Path

from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


def ingested_demo(name: str, root: Path) -> Path:
    """The demo dataset `name` written and ingested into root/name (its data folder)."""
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    source = write_demo_dataset(name, root / DEMOS[name].filename)
    preview = sniff(source, source.name)
    ingest(source, root / name, original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / name


def fine_tuned(checkpoint: Path, dataset: Path, out_dir: Path, *, steps: int, batch_size: int) -> Path:
    """The last checkpoint of a CPU fine-tuning run of `steps` steps (lr 2e-3, max length 64) that
    evaluates and saves once, at its end."""
    config = FinetuneConfig(checkpoint=str(checkpoint), dataset=str(dataset), max_steps=steps,
                            batch_size=batch_size, max_length=64, lr=2e-3, eval_every=steps,
                            checkpoint_every=steps, device="cpu")
    result = finetune(config, out_dir=out_dir, sink=ListSink())
    assert result.status == "succeeded"
    return result.last_checkpoint


def fine_tuner(checkpoint: Path, root: Path, *, steps: int, batch_size: int = 8):
    """name -> the checkpoint of a short fine-tuning (fine_tuned) of `checkpoint` on the demo dataset
    `name`, made on first use under `root` and kept for the next (a module fixture's body)."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            made[name] = fine_tuned(checkpoint, ingested_demo(name, root), root / f"run-{name}", steps=steps,
                                    batch_size=batch_size)
        return made[name]
    return make

