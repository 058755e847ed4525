"""Fine-tune a checkpoint on a labelled dataset with the pre-training loop (trainer.training.engine.Loop).

The checkpoint's encoder gets a fresh task head (models_lib.families.downstream.from_pretraining),
the dataset's examples are tokenised with the checkpoint's tokenizer (the train split once, ahead,
where the task's collator allows, and batched by length: ExampleStream), validation
reports the task's metrics (Step.finish_validation), and at the end the test split is scored once
("test" metrics, also written to test_metrics.json). Checkpoints are native (they load in the
explorer and fine-tune again).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from trainer import finetune as tasks
from trainer.errors import ConfigError
from trainer.finetune import adapters, lora, techniques
from trainer.finetune.config import FinetuneConfig
from trainer.training import checkpoints
from trainer.training.data import DataPosition
from trainer.training import tracker_sinks
from trainer.training.engine import (
    TrainResult, TrainState, describe_tokenizer, find_resume_point, restore, setup_runtime, with_epochs,
)
from trainer.training.sinks import MetricsSink, TeeSink


MEGABATCH = 50  # length grouping sorts batches of up to this many batches at a time


class ExampleStream:
    """The training examples in a new seeded order every epoch, `batch_size` at a time, as the
    loop reads a pre-training TrainStream (next_batch, position, epoch_size, collator).

    A collator that encodes ahead (trainer.finetune.tasks.encodes_ahead) has every example
    tokenised once, here, rather than once per epoch. With `group_by_length` (and those lengths)
    each epoch's order puts examples of similar length in the same batch (length_grouped_order),
    so that dynamic padding pads little; without, it is a plain seeded permutation."""

    def __init__(self, examples: Sequence[dict], collator: Any, *, batch_size: int, seed: int,
                 position: DataPosition | None = None, group_by_length: bool = False):
        """position: where a resumed run stopped (its epoch's order is the same seeded permutation)."""
        from trainer.finetune.tasks import encodes_ahead

        if not examples:
            raise ConfigError("The dataset's train split is empty.")
        self.examples, self.collator, self.batch_size, self.seed = list(examples), collator, batch_size, seed
        self.encoded = collator.encode(self.examples) if encodes_ahead(collator) else None
        self.lengths = (np.array([len(e) for e in self.encoded], dtype=np.int64) if self.encoded is not None
                        else None)
        self.grouped = bool(group_by_length and self.lengths is not None)
        self.position = position or DataPosition()
        self._order = self._permutation(self.position.epoch)

    @property
    def epoch_size(self) -> int:
        return len(self.examples)

    def _permutation(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.examples))
        if not self.grouped:
            return order
        return length_grouped_order(order, self.lengths, self.batch_size, rng, head=self._head(epoch))

    def _head(self, epoch: int) -> int:
        """How many of the epoch's first examples complete the batch that the previous epoch began
        (the stream never stops at an epoch's end): its own batches start after them."""
        return (-epoch * len(self.examples)) % self.batch_size

    def next_indices(self) -> list[int]:
        """The next batch's examples, as indices into `examples`; moves the position on."""
        picked = []
        while len(picked) < self.batch_size:
            if self.position.index >= len(self.examples):
                self.position = DataPosition(self.position.epoch + 1, 0)
                self._order = self._permutation(self.position.epoch)
            picked.append(int(self._order[self.position.index]))
            self.position = DataPosition(self.position.epoch, self.position.index + 1)
        return picked

    def skip_batch(self) -> None:
        """Move past the next batch without building it (trainer.training.batch_workers)."""
        self.next_indices()

    def next_batch(self) -> Any:
        picked = self.next_indices()
        examples = [self.examples[i] for i in picked]
        if self.encoded is None:
            return self.collator(examples)
        return self.collator.collate(examples, [self.encoded[i] for i in picked])

    def padding_share(self, order: np.ndarray | None = None) -> float:
        """The share of padding among the tokens of the current epoch's batches in `order` (default:
        the epoch's own), those that lie within the epoch; nan without lengths. Examples with
        several rows or tensors (their `pad_rows`) count each as it is padded (tasks.padded_tokens)."""
        from trainer.finetune.tasks import padded_tokens

        if self.lengths is None:
            return float("nan")
        order = self._order if order is None else order
        rows_apart = self.encoded is not None and hasattr(self.encoded[0], "pad_rows")
        real = padded = 0
        for i in range(self._head(self.position.epoch), len(order), self.batch_size):
            picked = order[i:i + self.batch_size]
            if rows_apart:
                r, p = padded_tokens([self.encoded[j] for j in picked])
                real, padded = real + r, padded + p
                continue
            rows = self.lengths[picked]
            real += int(rows.sum())
            padded += int(rows.max()) * len(rows)
        return 1.0 - real / max(1, padded)

    def describe_grouping(self) -> str | None:
        """A log line: the padding of length-grouped batches against a plain shuffle's."""
        if not self.grouped:
            return None
        plain = np.random.default_rng([self.seed, self.position.epoch]).permutation(len(self.examples))
        return (f"Batches grouped by length (group_by_length): padding is {100 * self.padding_share():.0f}% of "
                f"the batches' tokens, against {100 * self.padding_share(plain):.0f}% in a plain shuffle.")


