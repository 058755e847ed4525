"""Packed against padded encoder batches on the same run: the loss curve and the speed.

    .venv/bin/python bench/packing_curve.py                       # bert-mini MLM+NSP, demo corpus, 300 steps
    .venv/bin/python bench/packing_curve.py --preset bert-tiny --steps 100 --tokenizer-dir DIR

Packing (trainer.objectives.packing) computes each batch's examples in fewer rows: the same
examples, masks and labels, so the same losses up to float rounding, but other dropout masks
(they are drawn over the positions computed). This trains the run twice from the same seed,
once packed (the product's way) and once padded (the objective's `packs` switched off for the
second run only), and prints both curves side by side: training loss at each log step and the
validation loss at each evaluation, with the real tokens/s and the fill of each run.

The data is the product's demo corpus (`python -m trainer demo-corpus`), cleaned, tokenized
(WordPiece 8,000, lowercase) and sharded once into --cache; or an existing tokenizer folder with
shards (--tokenizer-dir).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the repo

from trainer import objectives  # noqa: E402
from trainer.config import RunConfig  # noqa: E402
from trainer.training.engine import train  # noqa: E402
from trainer.training.sinks import ListSink  # noqa: E402


def prepared(cache: Path) -> Path:
    """A tokenizer folder with shards of the demo corpus (made once in `cache`)."""
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    tok_dir = cache / "tokenizer"
    if (tok_dir / "shards" / "valid").exists():
        return tok_dir
    cache.mkdir(parents=True, exist_ok=True)
    raw = write_demo_corpus(cache / "demo.txt")
    ingest(raw, cache / "corpus", original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.05,
           seed=0)
    train_tokenizer(cache / "corpus", tok_dir, algorithm="wordpiece", vocab_size=8000, lowercase=True)
    encode_corpus(cache / "corpus", tok_dir)
    return tok_dir


def run(config: RunConfig, data: Path, out: Path, *, packed: bool) -> ListSink:
    lead = objectives.resolve(config.objectives)
    was = lead.packs
    object.__setattr__(lead, "packs", packed)  # the objective is a frozen record; this run only
    try:
        sink = ListSink()
        train(config, data_dir=data, out_dir=out, sink=sink)
        return sink
    finally:
        object.__setattr__(lead, "packs", was)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="bert-mini")
    p.add_argument("--objectives", default="mlm,nsp")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", type=Path, default=Path("bench/.cache/packing_curve"))
    p.add_argument("--tokenizer-dir", type=Path, default=None)
    args = p.parse_args(argv)
    data = args.tokenizer_dir or prepared(args.cache)
    log_every = max(1, args.steps // 20)
    config = RunConfig(preset=args.preset, objectives=args.objectives.split(","), max_steps=args.steps,
                       batch_size=args.batch_size, seq_len=args.seq_len, lr=5e-4, warmup_steps=args.steps // 10,
                       eval_every=max(1, args.steps // 5), eval_batches=20, checkpoint_every=args.steps,
                       log_every=log_every, seed=args.seed, device="cpu", num_threads=args.threads,
                       data_workers=args.data_workers)
    runs = {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for packed in (True, False):
        started = time.perf_counter()
        runs[packed] = run(config, data, args.cache / f"runs-{stamp}" / ("packed" if packed else "padded"),
                           packed=packed)
        print(f"{'packed' if packed else 'padded'}: {time.perf_counter() - started:.0f} s", flush=True)
    train_rows = {k: dict(s.split("train")) for k, s in runs.items()}
    valid_rows = {k: dict(s.split("valid")) for k, s in runs.items()}
    print(f"\n{config.preset} {'+'.join(config.objectives)}, {args.steps} steps of {args.batch_size} x {args.seq_len}, "
          f"seed {args.seed}, {args.threads} thread(s), data_workers {args.data_workers}")
    print(f"{'step':>6}  {'train loss packed':>17}  {'padded':>8}  {'valid loss packed':>17}  {'padded':>8}")
    for step in sorted(train_rows[True]):
        v = valid_rows[True].get(step), valid_rows[False].get(step)
        valid = f"{v[0]['loss']:17.4f}  {v[1]['loss']:8.4f}" if v[0] and v[1] else f"{'':17}  {'':8}"
        print(f"{step:6d}  {train_rows[True][step]['loss']:17.4f}  {train_rows[False][step]['loss']:8.4f}  {valid}")
    for packed in (True, False):
        rows = [v for s, v in train_rows[packed].items() if s > 2 * log_every]
        tps = statistics.mean(v["tokens_per_s"] for v in rows)
        fill = statistics.mean(v["fill"] for v in rows)
        print(f"{'packed' if packed else 'padded'}: {tps:,.0f} real tokens/s, fill {fill:.3f} "
              f"(means of the log intervals after step {2 * log_every})")
    last = max(valid_rows[True])
    a, b = valid_rows[True][last], valid_rows[False][last]
    print(f"final validation: packed loss {a['loss']:.4f} mlm_acc {a.get('mlm_acc', float('nan')):.4f}; "
          f"padded loss {b['loss']:.4f} mlm_acc {b.get('mlm_acc', float('nan')):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
