"""Fine-tuning against the reference: our trainer.finetune and transformers' Trainer on the same
starting weights, data, seed and settings, metric for metric, with the time each took.

    .venv/bin/python bench/finetune.py                               # classification, seeds 0 1 2
    .venv/bin/python bench/finetune.py --task token_classification --seeds 0
    .venv/bin/python bench/finetune.py --task text_to_text --pretrain-dir /tmp/t5   # keeps the T5 start
    .venv/bin/python bench/finetune.py --checkpoint PATH/TO/CHECKPOINT --steps 300

Tasks (--task), each on its demo dataset (trainer.prep.labelled.DEMOS) against transformers' class:
  classification, pair_classification, regression   BertForSequenceClassification
  token_classification                              BertForTokenClassification
  extractive_qa                                     BertForQuestionAnswering
  text_to_text                                      T5ForConditionalGeneration (teacher forcing)
What differs between them is one BenchTask each (TASKS): the demo, the family of the start, the
reference's class, its training features and its collator; the flow below is shared.

The starting point is a pre-training checkpoint: --checkpoint, or (by default) a tiny model
pre-trained here for --pretrain-steps steps (--pretrain-dir keeps it): a BERT (hidden 128, 2
layers, WordPiece 4000, MLM + NSP) or, for text_to_text, t5-tiny (Unigram 4000 with T5's
sentinels, span corruption). Per seed, our engine builds its model (the checkpoint's encoder and a
fresh head initialised under the seed; T5 itself) and that very model is exported (models_lib.hf)
to start transformers' Auto* class from equal weights. Both then train --steps AdamW updates of
--batch-size examples (lr with linear warm-up over 10% and linear decay, weight decay 0.01 off
biases and norms, clip 1.0, dropout on) in their own shuffled order, with dynamic padding.

The reference's features: the sequence and token tasks are tokenised by transformers (its fast
tokenizer on the checkpoint's tokenizer.json) and padded by its collators; extractive QA is fed
the very windows our collator cuts (one item per question: all its windows, so that a batch holds
--batch-size questions on both sides) and text_to_text our collator's "input </s>" / "target </s>"
ids, padded by DataCollatorForSeq2Seq (which also shifts the targets right, as our step does).
Scoring: the reference's trained model is read back into ours (models_lib.hf) and both sides'
test splits go through the same code, our task's step and trainer.finetune.metrics (QA's span
post-processing, T5's greedy generation up to --max-target-length tokens), so only training differs.

The learning-rate schedules differ by one update in the warm-up: transformers' linear warm-up
gives the k-th update (k = 1, 2, ...) the factor (k - 1) / W, so its first update has lr 0, where
ours (trainer.training.optim.lr_factor) gives k / W; after the warm-up both give
(max_steps - k + 1) / (max_steps - W). --reference-schedule ours hands Trainer our schedule (a
LambdaLR over lr_factor), so that only the order of the examples and the dropout masks differ;
the default, transformers, is Trainer as its users get it.

Our engine batches by length by default (FinetuneConfig.group_by_length); Trainer's default
sampler is a plain shuffle. Each seed trains the reference once per --reference-sampling
(default: "random", Trainer's default, the comparison the issue asks for, and "group_by_length",
Trainer's own length grouping), and ours once per --ours-grouping (default: on).

Printed: every metric of both and the difference, then training examples/s of each (training
only: neither side's evaluation is timed) and the ratio ours/theirs, per seed and the mean, by
the wall clock and by the process's CPU time (which other jobs on a shared machine disturb far
less; with --threads 1 it is the work done), each with the machine's load average.

--packing compares our engine with itself instead of with transformers: per seed and per
--ours-grouping, one run with packed batches (the product's way: an encoder's task head computes
the real tokens only, trainer.finetune.engine.packing) and one padded (finetune(pack=False)),
printing real tokens/s and the fill (real tokens / positions computed; means of the log
intervals after the first) and the test metrics of each. No transformers run, no parity check.

Before that, a parity check (--parity-steps N, 0 skips it): both trainers train N steps from the
same weights on the same batches in the same order (our stream's, fed to Trainer with its
sequential sampler), with dropout off and a constant lr (--parity-schedule run: the runs' warm-up
and decay, with Trainer on --reference-schedule); the two per-step training losses are printed
side by side (they should agree to ~1e-6), then both test scores (equal: the same weights, so it
checks the read-back too).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the repo

from trainer.finetune.config import FinetuneConfig  # noqa: E402
from trainer.finetune.metrics import METRICS  # noqa: E402
from trainer.training.sinks import ListSink  # noqa: E402

class Timing(NamedTuple):
    """Training time: wall-clock seconds, and the process's CPU seconds (user + system, all its
    threads), which other jobs on a shared machine disturb far less than the wall clock."""

    wall: float
    cpu: float

    @staticmethod
    def now() -> "Timing":
        return Timing(time.perf_counter(), time.process_time())

    def __sub__(self, other: "Timing") -> "Timing":  # type: ignore[override]
        return Timing(self.wall - other.wall, self.cpu - other.cpu)

    def __add__(self, other: "Timing") -> "Timing":  # type: ignore[override]
        return Timing(self.wall + other.wall, self.cpu + other.cpu)


# ----------------------------------------------------------------------------- the tasks
class Reference(NamedTuple):
    """What the reference's side of a task is built from: the run's settings, transformers'
    tokenizer and model of the exported start, the dataset's labels and problem type, and our
    task's collator (QA's windows and T5's rows are taken from it, so that only training differs)."""

    config: FinetuneConfig
    tokenizer: Any
    model: Any
    labels: list[str]
    problem: str | None
    ours: Any