def length_grouped_order(order: np.ndarray, lengths: np.ndarray, batch_size: int, rng: np.random.Generator, *,
                         head: int = 0) -> np.ndarray:
    """`order` (a random permutation) rearranged so that each run of `batch_size` after the first
    `head` entries holds examples of similar length: cut into megabatches of up to MEGABATCH
    batches (fewer for a small dataset, so that there are at least four), each sorted by length,
    longest first, and cut into batches; the whole batches are then shuffled (with `rng`) so that
    lengths do not rise and fall in a pattern over the epoch. The last, partial batch stays last
    (the stream completes it from the next epoch). transformers' LengthGroupedSampler does the
    same but the shuffle (it keeps the megabatches' order and puts the longest batch first)."""
    head = min(head, len(order))
    rest = order[head:]
    mult = max(1, min(len(rest) // (4 * batch_size), MEGABATCH))
    size = mult * batch_size
    grouped = [chunk[np.argsort(-lengths[chunk], kind="stable")] for chunk in
               (rest[i:i + size] for i in range(0, len(rest), size))]
    flat = np.concatenate(grouped) if grouped else rest
    whole = len(flat) // batch_size * batch_size
    batches = flat[:whole].reshape(-1, batch_size)[rng.permutation(whole // batch_size)].reshape(-1)
    return np.concatenate([order[:head], batches, flat[whole:]])


GROUPED, SHUFFLED = "length_grouped", "shuffled"  # FinetuneConfig.batch_order


def batch_order(config: FinetuneConfig, collator: Any, resume_from: Path | None) -> str:
    """The order of the run's training examples: GROUPED (group_by_length, for a collator that
    encodes ahead) or SHUFFLED (a plain seeded permutation each epoch).

    A resumed run keeps the order it started with, or its data position would name other
    examples: the one its checkpoint's config records (batch_order), whatever group_by_length
    says now. A checkpoint written before the order was recorded was grouped only if its config
    says group_by_length: true (a run from before grouping has no such key, and was plain) and
    its collator grouped then: the encoders' SequenceCollator and TokenCollator (QA, text to text,
    SFT and GPT-1's collators batched in a plain shuffle until they encoded ahead)."""
    from trainer.finetune.tasks import SequenceCollator, TokenCollator, encodes_ahead

    if resume_from is None:
        return GROUPED if config.group_by_length and encodes_ahead(collator) else SHUFFLED
    saved = checkpoints.read_state(resume_from).get("config") or {}
    if saved.get("batch_order") in (GROUPED, SHUFFLED):
        return saved["batch_order"]
    grouped_then = type(collator) in (SequenceCollator, TokenCollator)
    return GROUPED if saved.get("group_by_length") is True and grouped_then else SHUFFLED


def packing(task: Any, model: Any, collator: Any) -> Any:
    """The collator whose batches the model computes: packed (tasks.PackingTaskCollator) when the
    task's step takes packed batches (Task.packs) and the model is an encoder family's task head
    (models_lib.families.downstream), so that only real tokens are computed, in training and in
    scoring alike; else `collator` itself (GPT, T5, ELMo and the other generative tasks stay
    padded). Packing happens inside one batch: the data order, exact resume and each rank's
    share do not change. Every fine-tuning technique works on packed batches (LoRA, adapters,
    freezing, layer-wise lr, class weights and early stopping act on weights, token-wise layers
    or the loss); multi-task mixing trains T5, which stays padded."""
    from models_lib.families.downstream import DOWNSTREAM_CLASSES
    from trainer.finetune.tasks import PackingTaskCollator, encodes_ahead

    if getattr(task, "packs", False) and isinstance(model, DOWNSTREAM_CLASSES) and encodes_ahead(collator):
        return PackingTaskCollator(collator, int(collator.pad_id))
    return collator


def finetune(config: FinetuneConfig, *, out_dir: Path, sink: MetricsSink,
             should_stop: Callable[[], bool] = lambda: False, resume: bool = False, pack: bool = True) -> TrainResult:
    """Train per `config`, writing checkpoints to out_dir/checkpoints/; calls sink.close().

    resume: continue from the newest checkpoint in out_dir (weights, optimizer, schedule, RNG,
    the place in the training data, and early stopping's best so far from best.json); without it
    an out_dir that already holds checkpoints is refused. pack=False keeps every batch padded
    where it would be packed (see `packing`; benchmarks and tests compare the two)."""
    from models_lib.checkpoint import load_model
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    out_dir = Path(out_dir)
    mirrors: list = []
    try:
        checkpoint, dataset = Path(config.checkpoint), Path(config.dataset)
        meta = read_meta(dataset)
        mix = None
        if config.multi_task:  # T5 multi-task mixing: every dataset written as text to text
            from trainer.finetune import mixing

            mix = mixing.load_tasks(config)
            meta = {**meta, "task": "text_to_text", "labels": []}
        task = tasks.get(config.task or meta["task"])
        if task.name != meta["task"]:
            raise ConfigError(f"The dataset is a {meta['task']} dataset; it cannot train {task.name}.")
        labels = [str(label) for label in meta.get("labels") or []]
        if task.has_classes and len(labels) < 2:
            raise ConfigError("The dataset has fewer than two labels, so there is nothing to tell apart.")
        device, precision = setup_runtime(config)
        # Before loading anything; on the CPU the activations come out of the same memory.
        tasks.check_memory(config, activations=str(device).startswith("cpu"))
        try:
            base = load_model(checkpoint, map_location="cpu")
        except (OSError, ValueError) as e:
            raise ConfigError(f"The checkpoint {checkpoint.name} cannot be loaded: {e}") from None
        task = tasks.for_family(task.name, str(getattr(getattr(base, "config", None), "family", "")))
        try:
            model = task.build_model(base, labels, config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"The checkpoint {checkpoint.name} cannot be fine-tuned for {task.label}: {e}") from None
        config = config.replace(task=task.name, family=model.config.family, preset=checkpoint.name,
                                label_words=labels if task.writes_labels else [])
        train_examples = [] if mix is not None else list(iter_examples(dataset, "train"))
        examples = sum(len(t.splits["train"]) for t in mix) if mix is not None else len(train_examples)
        config = with_epochs(config, examples, config.batch_size * config.grad_accum, sink,
                             what="training examples")  # a multi-task run's epoch: every task's train split once
        if config.report_to:  # the trackers report_to names get everything the run's sink gets (its steps counted)
            mirrors = tracker_sinks.open_sinks(config.report_to, config.to_dict(), out_dir)
            sink = TeeSink(sink, *mirrors)
            sink.log(tracker_sinks.describe(config.report_to))
        tokenizer = load_tokenizer(checkpoint)
        sink.log(describe_tokenizer(tokenizer))
        collator = task.build_collator(tokenizer, labels, config.max_length, config)
        adapters.apply(model, config, sink)  # before the optimizer: only adapters, norms and the head train
        lora_names = lora.apply(model, config, sink)  # before the optimizer: it freezes what LoRA replaces
        model = model.to(device).train()
        batches = packing(task, model, collator) if pack else collator  # what the model computes
        forward = task.step(config, model, device, task=task, labels=labels)
        forward.sink = sink
        weights = techniques.class_weights_for(config, task, meta, labels)
        if weights is not None:
            forward.class_weights = torch.tensor(weights, dtype=torch.float32, device=device)
        tuning = techniques.prepare(model, config, sink, checkpoint.name)  # freezing, LLRD, the schedule
        resume_from = find_resume_point(out_dir, resume, sink)
        state = TrainState()
        if resume_from is not None:
            state = restore(resume_from, config, checkpoint, model, tuning.optimizer, tuning.scheduler, forward)
        if mix is not None:
            rates = mixing.rates_for(config, mix)
            sink.log(mixing.describe(mix, rates, config.mixing))
            stream: Any = mixing.MixedStream([t.splits["train"] for t in mix], rates, collator,
                                             batch_size=config.batch_size, seed=config.seed, position=state.position)
            config = config.replace(batch_order=SHUFFLED)  # mixing has its own order (MixedStream)
        else:
            order = batch_order(config, collator, resume_from)
            if resume_from is not None and order != batch_order(config, collator, None):
                began = "grouped by length" if order == GROUPED else "in a plain shuffle (not grouped by length)"
                sink.log(f"This run started with its training examples {began}, so it goes on in that order: its "
                         f"place in the data counts in it.")
            stream = ExampleStream(train_examples, batches, batch_size=config.batch_size,
                                   seed=config.seed, position=state.position, group_by_length=order == GROUPED)
            config = config.replace(batch_order=GROUPED if stream.grouped else SHUFFLED)  # what checkpoints record
            grouping = stream.describe_grouping()
            if grouping:
                sink.log(grouping)
        valid = _batches(_split(mix, dataset, "validation"), batches, config.batch_size)
        loop = techniques.FinetuneLoop(config, tuning=tuning, metrics=task.scores(), model=model,
                                       forward=forward, stream=stream, valid=valid, state=state, sink=sink,
                                       data_dir=checkpoint, out_dir=out_dir, device=device, precision=precision,
                                       resumed_from=resume_from, tokenizer_sha256=tokenizer.sha256)
        if resume_from is not None:
            _restore_best(loop, out_dir)
        result = loop.run(should_stop)
        test_examples = _split(mix, dataset, "test")
        test = _batches(test_examples, batches, config.batch_size)
        if test and result.status == "succeeded":
            loop.restore_best()  # early stopping: the best weights, not the last
            values = loop.evaluate(test)
            sink.metrics(result.final_step, "test", values)
            (out_dir / "test_metrics.json").write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
            key = task.scores().primary
            sink.log(f"Test split: {key} {values.get(key, float('nan')):.4f} over {sum(b.size for b in test)} examples.")
            _write_test_outputs(out_dir, forward, test_examples, sink)
        if lora_names and result.status == "succeeded":
            lora.export(model, out_dir / "peft", sink)
        return result
    finally:
        sink.close()  # the TeeSink, when there are mirrors: it closes them too


def _split(mix: Any, dataset: Path, split: str) -> list[dict]:
    """A split's examples: the dataset's, or every task's of a multi-task run, one task after another."""
    from trainer.prep.labelled import iter_examples

    if mix is None:
        return list(iter_examples(dataset, split))
    return [ex for t in mix for ex in t.splits[split]]


def _restore_best(loop: Any, out_dir: Path) -> None:
    """Early stopping's best so far, from out_dir/best.json (a resumed run keeps comparing with it)."""
    early = loop.early
    path = out_dir / techniques.BEST_FILE
    if early is None or not path.is_file():
        return
    try:
        best = json.loads(path.read_text(encoding="utf-8"))
        folder = checkpoints.checkpoints_dir(out_dir) / str(best["checkpoint"])
        early.best, early.best_step = float(best["value"]), int(best["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    early.best_checkpoint = folder if folder.is_dir() else None


def _write_test_outputs(out_dir: Path, forward: Any, examples: list[dict], sink: MetricsSink) -> None:
    """The test split's predictions and per-class report (trainer.finetune.report); a failure to
    write them is logged, and the run that trained still succeeds."""
    from trainer.finetune import report

    try:
        rows = report.write_test_outputs(out_dir, forward, examples)
    except (OSError, ValueError) as e:
        sink.log(f"The test split's predictions could not be written: {e}")
        return
    wrong = sum(1 for row in rows if not row["correct"])
    sink.log(f"Test predictions written ({report.PREDICTIONS_JSONL}, {report.PREDICTIONS_CSV}): "
             f"{len(rows)} examples, {wrong} wrong, the errors first.")


def _batches(examples: list[dict], collator: Any, batch_size: int) -> list[Any]:
    with torch.no_grad():
        return [collator(examples[i:i + batch_size]) for i in range(0, len(examples), batch_size)]
