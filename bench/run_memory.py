"""A CPU training run's memory over its steps (issue 31, point 7), with the oneDNN primitive cache
LM Workbench sets (trainer/__init__.py: ONEDNN_PRIMITIVE_CACHE_CAPACITY=8) against the library's
default (1,024), each in a fresh process, same data, same run:

    .venv/bin/python bench/run_memory.py                       # bert-mini, 200 steps
    .venv/bin/python bench/run_memory.py --preset bert-tiny --steps 300

It prints the run's resident memory (the memory_mb it logs, as the run page charts it) at a few
steps, the growth after warm-up (step 40 to the end) and the run's time, for each setting, and the
ratios. The corpus is the demo corpus (Python's docstrings), prepared once into bench/.cache/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache" / "run-memory"
sys.path.insert(0, str(ROOT))

RUN = """
import json, sys
sys.path.insert(0, {root!r})
from trainer.config import RunConfig
from trainer.training.engine import train
from trainer.training.sinks import ListSink
config = RunConfig(preset={preset!r}, objectives=["mlm", "nsp"], max_steps={steps}, batch_size=16, seq_len=128,
                   lr=1e-3, warmup_steps=10, eval_every=10**6, eval_batches=1, checkpoint_every=10**6, log_every=10,
                   seed=0, device="cpu", num_threads=1, data_workers=0)
sink = ListSink()
train(config, data_dir={data!r}, out_dir={out!r}, sink=sink)
print(json.dumps([[s, v["memory_mb"]] for s, split, v in sink.events if split == "train"]))
"""


def prepare() -> Path:
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    tok = CACHE / "tokenizer"
    if not (tok / "shards" / "valid").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        raw = write_demo_corpus(CACHE / "demo.txt")
        ingest(raw, CACHE / "corpus", original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.05,
               seed=0)
        train_tokenizer(CACHE / "corpus", tok, vocab_size=4000)
        encode_corpus(CACHE / "corpus", tok)
    return tok


def measure(tok: Path, preset: str, steps: int, capacity: str | None) -> tuple[dict[int, float], float]:
    out = CACHE / f"run-{capacity or 'set'}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if capacity:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = capacity
    code = RUN.format(root=str(ROOT), preset=preset, steps=steps, data=str(tok), out=str(out))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    took = time.perf_counter() - started
    return {int(s): float(mb) for s, mb in json.loads(done.stdout.strip().splitlines()[-1])}, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    tok = prepare()
    rows = {}
    for label, capacity in (("LM Workbench (8)", None), ("library default (1024)", "1024")):
        rows[label] = measure(tok, args.preset, args.steps, capacity)
    shown = [1, 40, args.steps // 2, args.steps]
    print(f"{args.preset}, {args.steps} steps of 16 x 128 tokens, one CPU thread: resident memory (MB)")
    print(f"{'oneDNN primitive cache':<24}" + "".join(f"{'step ' + str(s):>11}" for s in shown)
          + f"{'growth 40->end':>16}{'time':>8}")
    for label, (memory, took) in rows.items():
        near = {s: memory[min(memory, key=lambda k: abs(k - s))] for s in shown}
        print(f"{label:<24}" + "".join(f"{near[s]:>11,.0f}" for s in shown)
              + f"{near[args.steps] - near[40]:>16,.0f}{took:>7.0f}s")
    (ours, t_ours), (theirs, t_theirs) = rows.values()
    growth = lambda m: m[max(m)] - m[min(m, key=lambda k: abs(k - 40))]  # noqa: E731
    print(f"growth after warm-up, default / ours: {growth(theirs) / max(1.0, growth(ours)):.1f}x; "
          f"time, ours / default: {t_ours / t_theirs:.2f}")


if __name__ == "__main__":
    main()