def sequence_items(examples: list[dict], ref: Reference) -> list[dict]:
    """One sentence or a pair per example, tokenised by transformers, with its class id (its float
    score for regression)."""
    index = {label: i for i, label in enumerate(ref.labels)}
    out = []
    for ex in examples:
        texts = (ex["text"],) if "text" in ex else (ex["sentence1"], ex["sentence2"])
        enc = dict(ref.tokenizer(*texts, truncation=True, max_length=ref.config.max_length))
        enc["labels"] = float(ex["label"]) if ref.problem == "regression" else index[str(ex["label"])]
        out.append(enc)
    return out


def token_items(examples: list[dict], ref: Reference) -> list[dict]:
    """Pre-split words tokenised by transformers; each word's tag on its first sub-token."""
    index = {label: i for i, label in enumerate(ref.labels)}
    out = []
    for ex in examples:
        enc = ref.tokenizer(list(ex["tokens"]), is_split_into_words=True, truncation=True,
                            max_length=ref.config.max_length)
        tags, seen = [], set()
        for w in enc.word_ids():
            tags.append(index[ex["tags"][w]] if w is not None and w not in seen else -100)
            if w is not None:
                seen.add(w)
        out.append({**dict(enc), "labels": tags})
    return out


def our_rows(example: dict, ref: Reference, scalars: tuple[str, ...] = ()) -> list[dict]:
    """The rows our collator makes of one example (QA: its windows; T5: source and target), as
    transformers' features: each row's tokens without padding, and the per-row `scalars`."""
    batch = ref.ours([example])
    tensors = {name: getattr(batch, name) for name in ("input_ids", "token_type_ids", "attention_mask", "labels")
               if isinstance(getattr(batch, name, None), torch.Tensor)}
    rows = []
    for r in range(batch.input_ids.shape[0]):
        n = int(batch.attention_mask[r].sum())
        row = {k: v[r, :n].tolist() for k, v in tensors.items() if k != "labels"}
        if "labels" in tensors:
            row["labels"] = [t for t in tensors["labels"][r].tolist() if t != -100]
        row.update({k: int(getattr(batch, k)[r]) for k in scalars})
        rows.append(row)
    return rows


