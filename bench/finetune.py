"""Fine-tuning against the reference: our trainer.finetune and transformers' Trainer on the same
starting weights, data, seed and settings, metric for metric, with the time each took.

    .venv/bin/python bench/finetune.py                               # classification, seeds 0 1 2
    .venv/bin/python bench/finetune.py --task token_classification --seeds 0
    .venv/bin/python bench/finetune.py --checkpoint PATH/TO/CHECKPOINT --steps 300

The starting point is a pre-training checkpoint: --checkpoint, or (by default) a tiny BERT
(hidden 128, 2 layers, WordPiece 4000 on the demo corpus) pre-trained here for --pretrain-steps
MLM + NSP steps. Per seed, our engine builds its model (the checkpoint's encoder and a fresh head,
initialised under the seed) and that very model is exported (models_lib.hf) to start transformers'
Auto*ForSequenceClassification / ForTokenClassification from equal weights. Both then train
--steps AdamW updates of --batch-size examples (lr with linear warm-up over 10% and linear decay,
weight decay 0.01 off biases and norms, clip 1.0, dropout on) in their own shuffled order, with
dynamic padding, and score the test split with our metric functions (trainer.finetune.metrics).

Our engine batches by length by default (FinetuneConfig.group_by_length); Trainer's default
sampler is a plain shuffle. Each seed trains the reference once per --reference-sampling
(default: "random", Trainer's default, the comparison the issue asks for, and "group_by_length",
Trainer's own length grouping), and ours once per --ours-grouping (default: on).

Printed: every metric of both and the difference, then training examples/s of each (training
only: neither side's evaluation is timed) and the ratio ours/theirs, per seed and the mean, by
the wall clock and by the process's CPU time (which other jobs on a shared machine disturb far
less; with --threads 1 it is the work done), each with the machine's load average.

Before that, a parity check (--parity-steps N, 0 skips it): both trainers train N steps from the
same weights on the same batches in the same order (our stream's, fed to Trainer with its
sequential sampler), with dropout off and a constant lr, and the two per-step training losses are
printed side by side: they should agree to ~1e-4 at step 1 (the same forward pass) and stay close.
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
from typing import NamedTuple

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


TASKS = {"classification": ("classification", "AutoModelForSequenceClassification"),
         "token_classification": ("token_classification", "AutoModelForTokenClassification")}


# ----------------------------------------------------------------------------- the starting point
def pretrain(root: Path, steps: int, threads: int) -> Path:
    """A tiny BERT pre-trained for `steps` MLM + NSP steps on the demo corpus; its last checkpoint."""
    from trainer.config import RunConfig
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer
    from trainer.training.engine import train

    raw = write_demo_corpus(root / "demo.txt")
    corpus, tok = root / "corpus", root / "tokenizer"
    ingest(raw, corpus, original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.05, seed=0)
    train_tokenizer(corpus, tok, algorithm="wordpiece", vocab_size=4000, lowercase=True)
    encode_corpus(corpus, tok)
    config = RunConfig(preset="bert-tiny", model_overrides={"hidden_size": 128, "num_heads": 2, "num_layers": 2},
                       objectives=["mlm", "nsp"], max_steps=steps, batch_size=32, seq_len=128, lr=1e-3,
                       warmup_steps=max(1, steps // 20), eval_every=steps, eval_batches=4, checkpoint_every=steps,
                       log_every=max(1, steps // 5), seed=0, device="cpu", num_threads=threads)
    result = train(config, data_dir=tok, out_dir=root / "pretrain", sink=ListSink())
    return Path(result.last_checkpoint)


def make_dataset(root: Path, task: str) -> Path:
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    source = write_demo_dataset(task, root / DEMOS[task].filename)
    preview = sniff(source, source.name)
    ingest(source, root / f"data-{task}", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / f"data-{task}"


# ----------------------------------------------------------------------------- ours
def run_ours(config: FinetuneConfig, out: Path) -> tuple[dict, Timing, ListSink]:
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
        result = engine.finetune(config, out_dir=out, sink=sink)
    finally:
        for name, fn in originals.items():
            setattr(loop_class, name, fn)
    assert result.status == "succeeded", result
    test = [v for _, split, v in sink.events if split == "test"][-1]
    return test, spent["run"] - spent["aside"], sink


def initial_model(config: FinetuneConfig):
    """The model our engine starts from for this config (the same seed, the same calls in order)."""
    from models_lib.checkpoint import load_model
    from models_lib.families.downstream import from_pretraining
    from trainer import finetune as tasks
    from trainer.prep.labelled import read_meta
    from trainer.training.engine import setup_runtime

    meta = read_meta(Path(config.dataset))
    task = tasks.get(meta["task"])
    labels = [str(x) for x in meta.get("labels") or []]
    setup_runtime(config)
    base = load_model(Path(config.checkpoint), map_location="cpu")
    return from_pretraining(base, task.head, task.num_labels(labels), labels=labels if task.has_classes else None,
                            problem_type=task.problem), labels


# ----------------------------------------------------------------------------- the reference
def run_theirs(config: FinetuneConfig, task: str, folder: Path, labels: list[str], *, sampling: str = "random",
               order: list[dict] | None = None) -> tuple[dict, Timing, list[float]]:
    """(test metrics, Trainer.train() seconds, the training loss of every step). sampling: Trainer's
    train_sampling_strategy; order: train on these examples in this order (sequential sampler)."""
    import transformers
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, Trainer, TrainingArguments

    losses: list[float] = []

    class Recording(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            out = super().compute_loss(model, inputs, *args, **kwargs)
            if model.training:
                loss = out[0] if isinstance(out, tuple) else out
                losses.append(float(loss.detach()))
            return out

    from trainer.prep.labelled import iter_examples

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = getattr(transformers, TASKS[task][1]).from_pretrained(folder)
    index = {label: i for i, label in enumerate(labels)}

    def encode(example: dict) -> dict:
        if task == "classification":
            if "text" in example:
                enc = tokenizer(example["text"], truncation=True, max_length=config.max_length)
            else:
                enc = tokenizer(example["sentence1"], example["sentence2"], truncation=True,
                                max_length=config.max_length)
            enc["labels"] = index[str(example["label"])]
            return dict(enc)
        enc = tokenizer(list(example["tokens"]), is_split_into_words=True, truncation=True,
                        max_length=config.max_length)
        tags, seen = [], set()
        for w in enc.word_ids():
            tags.append(index[example["tags"][w]] if w is not None and w not in seen else -100)
            if w is not None:
                seen.add(w)
        enc["labels"] = tags
        return dict(enc)

    train = [encode(ex) for ex in (order if order is not None else iter_examples(Path(config.dataset), "train"))]
    test_examples = list(iter_examples(Path(config.dataset), "test"))
    test = [encode(ex) for ex in test_examples]
    collator = (DataCollatorWithPadding(tokenizer) if task == "classification"
                else DataCollatorForTokenClassification(tokenizer))
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, max_steps=config.max_steps, per_device_train_batch_size=config.batch_size,
            per_device_eval_batch_size=config.batch_size, learning_rate=config.lr, weight_decay=config.weight_decay,
            adam_beta1=config.betas[0], adam_beta2=config.betas[1], adam_epsilon=config.eps,
            warmup_steps=config.warmup_steps, lr_scheduler_type=config.schedule, max_grad_norm=config.clip_grad,
            seed=config.seed, data_seed=config.seed, use_cpu=True, report_to="none", save_strategy="no",
            eval_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
            train_sampling_strategy="sequential" if order is not None else sampling)
        trainer = Recording(model=model, args=args, train_dataset=train, data_collator=collator)
        started = Timing.now()
        trainer.train()
        seconds = Timing.now() - started
        logits = trainer.predict(test).predictions
    logits = logits[0] if isinstance(logits, tuple) else logits
    if task == "classification":
        predictions = [labels[i] for i in logits.argmax(-1).tolist()]
        references = [str(ex["label"]) for ex in test_examples]
    else:
        predictions, references = [], []
        for row, enc in zip(logits.argmax(-1), test):
            gold = [i for i in enc["labels"] if i != -100]
            picked = [int(p) for p, g in zip(row, enc["labels"]) if g != -100]
            predictions.append([labels[i] for i in picked])
            references.append([labels[i] for i in gold])
    return METRICS[TASKS[task][0]].compute(predictions, references), seconds, losses


# ----------------------------------------------------------------------------- parity
def without_dropout(checkpoint: Path, folder: Path) -> Path:
    """A copy of the checkpoint whose model has no dropout (so that two trainers' losses can match)."""
    from models_lib.checkpoint import CONFIG_NAME

    shutil.copytree(checkpoint, folder)
    meta = json.loads((folder / CONFIG_NAME).read_text())
    for key in ("hidden_dropout", "attention_dropout"):
        if key in meta["config"]:
            meta["config"][key] = 0.0
    (folder / CONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def our_order(config: FinetuneConfig, steps: int) -> list[dict]:
    """The training examples our engine's stream feeds for `steps` steps, in that order."""
    from trainer import finetune as tasks
    from trainer.finetune.engine import ExampleStream
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    meta = read_meta(Path(config.dataset))
    task = tasks.get(meta["task"])
    labels = [str(x) for x in meta.get("labels") or []]
    collator = task.build_collator(load_tokenizer(Path(config.checkpoint)), labels, config.max_length, config)
    stream = ExampleStream(list(iter_examples(Path(config.dataset), "train")), collator,
                           batch_size=config.batch_size, seed=config.seed, group_by_length=config.group_by_length)
    return [stream.examples[i] for _ in range(steps) for i in stream.next_indices()]


def parity(checkpoint: Path, dataset: Path, root: Path, args: argparse.Namespace) -> None:
    """Both trainers, N steps on the same batches in the same order, dropout off, constant lr: the
    per-step training losses side by side."""
    from models_lib import hf
    from trainer.export import write_tokenizer_files

    steps, seed = args.parity_steps, args.seeds[0]
    plain = without_dropout(checkpoint, root / "parity-checkpoint")
    config = FinetuneConfig(checkpoint=str(plain), dataset=str(dataset), max_steps=steps, batch_size=args.batch_size,
                            max_length=args.max_length, lr=args.lr, warmup_ratio=0.0, schedule="constant",
                            eval_every=steps, checkpoint_every=steps, log_every=1, seed=seed, device="cpu",
                            num_threads=args.threads)
    model, labels = initial_model(config)
    start = root / "parity-start"
    hf.to_pretrained(model, start)
    write_tokenizer_files(plain, start, max_positions=model.config.max_positions, with_token_types=True)
    _, _, sink = run_ours(config, root / "parity-ours")
    ours = [v["loss"] for _, v in sink.split("train")]
    _, _, theirs = run_theirs(config, args.task, start, labels, order=our_order(config, steps))
    print(f"parity: {steps} steps of {args.batch_size}, the same batches in our stream's order, dropout off, "
          f"constant lr {args.lr:g} (seed {seed})")
    print("  step  ours loss   transformers loss   |diff|")
    for i, (a, b) in enumerate(zip(ours, theirs), 1):
        print(f"  {i:4d}  {a:.6f}   {b:.6f}            {abs(a - b):.2e}")
    diffs = [abs(a - b) for a, b in zip(ours, theirs)]
    if diffs:
        print(f"  step 1 |diff| {diffs[0]:.2e}; largest over the {len(diffs)} steps {max(diffs):.2e} "
              f"(at step {diffs.index(max(diffs)) + 1}); ours logged {len(ours)} steps, transformers {len(theirs)}\n")


# ----------------------------------------------------------------------------- main
def speed(examples: int, t: Timing) -> str:
    return f"{examples / t.wall:.1f} examples/s ({t.wall:.1f} s wall, {t.cpu:.1f} s CPU)"


def ratio(theirs: Timing, ours: Timing) -> str:
    return f"{theirs.wall / ours.wall:.2f}x wall, {theirs.cpu / ours.cpu:.2f}x CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=list(TASKS), default="classification")
    parser.add_argument("--checkpoint", type=Path, help="a pre-training checkpoint folder (default: pre-train one)")
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parity-steps", type=int, default=30,
                        help="steps of the same-batches loss comparison before the runs (0: skip it)")
    parser.add_argument("--reference-sampling", nargs="+", default=["random", "group_by_length"],
                        choices=["random", "group_by_length"], help="Trainer's train_sampling_strategy, one run each")
    parser.add_argument("--ours-grouping", nargs="+", default=["on"], choices=["on", "off"],
                        help="our group_by_length, one run each")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from models_lib import hf
    from trainer.export import write_tokenizer_files

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoint = args.checkpoint or pretrain(root, args.pretrain_steps, args.threads)
        dataset = make_dataset(root, args.task)
        if args.parity_steps:
            parity(Path(checkpoint), dataset, root, args)
        primary = METRICS[TASKS[args.task][0]].primary
        examples = args.steps * args.batch_size
        ours_runs: dict[str, list] = {g: [] for g in args.ours_grouping}      # grouping -> [(metrics, s)]
        theirs_runs: dict[str, list] = {m: [] for m in args.reference_sampling}
        for seed in args.seeds:
            base = FinetuneConfig(checkpoint=str(checkpoint), dataset=str(dataset), max_steps=args.steps,
                                  batch_size=args.batch_size, max_length=args.max_length, lr=args.lr,
                                  warmup_ratio=0.1, eval_every=args.steps, checkpoint_every=args.steps,
                                  log_every=max(1, args.steps // 5), seed=seed, device="cpu",
                                  num_threads=args.threads)
            model, labels = initial_model(base)
            start = root / f"start-{seed}"
            hf.to_pretrained(model, start)  # the very weights our engine starts from
            write_tokenizer_files(Path(checkpoint), start, max_positions=model.config.max_positions, with_token_types=True)
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
                metrics, seconds, _ = run_theirs(base, args.task, start, labels, sampling=sampling)
                theirs_runs[sampling].append((metrics, seconds))
                print(f"  transformers, {sampling}: {primary} {metrics[primary]:.4f}, {speed(examples, seconds)}; "
                      f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
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
