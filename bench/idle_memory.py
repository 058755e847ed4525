"""Idle memory of a worker's pool process (issue 22, point 6): its resident memory after it starts,
after a training run, after the explorer has loaded a few checkpoints, and once it has been recycled.

    .venv/bin/python bench/idle_memory.py
    .venv/bin/python bench/idle_memory.py --preset bert-mini --steps 60 --limit-kib 1048576

What is measured, in-process rather than through a live worker (no database, broker or web server
needed): the parent imports what a Celery worker's main process imports (Django set up, the Celery
app and every task module, torch through the trainer), then forks a child, as the prefork pool does.
The child reports VmRSS (resident now) and VmHWM (the peak, which is what Celery compares with
WORKER_MAX_MEMORY_PER_CHILD: ru_maxrss) (a) at once, (b) after training a run through the trainer's
API (trainer.training.engine.train, the call the train task makes), (c) after fill-mask on each of
the run's checkpoints through the explorer's cache (trainer.inference, bounded by
EXPLORER_CACHE_BYTES). Then it exits and a second child is forked: (d) is what the process that
replaces a recycled one holds, and whether (c)'s peak passes --limit-kib says whether Celery would
recycle it. The corpus and tokenizer are prepared in a third, throwaway child first (a real
deployment does that on the jobs worker), so none of it is in the parent's memory when it forks.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the repo

CORPUS_CHARS = 120_000


def memory_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB, from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def prepare(folder: Path) -> None:
    """A slice of the demo corpus, ingested, a 1,000-token WordPiece tokenizer and its shards."""
    from trainer.prep.corpus import CleaningOptions, ingest, write_demo_corpus
    from trainer.prep.shards import encode_corpus
    from trainer.prep.tokenization import train_tokenizer

    text = write_demo_corpus(folder / "full.txt").read_text(encoding="utf-8")
    cut = text.rfind("\n\n", 0, CORPUS_CHARS)
    raw = folder / "demo.txt"
    raw.write_text(text[: cut if cut > 0 else CORPUS_CHARS] + "\n", encoding="utf-8")
    ingest(raw, folder / "corpus", original_filename="demo.txt", options=CleaningOptions(), valid_fraction=0.1, seed=0)
    train_tokenizer(folder / "corpus", folder / "tokenizer", algorithm="wordpiece", vocab_size=1000, lowercase=True)
    encode_corpus(folder / "corpus", folder / "tokenizer")


def used(folder: Path, preset: str, steps: int, queue: mp.Queue) -> None:
    """A pool process's life: start, train a run, explore its checkpoints; the figures go to `queue`."""
    from trainer.config import RunConfig
    from trainer.inference import loading, masked
    from trainer.training.engine import train
    from trainer.training.sinks import NullSink

    figures = [("(a) started", *memory_kib())]
    config = RunConfig(preset=preset, max_steps=steps, batch_size=8, seq_len=64, warmup_steps=2,
                       eval_every=steps, eval_batches=2, checkpoint_every=max(1, steps // 4), log_every=steps,
                       seed=0, device="cpu", num_threads=1)
    train(config, data_dir=folder / "tokenizer", out_dir=folder / "run", sink=NullSink())
    figures.append(("(b) after a training run", *memory_kib()))
    checkpoints = loading.list_checkpoints(folder / "run")
    for _, checkpoint in checkpoints:
        masked.fill_mask(checkpoint, "the function returns a [MASK] of the object.")
    figures.append((f"(c) after the explorer on {len(checkpoints)} checkpoints "
                    f"({loading.cached_bytes() / 1e6:.1f} MB cached)", *memory_kib()))
    queue.put(figures)


def fresh(queue: mp.Queue) -> None:
    queue.put([("(d) a fresh pool process (after recycling)", *memory_kib())])


def in_child(context, target, *args) -> list:
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    figures = queue.get()
    child.join()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="bert-tiny")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--limit-kib", type=int, default=None,
                        help="the recycling limit to compare with (default: the app's WORKER_MAX_MEMORY_PER_CHILD)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.conf import settings

    from webapp.celery import app

    app.loader.import_default_modules()  # every task module, as the worker imports them
    import trainer.training.engine  # noqa: F401 - what the train task imports on its first run

    limit = args.limit_kib if args.limit_kib is not None else settings.CELERY_WORKER_MAX_MEMORY_PER_CHILD
    context = mp.get_context("fork")  # as Celery's prefork pool starts its processes
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prep = context.Process(target=prepare, args=(folder,))
        prep.start()
        prep.join()
        if prep.exitcode != 0:
            sys.exit("Preparing the corpus and tokenizer failed.")
        print(f"parent (the worker's main process): {memory_kib()[0] / 1024:.0f} MB resident")
        figures = in_child(context, used, folder, args.preset, args.steps)
        figures += in_child(context, fresh)
    print(f"{'pool process':<64} {'RSS MB':>8} {'peak MB':>8}")
    for label, rss, peak in figures:
        print(f"{label:<64} {rss / 1024:>8.0f} {peak / 1024:>8.0f}")
    peak = figures[2][2]
    if limit:
        verdict = "recycled" if peak > limit else "kept (under the limit)"
        print(f"limit {limit} KiB ({limit / 1024:.0f} MB): after (c) the process is {verdict}")
    else:
        print("no limit (WORKER_MAX_MEMORY_PER_CHILD=0): the process is never recycled")


if __name__ == "__main__":
    main()