def window_items(examples: list[dict], ref: Reference) -> list[dict]:
    """One item per question: every window our QA collator cuts from it, with the answer's first
    and last token per window ([CLS] when it is not inside). "input_ids" (all its windows' tokens)
    is what Trainer's length grouping measures."""
    out = []
    for ex in examples:
        windows = our_rows(ex, ref, ("start_positions", "end_positions"))
        out.append({"input_ids": [t for w in windows for t in w["input_ids"]], "windows": windows})
    return out


def text_items(examples: list[dict], ref: Reference) -> list[dict]:
    """T5: our collator's "input </s>" and "target </s>" ids per example."""
    return [our_rows(ex, ref)[0] for ex in examples]


class Windows:
    """Transformers' padding collator over the windows of a batch of questions (each question's
    windows in order, as our collator batches them)."""

    def __init__(self, tokenizer: Any):
        from transformers import DataCollatorWithPadding

        self.pad = DataCollatorWithPadding(tokenizer)

    def __call__(self, items: list[dict]) -> dict:
        return self.pad([w for item in items for w in item["windows"]])


def padding(ref: Reference) -> Any:
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(ref.tokenizer)


def token_padding(ref: Reference) -> Any:
    from transformers import DataCollatorForTokenClassification

    return DataCollatorForTokenClassification(ref.tokenizer)


def seq2seq_padding(ref: Reference) -> Any:
    """Pads sources and targets (-100), and shifts the targets right into decoder_input_ids (T5's
    teacher forcing, as our step does)."""
    from transformers import DataCollatorForSeq2Seq

    return DataCollatorForSeq2Seq(ref.tokenizer, model=ref.model)


class BenchTask(NamedTuple):
    """What differs between the tasks; the flow (start, parity, timed runs, scoring) is shared."""

    demo: str          # trainer.prep.labelled.DEMOS: the demo dataset
    family: str        # what the default starting checkpoint is pre-trained as
    reference: str     # transformers' Auto class of the reference model
    items: Callable[[list[dict], Reference], list[dict]]  # the reference's training features
    collator: Callable[[Reference], Any]                  # ... and how it batches them


TASKS: dict[str, BenchTask] = {
    "classification": BenchTask("classification", "bert", "AutoModelForSequenceClassification", sequence_items,
                                padding),
    "pair_classification": BenchTask("pair_classification", "bert", "AutoModelForSequenceClassification",
                                     sequence_items, padding),
    "regression": BenchTask("regression", "bert", "AutoModelForSequenceClassification", sequence_items, padding),
    "token_classification": BenchTask("token_classification", "bert", "AutoModelForTokenClassification",
                                      token_items, token_padding),
    "extractive_qa": BenchTask("extractive_qa", "bert", "AutoModelForQuestionAnswering", window_items,
                               lambda ref: Windows(ref.tokenizer)),
    "text_to_text": BenchTask("text_to_text", "t5", "AutoModelForSeq2SeqLM", text_items, seq2seq_padding),
}


