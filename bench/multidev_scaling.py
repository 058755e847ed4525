"""Scaling from one to N processes: the same run trained with `python -m trainer run --devices N`.

    .venv/bin/python bench/multidev_scaling.py --preset bert-mini --steps 30 --devices 1 2
    .venv/bin/python bench/multidev_scaling.py --preset bert-base --device cuda --devices 1 8   # on a GPU machine

Each run keeps the effective batch (batch x grad_accum x devices) fixed: with N processes each
takes 1/N of the micro-batches (trainer.training.distributed), so the tokens per step are the
same and only the time per step changes. On the CPU the processes share the machine's cores
(threads = cores / N each), so scaling there shows the cost of gloo's all-reduce rather than a
speed-up. Prints the median training tokens/s after the first few steps (summed over the
processes, as the run reports it) and the ratio to one process.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 5  # logged steps left out of the median (start-up, first allocations)


def run(base: Path, *, preset: str, devices: int, steps: int, batch: int, accum_total: int, seq_len: int,
        device: str, threads: int) -> float:
    out = base / f"devices-{devices}"
    config = base / f"devices-{devices}.yaml"
    config.write_text(json.dumps({
        "corpus": str(base / "corpus.txt"), "output_dir": str(out),
        "tokenizer": {"vocab_size": 8000, "lowercase": True}, "preset": preset, "objectives": ["mlm", "nsp"],
        "max_steps": steps, "batch_size": batch, "grad_accum": accum_total // devices, "seq_len": seq_len,
        "warmup_steps": 1, "log_every": 1, "eval_every": 10**6, "checkpoint_every": 10**6, "device": device,
        "num_threads": threads, "strategy": "ddp",
    }))  # JSON is YAML
    template = base / "devices-1"
    if devices != 1 and template.is_dir():  # the data the first run prepared, copied
        shutil.copytree(template, out, ignore=shutil.ignore_patterns("checkpoints", "metrics.jsonl"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "trainer", "run", str(config), "--devices", str(devices)], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["values"]["tokens_per_s"] for r in records if r["split"] == "train" and r["step"] > WARMUP_STEPS]
    return statistics.median(speeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8, help="sequences per micro-batch")
    parser.add_argument("--accum", type=int, default=4, help="micro-batches per step over all the processes")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        subprocess.run([sys.executable, "-m", "trainer", "demo-corpus", str(base / "corpus.txt")], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        results = {}
        for n in sorted(set(args.devices)):
            threads = max(1, cores // n) if args.device == "cpu" else 0
            results[n] = run(base, preset=args.preset, devices=n, steps=args.steps, batch=args.batch,
                             accum_total=args.accum, seq_len=args.seq_len, device=args.device, threads=threads)
            each = "default threads" if not threads else f"{threads} thread{'s' if threads > 1 else ''}"
            print(f"{args.preset} on {n} {args.device} process{'es' if n > 1 else ''} ({each} each): "
                  f"{results[n]:,.0f} tokens/s", flush=True)
        one = results.get(1)
        if one:
            for n, speed in results.items():
                if n != 1:
                    print(f"  {n} vs 1 process: {speed / one:.2f}x")


if __name__ == "__main__":
    main()
