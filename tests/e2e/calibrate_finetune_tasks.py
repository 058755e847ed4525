"""Calibrate test_finetune_tasks.py's thresholds: each task's run trained in-process as the live
stack's worker trains it (the same demo dataset, base checkpoint, settings, seed and one thread),
at the seeds asked, printing its test metric beside the chance level and the bound the test
asserts, and the seconds it took.

    DJANGO_SETTINGS_MODULE=webapp.settings DEBUG=1 STORAGE_ROOT=/tmp/calibrate \\
        .venv/bin/python -m tests.e2e.calibrate_finetune_tasks --seeds 0 1 2 [--tasks sft regression] \\
        [--set max_steps=200] [--set multilabel.max_steps=800] [--jobs 2]

--set changes a setting of every task (name=value) or of one (task.name=value); the values are
read as JSON where they parse (200, 3e-3, true), else as text. --jobs runs that many at once, each
in its own process, as the worker's two slots do. Not collected by pytest (no test_ prefix).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    os.environ.setdefault("DEBUG", "1")
    import django

    django.setup()


def _dataset(demo: str, root: Path) -> Path:
    """The demo dataset ingested into root/<demo> (tests/trainer/finetune_helpers.ingested_demo:
    its header's mapping and task, the seeded random 0.8 / 0.1 / 0.1 split, as the web app's
    dataset_create_demo); built once per root."""
    from tests.trainer.finetune_helpers import ingested_demo

    out = root / demo
    return out if (out / "dataset.json").is_file() else ingested_demo(demo, root)


def train_one(task: str, seed: int, settings: dict, root: str) -> dict:
    """One run of `task` at `seed`: {task, seed, metric, value, chance, bound, passes, seconds}."""
    _setup()
    from tests.e2e.test_finetune_tasks import CHECKS, RUNTIME, TASKS, base_folder
    from trainer.finetune.config import FinetuneConfig
    from trainer.finetune.engine import finetune
    from trainer.finetune.report import PREDICTIONS_JSONL
    from trainer.training.sinks import ListSink

    demo, family, _ = TASKS[task]
    dataset = _dataset(demo, Path(root))
    out = Path(tempfile.mkdtemp(prefix=f"{task}-{seed}-", dir=root))
    config = FinetuneConfig.from_dict({**RUNTIME, **settings, "seed": seed, "device": "cpu",
                                       "checkpoint": str(base_folder(family)), "dataset": str(dataset),
                                       "task": dataset_task(dataset)})
    start = time.perf_counter()
    sink = ListSink()
    result = finetune(config, out_dir=out, sink=sink)
    seconds = time.perf_counter() - start
    metric, chance_of, margin = CHECKS[task]
    tests = [values for _, split, values in sink.events if split == "test"]
    if result.status != "succeeded" or not tests:
        return dict(task=task, seed=seed, metric=metric, value=None, status=result.status,
                    error=(sink.lines or [""])[-1], seconds=seconds)
    gold = [json.loads(line)["gold"] for line in (out / PREDICTIONS_JSONL).read_text().splitlines() if line.strip()] \
        if (out / PREDICTIONS_JSONL).is_file() else []
    chance = chance_of(gold)
    value = tests[-1][metric]
    lower_is_better = metric == "perplexity"
    bound = chance - margin if lower_is_better else chance + margin
    return dict(task=task, seed=seed, metric=metric, value=value, chance=chance, bound=bound,
                passes=value < bound if lower_is_better else value > bound, seconds=seconds,
                steps=result.final_step)


def dataset_task(dataset: Path) -> str:
    from trainer.prep.labelled import read_meta

    return read_meta(dataset)["task"]


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=None, help="the TASKS keys (default: all)")
    parser.add_argument("--set", action="append", default=[], metavar="[TASK.]NAME=VALUE")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    _setup()
    from tests.e2e.test_finetune_tasks import TASKS, base_folder

    tasks = args.tasks or list(TASKS)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"no such task: {', '.join(unknown)} (the tasks: {', '.join(TASKS)})")
    settings = {task: dict(TASKS[task][2]) for task in tasks}
    for change in args.set:
        name, _, value = change.partition("=")
        scope, _, name = name.rpartition(".")
        for task in ([scope] if scope else tasks):
            if task in settings:
                settings[task][name] = _value(value)
    root = os.environ.get("CALIBRATE_ROOT") or tempfile.mkdtemp(prefix="calibrate-")
    for task in tasks:  # the datasets and bases once, before the runs share them
        _dataset(TASKS[task][0], Path(root))
    for family in {TASKS[t][1] for t in tasks}:
        base_folder(family)
    jobs = [(task, seed) for task in tasks for seed in args.seeds]
    failed = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(task, seed, pool.submit(train_one, task, seed, settings[task], root)) for task, seed in jobs]
        for task, seed, future in futures:
            r = future.result()
            if r["value"] is None:
                failed += 1
                print(f"{task:22s} seed {seed}: {r['status']} ({r['error']}) {r['seconds']:.0f} s", flush=True)
                continue
            failed += not r["passes"]
            print(f"{task:22s} seed {seed}: {r['metric']} {r['value']:.3f}  chance {r['chance']:.3f}  bound "
                  f"{r['bound']:.3f}  margin {abs(r['value'] - r['bound']):.3f}{'' if r['passes'] else '  FAILS'}"
                  f"  {r['steps']} steps, {r['seconds']:.0f} s  ({json.dumps(settings[task])})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