# ----------------------------------------------------------------------------- the starting point
def pretrain(root: Path, steps: int, threads: int, family: str = "bert") -> Path:
    """A tiny model pre-trained for `steps` steps on the demo corpus; its last checkpoint. bert: hidden
    128, 2 layers, WordPiece 4000, MLM + NSP. t5: t5-tiny (d_model 64, 2 + 2 layers), Unigram 4000
    with T5's 100 sentinels, span corruption (T5's Adafactor, lr 0.01, inverse square root)."""
    from trainer.config import RunConfig
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer
    from trainer.training.engine import train

    raw = root / "demo.txt"
    if not raw.is_file():
        write_demo_corpus(raw)
    corpus, tok = root / f"corpus-{family}", root / f"tokenizer-{family}"
    ingest(raw, corpus, original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.05, seed=0)
    common = dict(max_steps=steps, batch_size=32, seq_len=128, warmup_steps=max(1, steps // 20), eval_every=steps,
                  eval_batches=4, checkpoint_every=steps, log_every=max(1, steps // 5), seed=0, device="cpu",
                  num_threads=threads)
    if family == "t5":
        train_tokenizer(corpus, tok, algorithm="unigram", vocab_size=4000, lowercase=True, extra_ids=100)
        config = RunConfig(family="t5", preset="t5-tiny", objectives=["span_corruption"], lr=0.01,
                           schedule="inverse_sqrt", weight_decay=0.0, **common)
    else:
        train_tokenizer(corpus, tok, algorithm="wordpiece", vocab_size=4000, lowercase=True)
        config = RunConfig(preset="bert-tiny", model_overrides={"hidden_size": 128, "num_heads": 2, "num_layers": 2},
                           objectives=["mlm", "nsp"], lr=1e-3, **common)
    encode_corpus(corpus, tok)
    result = train(config, data_dir=tok, out_dir=root / f"pretrain-{family}", sink=ListSink())
    return Path(result.last_checkpoint)


def make_dataset(root: Path, task: str) -> Path:
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    demo = TASKS[task].demo
    source = write_demo_dataset(demo, root / DEMOS[demo].filename)
    preview = sniff(source, source.name)
    ingest(source, root / f"data-{task}", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / f"data-{task}"


def prepared(config: FinetuneConfig) -> tuple[Any, list[str], FinetuneConfig]:
    """(our Task, the dataset's labels, the config as our engine completes it: task and family),
    the same choices trainer.finetune.engine.finetune makes."""
    from models_lib.checkpoint import read_model_config
    from trainer import finetune as tasks
    from trainer.prep.labelled import read_meta

    meta = read_meta(Path(config.dataset))
    family = str(read_model_config(Path(config.checkpoint)).get("family", ""))
    task = tasks.for_family(meta["task"], family)
    labels = [str(x) for x in meta.get("labels") or []]
    return task, labels, config.replace(task=task.name, family=family)


# ----------------------------------------------------------------------------- ours
def run_ours(config: FinetuneConfig, out: Path, *, pack: bool = True) -> tuple[dict, Timing, ListSink]:
    """(test metrics, training time, sink) of our engine. The training time is the training loop's
    wall time (FinetuneLoop.run, as transformers' Trainer.train) less its validation passes and
    checkpoint writes; model loading and the test split are outside it, as they are for Trainer."""
    from trainer.finetune import engine

    loop_class = engine.techniques.FinetuneLoop
    spent = {"run": Timing(0.0, 0.0), "aside": Timing(0.0, 0.0), "inside": False}
    originals = {name: getattr(loop_class, name) for name in ("run", "evaluate", "save_checkpoint")}

    def timed(name):
        def call(self, *a, **kw):
            started, outer = Timing.now(), name == "run"
            if outer:
                spent["inside"] = True
            try:
                return originals[name](self, *a, **kw)
            finally:
                took = Timing.now() - started
                if outer:
                    spent["run"] += took
                    spent["inside"] = False
                elif spent["inside"]:  # a validation pass or a checkpoint during training
                    spent["aside"] += took
        return call

    for name in originals:
        setattr(loop_class, name, timed(name))
    sink = ListSink()
    try:
        result = engine.finetune(config, out_dir=out, sink=sink, pack=pack)
    finally:
        for name, fn in originals.items():
            setattr(loop_class, name, fn)
    assert result.status == "succeeded", result
    test = [v for _, split, v in sink.events if split == "test"][-1]
    return test, spent["run"] - spent["aside"], sink


def initial_model(config: FinetuneConfig) -> Any:
    """The model our engine starts from for this config (the same seed, the same calls in order)."""
    from models_lib.checkpoint import load_model
    from trainer.training.engine import setup_runtime

    task, labels, config = prepared(config)
    setup_runtime(config)
    base = load_model(Path(config.checkpoint), map_location="cpu")
    return task.build_model(base, labels, config)


def export_start(model: Any, checkpoint: Path, folder: Path) -> Path:
    """`model` (our engine's start) as a transformers folder, with the checkpoint's tokenizer."""
    from models_lib import hf
    from trainer.export import write_tokenizer_files

    hf.to_pretrained(model, folder)
    t5 = model.config.family == "t5"
    write_tokenizer_files(checkpoint, folder, max_positions=getattr(model.config, "max_positions", 512),
                          with_token_types=not t5)
    return folder


def score(model: Any, config: FinetuneConfig) -> dict:
    """The test split's metrics of `model` (one of ours), computed as our engine computes its own:
    our collator's test batches through our task's step (its predictions, QA's post-processing,
    T5's greedy generation) into trainer.finetune.metrics."""
    from trainer.finetune.engine import _batches
    from trainer.prep.labelled import iter_examples
    from trainer.prep.tokenization import load_tokenizer

    task, labels, config = prepared(config)
    collator = task.build_collator(load_tokenizer(Path(config.checkpoint)), labels, config.max_length, config)
    step = task.step(config, model, "cpu", task=task, labels=labels)
    model.eval()
    step.start_validation()
    with torch.no_grad():
        for batch in _batches(list(iter_examples(Path(config.dataset), "test")), collator, config.batch_size):
            step(batch, train=False)
    return step.finish_validation()


# ----------------------------------------------------------------------------- the reference
def our_schedule(optimizer: torch.optim.Optimizer, config: FinetuneConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """Our lr schedule for Trainer's optimizer: a LambdaLR is stepped after each update, so its
    step s (0 for the first update) is our update k = s + 1."""
    from trainer.training.optim import lr_factor

    factor = lr_factor(config.schedule, config.warmup_steps, config.max_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: factor(s + 1))


def run_theirs(config: FinetuneConfig, task: str, folder: Path, *, sampling: str = "random",
               order: list[dict] | None = None, schedule: str = "transformers") -> tuple[dict, Timing, list[float]]:
    """(test metrics, Trainer.train() seconds, the training loss of every step). sampling: Trainer's
    train_sampling_strategy; order: train on these examples in this order (sequential sampler);
    schedule: "transformers" (Trainer's own) or "ours" (our_schedule).
    The trained model is read back into ours (models_lib.hf) and scored by `score`, so both sides'
    predictions are turned into metrics by the same code."""
    import transformers
    from transformers import Trainer, TrainingArguments

    from models_lib import hf
    from trainer.prep.labelled import iter_examples
    from trainer.prep.tokenization import load_tokenizer

    losses: list[float] = []

    class Recording(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            out = super().compute_loss(model, inputs, *args, **kwargs)
            if model.training:
                loss = out[0] if isinstance(out, tuple) else out
                losses.append(float(loss.detach()))
            return out

        def create_scheduler(self, num_training_steps, optimizer=None):
            if schedule == "ours" and self.lr_scheduler is None:
                self.lr_scheduler = our_schedule(optimizer or self.optimizer, config)
            return super().create_scheduler(num_training_steps, optimizer)

    spec = TASKS[task]
    ours_task, labels, full = prepared(config)
    model = getattr(transformers, spec.reference).from_pretrained(folder)
    ref = Reference(config, transformers.AutoTokenizer.from_pretrained(folder), model, labels, ours_task.problem,
                    ours_task.build_collator(load_tokenizer(Path(config.checkpoint)), labels, config.max_length, full))
    examples = order if order is not None else list(iter_examples(Path(config.dataset), "train"))
    train = spec.items(examples, ref)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=config.max_steps, per_device_train_batch_size=config.batch_size,
            per_device_eval_batch_size=config.batch_size, learning_rate=config.lr, weight_decay=config.weight_decay,
            adam_beta1=config.betas[0], adam_beta2=config.betas[1], adam_epsilon=config.eps,
            warmup_steps=config.warmup_steps, lr_scheduler_type=config.schedule, max_grad_norm=config.clip_grad,
            seed=config.seed, data_seed=config.seed, use_cpu=True, report_to="none", save_strategy="no",
            eval_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
            remove_unused_columns=False,  # QA's items carry their windows; every task's collator builds the inputs
            train_sampling_strategy="sequential" if order is not None else sampling)
        trainer = Recording(model=model, args=args, train_dataset=train, data_collator=spec.collator(ref),
                            processing_class=ref.tokenizer)
        started = Timing.now()
        trainer.train()
        seconds = Timing.now() - started
        trainer.save_model(Path(out) / "trained")
        trained = hf.from_pretrained(Path(out) / "trained", task=None if full.family == "t5" else "auto")
    return score(trained, config), seconds, losses


# ----------------------------------------------------------------------------- parity
def without_dropout(checkpoint: Path, folder: Path) -> Path:
    """A copy of the checkpoint whose model has no dropout (so that two trainers' losses can match)."""
    from models_lib.checkpoint import CONFIG_NAME

    shutil.copytree(checkpoint, folder)
    meta = json.loads((folder / CONFIG_NAME).read_text())
    for key in ("hidden_dropout", "attention_dropout", "dropout_rate"):  # the encoders', T5's
        if key in meta["config"]:
            meta["config"][key] = 0.0
    (folder / CONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def our_order(config: FinetuneConfig, steps: int) -> list[dict]:
    """The training examples our engine's stream feeds for `steps` steps, in that order."""
    from trainer.finetune.engine import ExampleStream
    from trainer.prep.labelled import iter_examples
    from trainer.prep.tokenization import load_tokenizer

    task, labels, config = prepared(config)
    collator = task.build_collator(load_tokenizer(Path(config.checkpoint)), labels, config.max_length, config)
    stream = ExampleStream(list(iter_examples(Path(config.dataset), "train")), collator,
                           batch_size=config.batch_size, seed=config.seed, group_by_length=config.group_by_length)
    return [stream.examples[i] for _ in range(steps) for i in stream.next_indices()]


def parity(checkpoint: Path, dataset: Path, root: Path, args: argparse.Namespace) -> list[float]:
    """Both trainers, N steps on the same batches in the same order, dropout off, constant lr (or,
    with --parity-schedule run, the timed runs' warm-up and decay over the N steps, Trainer on
    --reference-schedule): the per-step training losses side by side, then both test scores.
    Returns the per-step |diff|."""
    steps, seed = args.parity_steps, args.seeds[0]
    plain = without_dropout(checkpoint, root / "parity-checkpoint")
    config = settings(args, plain, dataset, seed).replace(max_steps=steps, eval_every=steps, checkpoint_every=steps,
                                                          log_every=1)
    if args.parity_schedule == "constant":
        config = config.replace(warmup_ratio=0.0, schedule="constant")
        lr = f"constant lr {args.lr:g}"
    else:
        whose = "our" if args.reference_schedule == "ours" else "its own"
        lr = (f"lr {args.lr:g}, warm-up {config.warmup_steps} steps, {config.schedule} decay, "
              f"Trainer on {whose} schedule")
    start = export_start(initial_model(config), plain, root / "parity-start")
    ours_metrics, _, sink = run_ours(config, root / "parity-ours")
    ours = [v["loss"] for _, v in sink.split("train")]
    theirs_metrics, _, theirs = run_theirs(config, args.task, start, order=our_order(config, steps),
                                           schedule=args.reference_schedule)
    print(f"parity ({args.task}): {steps} steps of {args.batch_size}, the same batches in our stream's order, "
          f"dropout off, {lr} (seed {seed})")
    print("  step  ours loss   transformers loss   |diff|")
    for i, (a, b) in enumerate(zip(ours, theirs), 1):
        print(f"  {i:4d}  {a:.6f}   {b:.6f}            {abs(a - b):.2e}")
    diffs = [abs(a - b) for a, b in zip(ours, theirs)]
    if diffs:
        print(f"  step 1 |diff| {diffs[0]:.2e}; largest over the {len(diffs)} steps {max(diffs):.2e} "
              f"(at step {diffs.index(max(diffs)) + 1}); ours logged {len(ours)} steps, transformers {len(theirs)}")
    print("  test metrics after these steps, ours / transformers' (read back, scored by the same code): "
          + ", ".join(f"{k} {ours_metrics.get(k, float('nan')):.4f} / {v:.4f}" for k, v in sorted(theirs_metrics.items()))
          + "\n")
    if len(ours) != len(theirs):
        diffs.append(float("inf"))
    return diffs


def settings(args: argparse.Namespace, checkpoint: Path, dataset: Path, seed: int) -> FinetuneConfig:
    """The timed runs' FinetuneConfig (parity changes the schedule and the logging)."""
    return FinetuneConfig(checkpoint=str(checkpoint), dataset=str(dataset), max_steps=args.steps,
                          batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
                          max_target_length=args.max_target_length, warmup_ratio=0.1, eval_every=args.steps,
                          checkpoint_every=args.steps, log_every=max(1, args.steps // 5), seed=seed, device="cpu",
                          num_threads=args.threads)


def packing_comparison(checkpoint: Path, dataset: Path, root: Path, args: argparse.Namespace) -> None:
    """--packing: our runs packed and padded, per seed and grouping (see the module docstring)."""
    rows: dict[tuple[str, bool], list[tuple[float, float, float]]] = {}
    primary = "?"
    for seed in args.seeds:
        base = settings(args, checkpoint, dataset, seed)
        primary = METRICS[prepared(base)[0].metrics].primary
        for grouping in args.ours_grouping:
            for pack in (True, False):
                config = base.replace(group_by_length=grouping == "on")
                name = "packed" if pack else "padded"
                metrics, seconds, sink = run_ours(config, root / f"ours-{seed}-{grouping}-{name}", pack=pack)
                logged = [v for _, v in sink.split("train")]
                logged = logged[1:] or logged  # the first interval holds the start-up
                tps, fill = (statistics.mean(v[k] for v in logged) for k in ("tokens_per_s", "fill"))
                rows.setdefault((grouping, pack), []).append((tps, fill, metrics[primary]))
                print(f"  seed {seed}, group_by_length {grouping}, {name}: {tps:,.0f} real tokens/s, fill {fill:.3f}, "
                      f"test {primary} {metrics[primary]:.4f}, training {seconds.wall:.1f} s wall "
                      f"({seconds.cpu:.1f} s CPU)", flush=True)
    print(f"\n{args.task}, {len(args.seeds)} seed(s), {args.steps} steps x {args.batch_size}, max_length "
          f"{args.max_length}, {args.threads} thread(s), means over the seeds:")
    for grouping in args.ours_grouping:
        packed, padded = ([statistics.mean(col) for col in zip(*rows[(grouping, p)])] for p in (True, False))
        print(f"  group_by_length {grouping}: packed {packed[0]:,.0f} real tokens/s, fill {packed[1]:.3f}, test "
              f"{primary} {packed[2]:.4f}; padded {padded[0]:,.0f} real tokens/s, fill {padded[1]:.3f}, test "
              f"{primary} {padded[2]:.4f}; packed / padded {packed[0] / padded[0]:.2f}x real tokens/s")


# ----------------------------------------------------------------------------- main
def speed(examples: int, t: Timing) -> str:
    return f"{examples / t.wall:.1f} examples/s ({t.wall:.1f} s wall, {t.cpu:.1f} s CPU)"


def ratio(theirs: Timing, ours: Timing) -> str:
    return f"{theirs.wall / ours.wall:.2f}x wall, {theirs.cpu / ours.cpu:.2f}x CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=list(TASKS), default="classification")
    parser.add_argument("--checkpoint", type=Path, help="a pre-training checkpoint folder (default: pre-train one; "
                        "a T5 one for text_to_text, a BERT one for the others)")
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--pretrain-dir", type=Path,
                        help="pre-train into this folder and keep it (its checkpoint can be --checkpoint later)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--max-target-length", type=int, default=64, help="text_to_text: target tokens, and the "
                        "most tokens greedy generation writes")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parity-steps", type=int, default=30,
                        help="steps of the same-batches loss comparison before the runs (0: skip it)")
    parser.add_argument("--parity-schedule", choices=["constant", "run"], default="constant",
                        help="the parity check's lr: constant (default) or the runs' warm-up and decay")
    parser.add_argument("--reference-sampling", nargs="+", default=["random", "group_by_length"],
                        choices=["random", "group_by_length"], help="Trainer's train_sampling_strategy, one run each")
    parser.add_argument("--reference-schedule", choices=["transformers", "ours"], default="transformers",
                        help="Trainer's lr schedule: its own (default) or ours (they differ in the warm-up by "
                        "one update)")
    parser.add_argument("--ours-grouping", nargs="+", default=["on"], choices=["on", "off"],
                        help="our group_by_length, one run each")
    parser.add_argument("--packing", action="store_true",
                        help="compare our runs packed and padded (real tokens/s, fill) instead of with transformers")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.checkpoint:
            checkpoint = args.checkpoint
        else:
            where = args.pretrain_dir or root
            where.mkdir(parents=True, exist_ok=True)
            checkpoint = pretrain(where, args.pretrain_steps, args.threads, TASKS[args.task].family)
            print(f"pre-trained {TASKS[args.task].family} ({args.pretrain_steps} steps): {checkpoint}")
        dataset = make_dataset(root, args.task)
        if args.packing:
            packing_comparison(Path(checkpoint), dataset, root, args)
            return 0
        if args.parity_steps:
            parity(Path(checkpoint), dataset, root, args)
        examples = args.steps * args.batch_size
        ours_runs: dict[str, list] = {g: [] for g in args.ours_grouping}      # grouping -> [(metrics, s)]
        theirs_runs: dict[str, list] = {m: [] for m in args.reference_sampling}
        primary = "?"
        for seed in args.seeds:
            base = settings(args, Path(checkpoint), dataset, seed)
            primary = METRICS[prepared(base)[0].metrics].primary
            start = export_start(initial_model(base), Path(checkpoint), root / f"start-{seed}")  # ours' very start
            print(f"seed {seed}:")
            for grouping in args.ours_grouping:
                config = base.replace(group_by_length=grouping == "on")
                load = os.getloadavg()[0]
                metrics, seconds, _ = run_ours(config, root / f"ours-{seed}-{grouping}")
                ours_runs[grouping].append((metrics, seconds))
                print(f"  ours, group_by_length {grouping}: {primary} {metrics[primary]:.4f}, "
                      f"{speed(examples, seconds)}; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
            for sampling in args.reference_sampling:
                load = os.getloadavg()[0]
                metrics, seconds, _ = run_theirs(base, args.task, start, sampling=sampling,
                                                 schedule=args.reference_schedule)
                theirs_runs[sampling].append((metrics, seconds))
                print(f"  transformers, {sampling}, schedule {args.reference_schedule}: {primary} "
                      f"{metrics[primary]:.4f}, {speed(examples, seconds)}; load average {load:.2f} before, "
                      f"{os.getloadavg()[0]:.2f} after")
            for grouping, runs in ours_runs.items():
                ours = runs[-1][0]
                for sampling, theirs_list in theirs_runs.items():
                    theirs = theirs_list[-1][0]
                    print(f"  ours ({grouping}) - transformers ({sampling}): " + ", ".join(
                        f"{k} {ours.get(k, float('nan')) - theirs[k]:+.4f}" for k in sorted(theirs))
                        + f"; speed {ratio(theirs_list[-1][1], runs[-1][1])}")
        print(f"\n{args.task}, {len(args.seeds)} seed(s), {args.steps} steps x {args.batch_size}, "
              f"{args.threads} thread(s):")
        for grouping, runs in ours_runs.items():
            ours_mean = statistics.mean(m[primary] for m, _ in runs)
            for sampling, theirs_list in theirs_runs.items():
                theirs_mean = statistics.mean(m[primary] for m, _ in theirs_list)
                wall = statistics.mean(t.wall / o.wall for (_, o), (_, t) in zip(runs, theirs_list))
                cpu = statistics.mean(t.cpu / o.cpu for (_, o), (_, t) in zip(runs, theirs_list))
                print(f"  ours (group_by_length {grouping}) vs transformers ({sampling}): test {primary} "
                      f"{ours_mean:.4f} vs {theirs_mean:.4f} (diff {100 * (ours_mean - theirs_mean):+.2f} points); "
                      f"training speed ours / transformers {wall:.2f}x by the wall clock, {cpu:.2f}x by CPU time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
