"""The dashboard's chart table (trainer/charts.py): which charts and series a run's objectives
get, in what order, and that the table agrees with what the trainer records."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from trainer import charts
from trainer import families
from trainer import objectives
from trainer.charts import ChartSpec, MetricSpec, StatSpec
from trainer.objectives import charts_for, encoder, stats_for

COMMON_CHARTS = ["lr", "grad_norm", "tokens_per_s", "mfu", "fill", "memory_mb"]
# What the engine records for every run besides the objectives' own keys (trainer/training/engine.py).
ENGINE_KEYS = {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "fill", "memory_mb", "progress", "eta_s"}


def ids(result):
    return [c["id"] for c in result]


def series(result, chart_id):
    chart = next(c for c in result if c["id"] == chart_id)
    return [(s["metric"], s["split"], s["label"]) for s in chart["series"]]


def test_bert_with_mlm_and_nsp():
    result = charts_for(["mlm", "nsp"])
    assert ids(result) == ["loss", "mlm_acc", "nsp_acc", *COMMON_CHARTS]
    assert series(result, "loss") == [("loss", "train", "train"), ("loss", "valid", "validation")]
    assert series(result, "mlm_acc") == [("mlm_acc", "train", "train"), ("mlm_acc", "valid", "validation")]
    assert series(result, "lr") == [("lr", "train", "learning rate")]
    loss = result[0]
    assert loss == {"id": "loss", "title": "Loss", "unit": "", "scale": "linear",
                    "y2_title": "", "per_token": True, "series": loss["series"]}
    assert not next(c for c in result if c["id"] == "lr")["per_token"]  # compare notes only tokenizer-bound ones
    assert next(c for c in result if c["id"] == "nsp_acc")["scale"] == "percent"
    assert next(c for c in result if c["id"] == "lr")["scale"] == "scientific"


def test_span_corruption_charts_token_accuracy_and_perplexity_from_the_lm_loss():
    result = charts_for(["span_corruption"])
    assert ids(result) == ["loss", "lm_acc", "perplexity", *COMMON_CHARTS]
    perplexity = next(c for c in result if c["id"] == "perplexity")
    assert perplexity["scale"] == "log"
    # training: exp of each logged lm_loss; validation: the trainer's own perplexity
    assert [(s["metric"], s["split"], s["transform"]) for s in perplexity["series"]] == [
        ("lm_loss", "train", "exp"), ("perplexity", "valid", "")]
    assert charts_for(["clm"]) == result  # GPT's causal LM reports the same


def test_bilm_charts_both_directions():
    result = charts_for(["bilm"])
    assert ids(result) == ["loss", "elmo_perplexity", "elmo_loss", "elmo_acc", *COMMON_CHARTS]
    assert series(result, "elmo_perplexity") == [
        ("forward_loss", "train", "forward (train)"), ("backward_loss", "train", "backward (train)"),
        ("forward_perplexity", "valid", "forward (validation)"),
        ("backward_perplexity", "valid", "backward (validation)")]
    for chart in result[1:4]:
        assert len(chart["series"]) == 4
        assert {s["color"] for s in chart["series"]} == {charts.BLUE, charts.GREEN}
    assert "mlm_acc" not in ids(result) and "perplexity" not in ids(result)


def test_electra_draws_the_discriminator_loss_on_a_second_axis():
    result = charts_for(["mlm", "rtd"])
    assert ids(result) == ["loss", "mlm_acc", "electra_loss", "rtd", *COMMON_CHARTS]
    electra = next(c for c in result if c["id"] == "electra_loss")
    assert electra["y2_title"] == "discriminator loss"
    assert [(s["metric"], s["split"], s["label"], s["axis"]) for s in electra["series"]] == [
        ("mlm_loss", "train", "generator (train)", "y"), ("mlm_loss", "valid", "generator (validation)", "y"),
        ("rtd_loss", "train", "discriminator (train)", "y2"),
        ("rtd_loss", "valid", "discriminator (validation)", "y2")]
    assert series(result, "rtd") == [
        ("rtd_precision", "train", "precision"), ("rtd_recall", "train", "recall"), ("rtd_acc", "train", "accuracy"),
        ("rtd_precision", "valid", "precision (validation)"), ("rtd_recall", "valid", "recall (validation)")]


@pytest.mark.parametrize("objectives, charts_of_objectives", [
    (["mlm", "sop"], ["mlm_acc", "sop_acc"]),
    (["mlm", "sbo"], ["mlm_acc", "sbo_loss", "sbo_acc"]),
    (["mlm", "distill"], ["mlm_acc", "distill"]),
    (["mlm", "unilm"], ["mlm_acc"]),
    (["deshuffle"], ["lm_acc", "perplexity"]),
])
def test_each_family_gets_its_own_charts_between_the_loss_and_the_common_ones(objectives, charts_of_objectives):
    assert ids(charts_for(objectives)) == ["loss", *charts_of_objectives, *COMMON_CHARTS]


def test_the_order_does_not_depend_on_how_the_run_lists_its_objectives():
    assert charts_for(["nsp", "mlm"]) == charts_for(["mlm", "nsp"])


def test_a_series_two_objectives_report_appears_once():
    # Every T5 objective and GPT's clm list the same LM series; a (made-up) run with two of them
    # draws each once.
    result = charts_for(["span_corruption", "clm"])
    assert result == charts_for(["span_corruption"])
    for chart in charts_for(["mlm", "nsp", "sop", "sbo", "rtd", "distill", "unilm", "clm", "bilm"]):
        keys = [(s["metric"], s["split"], s["transform"]) for s in chart["series"]]
        assert len(keys) == len(set(keys)), chart["id"]


def test_the_same_metric_may_be_drawn_on_two_charts():
    result = charts_for(["bilm"])
    assert ("forward_loss", "train", "forward (train)") in series(result, "elmo_loss")
    assert ("forward_loss", "train", "forward (train)") in series(result, "elmo_perplexity")


def test_charts_without_series_are_left_out_and_unknown_objectives_are_skipped():
    assert ids(charts_for([])) == ["loss", *COMMON_CHARTS]
    assert charts_for(["unilm"]) == charts_for([])
    assert charts_for(["mlm", "objective-of-an-older-version"]) == charts_for(["mlm"])
    assert charts_for(None) == charts_for([])


def test_the_answer_is_plain_json():
    result = charts_for(["mlm", "rtd"])
    assert json.loads(json.dumps(result)) == result


def test_every_objective_a_family_trains_is_registered():
    from trainer.catalog.validation import with_objectives

    assert {o for f in families.all() for o in with_objectives(f).objectives} == set(objectives.names())


def test_every_series_is_on_a_defined_chart_and_every_chart_is_used():
    used = {m.chart for m in charts.COMMON_METRICS}
    used |= {m.chart for o in objectives.all() for m in o.charts}
    own = {c.id for o in objectives.all() for c in o.chart_specs}  # charts an objective brings itself
    assert set(charts.CHARTS) <= used <= set(charts.CHARTS) | own
    assert len({c.order for c in charts.CHARTS.values()}) == len(charts.CHARTS)


@pytest.mark.parametrize("family", families.names())
def test_the_table_charts_only_keys_the_trainer_records(family):
    spec = families.get(family)
    for objective_set in spec.allowed_objective_sets():
        recorded = ENGINE_KEYS | {key for o in objective_set for key in objectives.get(o).metrics}
        drawn = {s["metric"] for c in charts_for(objective_set) for s in c["series"]}
        shown = {s["metric"] for s in stats_for(objective_set)}
        assert drawn <= recorded, (objective_set, drawn - recorded)
        assert shown <= recorded, (objective_set, shown - recorded)
        for chart in charts_for(objective_set):  # one legend name per series
            labels = [s["label"] for s in chart["series"]]
            assert len(labels) == len(set(labels)), (objective_set, chart["id"], labels)


def test_stats_per_family():
    def stat_ids(objectives):
        return [s["id"] for s in stats_for(objectives)]

    assert stat_ids(["mlm", "nsp"]) == ["loss", "valid_loss", "perplexity", "mlm_acc", "tokens_per_s", "mfu", "fill"]
    assert stat_ids(["span_corruption"]) == ["loss", "valid_loss", "perplexity", "lm_acc", "tokens_per_s", "mfu", "fill"]
    assert stat_ids(["bilm"]) == ["loss", "valid_loss", "perplexity", "forward_perplexity", "backward_perplexity",
                                  "tokens_per_s", "mfu", "fill"]
    mlm_acc = stats_for(["mlm"])[3]
    assert mlm_acc == {"id": "mlm_acc", "label": "MLM accuracy", "metric": "mlm_acc", "splits": ["valid", "train"],
                       "format": "percent", "digits": 1}
    assert stats_for(["clm", "span_corruption"]) == stats_for(["clm"])


@pytest.mark.parametrize("make, message", [
    (lambda: MetricSpec("x", "x", chart="loss", splits=("test",)), "split is 'test'"),
    (lambda: MetricSpec("x", "x", chart="loss", splits=()), "splits is empty"),
    (lambda: MetricSpec("x", "x", chart="loss", transform="log"), "transform is 'log'"),
    (lambda: MetricSpec("x", "x", chart="loss", axis="y3"), "axis is 'y3'"),
    (lambda: ChartSpec("c", "C", order=1, scale="square"), "scale is 'square'"),
    (lambda: ChartSpec("c", "C", order=1, legend="none"), "legend is 'none'"),
    (lambda: StatSpec("s", "S", metric="x", order=1, format="money"), "format is 'money'"),
])
def test_a_wrong_table_entry_says_what_is_wrong(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_series_on_an_undefined_chart_is_refused(monkeypatch):
    monkeypatch.setattr(encoder, "NSP", dataclasses.replace(encoder.NSP, charts=(MetricSpec("nsp_acc", "NSP", chart="nowhere"),)))
    with pytest.raises(ValueError, match="chart 'nowhere', which neither CHARTS nor the objective defines"):
        charts_for(["mlm", "nsp"])


def test_a_new_metric_needs_only_a_table_entry(monkeypatch):
    monkeypatch.setitem(charts.CHARTS, "toy", ChartSpec("toy", "Toy metric", order=85, scale="log"))
    monkeypatch.setattr(encoder, "NSP", dataclasses.replace(encoder.NSP, charts=encoder.NSP.charts + (
        MetricSpec("toy_metric", "toy", chart="toy"),)))
    result = charts_for(["mlm", "nsp"])
    assert ids(result) == ["loss", "mlm_acc", "nsp_acc", "toy", *COMMON_CHARTS]
    assert series(result, "toy") == [("toy_metric", "train", "train"), ("toy_metric", "valid", "validation")]


def test_the_module_imports_neither_django_nor_torch():
    code = "import sys, trainer.charts; print(sorted(m for m in ('django', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_per_token_metrics_are_those_of_per_token_charts_the_run_records():
    """What the compare page flags when the tokenizers differ (issue 21): a language model's loss,
    accuracy and perplexity (also MLM's, shown only as a number), and throughput; not the learning rate."""
    assert objectives.per_token_metrics(["mlm", "nsp"]) == {"loss", "mlm_loss", "mlm_acc", "perplexity", "tokens_per_s"}
    assert {"lm_loss", "lm_acc", "perplexity"} <= objectives.per_token_metrics(["span_corruption"])
    assert not {"lr", "grad_norm", "nsp_acc", "memory_mb"} & objectives.per_token_metrics(["mlm", "nsp"])
