"""Adding a sentence-pair objective takes its own module, its test and one registration line.

This file is all three: a toy objective, "toy_order", that trains ALBERT's sentence-order head on
pairs swapped a fifth of the time (SOP swaps half) and names the head's classes its own way. Its
collator and step are SOP's; everything else is its own: its SentencePairs (the table, the swap
rate, the head, the meanings), its chart and its family. Registered with one patched line of
trainer.objectives.REGISTRY, it appears in the launch form's schema, RunConfig accepts it for
ALBERT only, the data pipeline builds its pairs at its own swap rate, a few steps of a tiny model
train with it and report its metric on its chart, the run's FLOP count adds its head, and the masking inspector and the explorer's
sentence-order tool use its head and its meanings.
"""
from __future__ import annotations

import pytest

from trainer import objectives
from trainer.charts import ChartSpec, MetricSpec
from trainer.errors import ConfigError, InferenceError
from trainer.objectives.base import Objective
from trainer.objectives.encoder import ALL_UNITS, PreTrainingStep, SOPCollator, pair_head_flops
from trainer.objectives.examples import RANDOM_NEXT, SentencePairs

TOY = Objective(
    name="toy_order",
    label="Toy order (a test's)",
    help="SOP with a fifth of the pairs swapped.",
    collator=SOPCollator, step=PreTrainingStep, units=ALL_UNITS, requires=("mlm",), combines=("mlm",),
    pairs=SentencePairs(swap_prob=0.2, head="sop", meanings=("kept", "turned")),
    metrics=("sop_loss", "sop_acc"),
    charts=(MetricSpec("sop_acc", "toy order accuracy", chart="toy_order"),),
    chart_specs=(ChartSpec("toy_order", "Toy order accuracy", order=88, scale="percent"),),
    families=("albert",), head_flops=pair_head_flops,
)
OBJECTIVES = ["mlm", "toy_order"]
SWAP_FLAG = RANDOM_NEXT  # the table's flag column: "swapped" for consecutive pairs


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(objectives.REGISTRY, "toy_order", f"{__name__}:TOY")  # the one registration line


def toy_config(make_family_config, **changes):
    return make_family_config("albert", **{"objectives": OBJECTIVES, "model_overrides": {
        "hidden_size": 64, "num_heads": 2, "embedding_size": 32}, **changes})


def test_the_launch_schema_offers_it_for_its_family(registered):
    from trainer.catalog.schema import as_json

    schema = as_json()
    assert schema["objectives"]["toy_order"] == {"label": "Toy order (a test's)",
                                                 "help": "SOP with a fifth of the pairs swapped.",
                                                 "metrics": ["sop_loss", "sop_acc"]}
    assert "toy_order" in schema["pair_objectives"]
    by_name = {f["name"]: f for f in schema["families"]}
    assert "toy_order" in by_name["albert"]["objectives"] and "toy_order" not in by_name["bert"]["objectives"]


def test_run_config_accepts_it_for_albert_only(registered, make_family_config):
    assert toy_config(make_family_config).objectives == OBJECTIVES
    with pytest.raises(ConfigError, match="Toy order"):
        make_family_config("bert", objectives=OBJECTIVES)
    with pytest.raises(ConfigError, match="No collator|cannot combine"):
        toy_config(make_family_config, objectives=["mlm", "sop", "toy_order"])  # both extend MLM


def test_the_data_pipeline_swaps_at_its_own_rate(registered, make_family_config, unigram_tokenizer_dir):
    from trainer.objectives.examples import SpecialIds
    from trainer.prep.tokenization import load_tokenizer
    from trainer.training import data

    config = toy_config(make_family_config)
    special = SpecialIds.from_tokenizer(load_tokenizer(unigram_tokenizer_dir))
    index = data.open_split(unigram_tokenizer_dir, "train")
    collator = data.make_collator(config, special)
    source = data.make_source(config, index, special, collator, static=False)
    table = source.instances(0)
    swapped = table[:, SWAP_FLAG].astype(bool)
    assert len(table) > 200 and 0.12 < swapped.mean() < 0.28  # SOP's own table swaps about half
    sop = data.make_source(toy_config(make_family_config, objectives=["mlm", "sop"]), index, special, collator,
                           static=False)
    assert 0.4 < sop.instances(0)[:, SWAP_FLAG].mean() < 0.6
    examples = [source.example(table, uid, 0) for uid in range(16)]
    assert [ex.swapped for ex in examples] == list(swapped[:16]) and not any(ex.is_random_next for ex in examples)
    batch = collator(examples)
    assert batch.sop_labels.tolist() == [int(s) for s in swapped[:16]]


def test_the_flop_count_adds_its_head(registered):
    from models_lib.families import presets
    from trainer.training.flops import Workload, training_flops_per_token

    config = presets.get("albert-tiny", vocab_size=101, hidden_size=32, num_heads=2, intermediate_size=64,
                         num_layers=2, embedding_size=16)

    def per_token(*names):
        return training_flops_per_token(config, Workload(seq_len=16, predicted=0.25, objectives=names))

    assert per_token("mlm", "toy_order") == pytest.approx(per_token("mlm", "sop"), rel=1e-12)
    assert per_token("mlm", "toy_order") - per_token("mlm") == pytest.approx(3 * 2 * (32 * 32 + 32 * 2) / 16)


@pytest.fixture
def toy_run(registered, make_family_config, unigram_tokenizer_dir, tmp_path):
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    config = toy_config(make_family_config, max_steps=6, eval_every=3, eval_batches=1, checkpoint_every=6,
                        log_every=1)
    sink = ListSink()
    result = train(config, data_dir=unigram_tokenizer_dir, out_dir=tmp_path / "run", sink=sink)
    return result, sink, config


def test_it_trains_and_reports_its_metric_on_its_chart(toy_run):
    result, sink, _ = toy_run
    assert result.status == "succeeded" and result.final_step == 6
    assert all({"mlm_loss", "sop_loss", "sop_acc"} <= set(values) for _, values in sink.split("train"))
    assert "sop_acc" in sink.split("valid")[-1][1]
    chart = next(c for c in objectives.charts_for(OBJECTIVES) if c["id"] == "toy_order")
    assert chart["title"] == "Toy order accuracy" and chart["scale"] == "percent"
    assert [(s["metric"], s["split"]) for s in chart["series"]] == [("sop_acc", "train"), ("sop_acc", "valid")]


def test_the_inspector_and_the_explorer_use_its_head_and_meanings(toy_run, unigram_tokenizer_dir):
    from trainer.inference import masked
    from trainer.inference.inspection import sample_batch

    result, sink, config = toy_run
    examples = sample_batch(config.to_dict(), unigram_tokenizer_dir, n_examples=8, seed=0)
    pairs = [ex["pair"] for ex in examples]
    assert {p["task"] for p in pairs} == {"toy_order"}
    assert all(p["meaning"] == ("kept", "turned")[p["label"]] for p in pairs)
    assert [p["label"] for p in pairs].count(1) < 8  # a fifth swapped: not every one of the eight

    assert [o.name for o in objectives.pair_heads(OBJECTIVES)] == ["toy_order"]
    checkpoint = sink.checkpoints[-1][1]
    order = masked.sentence_order(checkpoint, "Open the file first.", "Then read its lines.")
    assert order["head"] == "sop" and order["judges_order"] and 0 <= order["ab"] <= 1
    with pytest.raises(InferenceError, match="next sentence prediction"):
        masked.next_sentence(checkpoint, "Open the file first.", "Then read its lines.")  # no random-next head

