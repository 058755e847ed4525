"""How often torch.compile compiles a tiny run of each family, and why: on the CPU, with dynamo's
capture and the aot_eager backend (recompiles are dynamo's decision, whatever the backend).

    .venv/bin/python bench/compile_recompiles.py                    # every setup, 30 steps, validation every 10
    .venv/bin/python bench/compile_recompiles.py --only bert,gpt --steps 20

Per setup: the run's batch shapes (how many distinct ones the compiled forward saw), every
compilation in order (step or validation, the function, dynamo's reason for a recompile), the graph
breaks (dynamo's counter: reason -> count) and what the run's log said after warm-up
(trainer.training.speedups.CompileWatch). The data: the demo corpus, ~200 KB, with a WordPiece,
a byte-level BPE and a Unigram tokenizer (T5's sentinels), prepared once into --cache.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETUPS = {  # name -> (family, tokenizer kind, model overrides); each with its family's default objectives
    "bert": ("bert", "wordpiece", {"hidden_size": 64, "num_heads": 2}),
    "roberta": ("roberta", "bpe", {"hidden_size": 64, "num_heads": 2}),
    "electra": ("electra", "wordpiece", {"hidden_size": 64, "num_heads": 2}),
    "t5": ("t5", "sentinel", {}),
    "gpt": ("gpt", "bpe", {"hidden_size": 64, "num_heads": 2}),
}


def prepare(cache: Path) -> dict[str, Path]:
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    corpus = cache / "corpus"
    if not corpus.exists():
        text = write_demo_corpus(cache / "demo_full.txt").read_text(encoding="utf-8")
        raw = cache / "demo.txt"
        raw.write_text(text[: text.rfind("\n\n", 0, 200_000)] + "\n", encoding="utf-8")
        ingest(raw, corpus, original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.1, seed=0)
    kinds = {"wordpiece": dict(algorithm="wordpiece"), "bpe": dict(algorithm="bpe"),
             "sentinel": dict(algorithm="unigram", extra_ids=100)}
    out = {}
    for kind, options in kinds.items():
        folder = cache / f"tokenizer-{kind}"
        if not (folder / "shards").exists():
            train_tokenizer(corpus, folder, vocab_size=2000, lowercase=True, **options)
            encode_corpus(corpus, folder)
        out[kind] = folder
    return out


def run_setup(name: str, data: Path, steps: int, eval_every: int, out: Path) -> None:
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters, get_compilation_metrics, set_compilation_metrics_limit

    from trainer import families
    from trainer.config import RunConfig
    from trainer.training import engine
    from trainer.training.sinks import ListSink

    family, _, overrides = SETUPS[name]
    objectives = list(families.get(family).default_objectives)
    torch._dynamo.reset()
    counters.clear()
    set_compilation_metrics_limit(10_000)  # every compilation of the run (64 by default)
    config = RunConfig(family=family, preset=families.get(family).default_preset, objectives=objectives,
                       model_overrides=overrides, max_steps=steps, batch_size=8, seq_len=64, lr=1e-3,
                       warmup_steps=2, eval_every=eval_every, eval_batches=2, checkpoint_every=steps,
                       log_every=steps, seed=0, device="cpu", num_threads=1, compile="on")
    shapes: list[tuple] = []
    events: list[str] = []
    original = engine.Loop.train_step

    def train_step(loop):  # the step's batch shapes and what compiled during it
        batches = loop.next_batch

        def peek():
            batch, position = batches()
            shapes.append(tuple(tuple(t.shape) for t in (batch.input_ids, getattr(batch, "real_tokens", None))
                                if t is not None))
            return batch, position

        loop.next_batch = peek
        before = len(get_compilation_metrics())
        original(loop)
        loop.next_batch = batches
        for c in get_compilation_metrics()[before:]:
            events.append(f"step {loop.state.step}: {c.co_name} {c.compile_id} "
                          f"{(c.recompile_reason or 'first compile').splitlines()[0][:160]}"
                          f"{' FAILED ' + (c.fail_reason or '').splitlines()[0] if c.fail_type else ''}")

    original_eval = engine.Loop.evaluate

    def evaluate(loop, batches=None):
        before = len(get_compilation_metrics())
        values = original_eval(loop, batches)
        for c in get_compilation_metrics()[before:]:
            events.append(f"validation at {loop.state.step}: {c.co_name} {c.compile_id} "
                          f"{(c.recompile_reason or 'first compile').splitlines()[0][:160]}")
        return values

    engine.Loop.train_step, engine.Loop.evaluate = train_step, evaluate
    sink = ListSink()
    try:
        engine.train(config, data_dir=data, out_dir=out / name, sink=sink)
    finally:
        engine.Loop.train_step, engine.Loop.evaluate = original, original_eval
    print(f"== {name}: {len(shapes)} training batches, {len(set(shapes))} distinct shapes "
          f"(input_ids, real_tokens): {sorted(set(shapes))[:6]}{' ...' if len(set(shapes)) > 6 else ''}")
    print(f"   compilations: {len(events)}")
    for e in events:
        print(f"     {e}")
    breaks = Counter({k: v for k, v in counters["graph_break"].items()})
    print(f"   graph breaks (distinct reasons {len(breaks)}, total {sum(breaks.values())}):")
    for reason, n in breaks.most_common():
        print(f"     {n} x {reason.splitlines()[0][:220]}")
    logged = [line for line in sink.lines if line.startswith("torch.compile") and "first training step" not in line]
    print(f"   the run's log after warm-up: {len(logged)} line(s)")
    for line in logged:
        print(f"     {line[:300]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SETUPS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "lmwb-compile-recompiles")
    args = parser.parse_args(argv)
    os.environ.setdefault("LMWB_COMPILE_BACKEND", "aot_eager")
    args.cache.mkdir(parents=True, exist_ok=True)
    data = prepare(args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            run_setup(name, data[SETUPS[name][1]], args.steps, args.eval_every, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
