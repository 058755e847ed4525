"""Every examples/finetune-*.yaml trains as written (its settings, its demo dataset, its task)
through `python -m trainer finetune`, cut to two steps, from a two-step pre-training run of the
family its `checkpoint` names, in the run folder the pre-training example writes (runs/<family>-tiny);
and the examples cover every fine-tuning task the trainer offers."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import T5_RECIPE
from trainer.training.sinks import ListSink

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FINETUNE_EXAMPLES = sorted(EXAMPLES.glob("finetune-*.yaml"))
SHORT = {"max_steps": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1, "device": "cpu", "num_threads": 1}


def family_of(example: dict) -> str:
    """runs/<family>-tiny, as examples/<family>-tiny.yaml writes it."""
    name = Path(str(example["checkpoint"])).name
    assert name.endswith("-tiny"), name
    return name.removesuffix("-tiny")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory, tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir, make_family_config):
    """A folder holding runs/<family>-tiny for every family the examples start from (two steps of
    each family's default objectives, on the tokenizer its pre-training example trains)."""
    from trainer.training.engine import train

    root = tmp_path_factory.mktemp("examples")
    data = {"t5": sentinel_tokenizer_dir, "gpt": bpe_tokenizer_dir}
    for family in sorted({family_of(yaml.safe_load(p.read_text())) for p in FINETUNE_EXAMPLES}):
        changes = {"t5": T5_RECIPE, "elmo": {"model_overrides": {}}}.get(family, {})  # their presets' own sizes
        config = make_family_config(family, max_steps=2, warmup_steps=1, checkpoint_every=2, eval_every=2, **changes)
        train(config, data_dir=data.get(family, tokenizer_dir), out_dir=root / "runs" / f"{family}-tiny",
              sink=ListSink())
    return root


@pytest.mark.parametrize("path", FINETUNE_EXAMPLES, ids=lambda p: p.stem)
def test_the_example_fine_tunes_as_written(runs_root, path, capsys):
    from trainer.cli import main

    example = yaml.safe_load(path.read_text())
    short = {**example, **SHORT, "batch_size": min(8, int(example.get("batch_size", 8)))}
    if "then_finetune_on" in example:
        short["then_steps"] = 2
    config = runs_root / path.name
    config.write_text(yaml.safe_dump(short))
    assert main(["finetune", str(config)]) == 0, capsys.readouterr()
    out = runs_root / str(example["output_dir"])
    assert (out / "test_metrics.json").is_file() and list((out / "checkpoints").iterdir())
    if "then_finetune_on" in example:
        assert (out / f"then-{example['then_finetune_on']}" / "test_metrics.json").is_file()


def test_the_examples_cover_every_task_and_family_the_trainer_fine_tunes():
    from trainer import finetune
    from trainer.prep.labelled import DEMOS

    covered, demos = set(), set()
    for path in FINETUNE_EXAMPLES:
        example = yaml.safe_load(path.read_text())
        demo = example["dataset"]["demo"]
        demos.add(demo)
        covered.add((DEMOS[demo].task, family_of(example)))
    assert {task for task, _ in covered} == set(finetune.names())
    assert {family for _, family in covered} == {"bert", "t5", "gpt", "elmo"}
    assert set(DEMOS) <= demos  # every demo dataset has an example that trains on it
