"""Fine-tuning techniques (trainer/finetune/techniques.py): layer-wise lr decay, freezing, gradual
unfreezing, early stopping and class weights, each checked on what it should do to the optimizer,
the gradients, the weights, the run's end and the loss."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.finetune_helpers import ingested_demo
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


@pytest.fixture(scope="module")
def base_checkpoint(trained_run):
    return trained_run[0].last_checkpoint


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("labelled"), {}
    for name in ("classification", "multilabel", "token_classification"):
        out[name] = ingested_demo(name, root)
    return out


def _config(**changes) -> FinetuneConfig:
    settings = dict(checkpoint="x", dataset="y", max_steps=20, batch_size=16, max_length=64, lr=2e-3,
                    eval_every=1000, checkpoint_every=1000, log_every=10, device="cpu")
    return FinetuneConfig(**{**settings, **changes})


def _tune(base, dataset, out_dir, **changes):
    sink = ListSink()
    result = finetune(_config(checkpoint=str(base), dataset=str(dataset), **changes), out_dir=out_dir, sink=sink)
    return result, sink


def _expected_group(name: str, n_groups: int) -> int:
    """Which layer group a parameter belongs to, read off its name."""
    parts = name.split(".")
    if parts[1] in ("embeddings", "embeddings_project"):
        return 0
    if parts[1:3] == ["encoder", "layers"]:
        return int(parts[3]) + 1
    return n_groups - 1


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "norm" in name


# ---------------------------------------------------------------------------- settings
@pytest.mark.parametrize("changes, message", [
    (dict(llrd=0), r"llrd must be above 0 and at most 1, not 0\."),
    (dict(llrd=1.2), r"llrd .* not 1\.2\."),
    (dict(llrd=float("nan")), r"llrd .* not nan\."),
    (dict(llrd="0.9"), r"llrd .* not '0\.9'\."),
    (dict(freeze_embeddings="yes"), r"freeze_embeddings must be true or false, not 'yes'\."),
    (dict(group_by_length=1), r"group_by_length must be true or false, not 1\."),
    (dict(freeze_layers=-1), r"freeze_layers must be between 0 and 1,000, not -1\."),
    (dict(freeze_layers=1.5), r"freeze_layers must be a whole number, not 1\.5\."),
    (dict(freeze_layers=True), r"freeze_layers must be a number, not True\."),
    (dict(gradual_unfreeze_every=-5), r"gradual_unfreeze_every must be between 0 and 10,000,000, not -5\."),
    (dict(early_stopping_patience=1001), r"early_stopping_patience must be between 0 and 1,000, not 1,001\."),
    (dict(class_weights="inverse"), r"class_weights must be one of none, balanced, not 'inverse'\."),
])
def test_bad_settings_are_refused_with_a_sentence(changes, message):
    with pytest.raises(ConfigError, match=message):
        _config(**changes)


def test_good_settings_load_from_yaml_and_default_to_off():
    config = FinetuneConfig.from_yaml("checkpoint: a\ndataset: b\nllrd: 0.9\nfreeze_embeddings: true\n"
                                      "freeze_layers: 2\ngradual_unfreeze_every: 50\nearly_stopping_patience: 3\n"
                                      "class_weights: balanced\n")
    assert (config.llrd, config.freeze_embeddings, config.freeze_layers, config.gradual_unfreeze_every,
            config.early_stopping_patience, config.class_weights) == (0.9, True, 2, 50, 3, "balanced")
    assert FinetuneConfig.from_dict(config.to_dict()) == config
    off = _config()
    assert (off.llrd, off.freeze_embeddings, off.freeze_layers, off.gradual_unfreeze_every,
            off.early_stopping_patience, off.class_weights) == (1.0, False, 0, 0, 0, "none")


# ---------------------------------------------------------------------------- layer-wise lr decay
@pytest.mark.parametrize("family, fields, n_groups", [
    ("bert", {}, 4),
    ("electra", dict(embedding_size=32), 4),  # the E -> H projection is in the embeddings group
    ("distilbert", dict(num_layers=3), 5),
    ("albert", dict(num_layers=3), 3),  # one shared block: one layer group
])
def test_llrd_gives_each_parameter_the_lr_of_its_layer_and_keeps_no_decay(family, fields, n_groups):
    from models_lib.families import presets
    from models_lib.families.downstream import build_downstream

    from trainer.finetune.techniques import prepare

    sizes = dict(vocab_size=100, hidden_size=64, num_heads=2, num_layers=2, max_position_embeddings=40)
    config = presets.get(f"{family}-tiny", **{**sizes, **fields})
    model = build_downstream(config, "sequence_classification", 3)
    settings = _config(llrd=0.5, lr=1e-3, weight_decay=0.01, warmup_ratio=0.0, schedule="linear", max_steps=10)
    tuning = prepare(model, settings)
    optimizer, scheduler = tuning.optimizer, tuning.scheduler
    assert len(model.layer_groups()) == n_groups
    got = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            assert id(p) not in got, "a parameter is in two groups"
            got[id(p)] = (group["lr"], group["weight_decay"])
    names = dict(model.named_parameters())
    assert set(got) == {id(p) for p in names.values()}
    for name, p in names.items():
        depth = n_groups - 1 - _expected_group(name, n_groups)  # 0 for the head
        lr, decay = got[id(p)]
        assert lr == pytest.approx(1e-3 * 0.5 ** depth), name
        assert decay == (0.0 if _no_decay(name) else 0.01), name
    # The head's group comes first (the loop logs the first group's lr), and the schedule scales
    # every group's own lr: the ratios between layers hold at every step.
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    start = [g["lr"] for g in optimizer.param_groups]
    optimizer.step()
    scheduler.step()
    factor = scheduler.get_last_lr()[0] / start[0]
    assert 0 < factor < 1
    assert scheduler.get_last_lr() == pytest.approx([lr * factor for lr in start])


def test_without_llrd_every_group_has_the_same_lr():
    from models_lib.families import presets
    from models_lib.families.downstream import build_downstream

    from trainer.finetune.techniques import prepare

    model = build_downstream(presets.get("bert-tiny", vocab_size=100, hidden_size=64, num_heads=2),
                             "token_classification", 5)
    tuning = prepare(model, _config(lr=3e-4))
    assert {g["initial_lr"] for g in tuning.optimizer.param_groups} == {3e-4}  # the peak, before warm-up
    assert sum(len(g["params"]) for g in tuning.optimizer.param_groups) == len(list(model.parameters()))


# ---------------------------------------------------------------------------- freezing
def test_freezing_keeps_parameters_out_of_the_optimizer(base_checkpoint):
    from models_lib.checkpoint import load_model
    from models_lib.families.downstream import from_pretraining

    from trainer.finetune.techniques import prepare

    model = from_pretraining(load_model(base_checkpoint), "sequence_classification", 3)
    groups = model.layer_groups()
    tuning = prepare(model, _config(freeze_embeddings=True, freeze_layers=1))
    in_optimizer = {id(p) for g in tuning.optimizer.param_groups for p in g["params"]}
    for i, group in enumerate(groups):
        for p in group:
            assert p.requires_grad == (i >= 2) and (id(p) in in_optimizer) == (i >= 2)
    with pytest.raises(ConfigError, match=r"freeze_layers is 3, but the checkpoint's encoder has 2 separately "
                                          r"trained layers; freeze at most 2\."):
        prepare(from_pretraining(load_model(base_checkpoint), "sequence_classification", 3), _config(freeze_layers=3))


def test_frozen_parameters_are_exactly_unchanged_after_training(base_checkpoint, datasets, tmp_path):
    from models_lib.checkpoint import load_model

    from trainer.training.checkpoints import read_optimizer_state

    result, sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", freeze_embeddings=True,
                         freeze_layers=1, max_steps=20, lr=5e-3)
    assert result.status == "succeeded"
    assert "Frozen (they stay as pre-trained): the embeddings, layer 0." in sink.lines
    before = load_model(base_checkpoint).layer_groups()
    after = load_model(result.last_checkpoint).layer_groups()
    for i in (0, 1):
        assert all(torch.equal(a, b) for a, b in zip(before[i], after[i])), f"group {i} changed"
    assert not all(torch.equal(a, b) for a, b in zip(before[2], after[2])), "layer 1 did not train"
    saved = read_optimizer_state(result.last_checkpoint)["optimizer"]
    assert sum(len(g["params"]) for g in saved["param_groups"]) == sum(len(g) for g in after[2:])


# ---------------------------------------------------------------------------- gradual unfreezing
def _record_gradients(monkeypatch):
    """[(set of layer groups with a gradient, set without one)] per update, as the loop clips them."""
    import trainer.training.engine as engine

    real, seen = engine.clip_gradients, []

    def spy(model, max_norm):
        groups = model.layer_groups()
        with_grad = {i for i, g in enumerate(groups) if all(p.grad is not None for p in g)}
        without = {i for i, g in enumerate(groups) if all(p.grad is None for p in g)}
        seen.append((with_grad, without))
        return real(model, max_norm)

    monkeypatch.setattr(engine, "clip_gradients", spy)
    return seen


@pytest.mark.parametrize("freeze_embeddings, last", [(False, {0, 1, 2, 3}), (True, {1, 2, 3})])
def test_gradual_unfreezing_gives_gradients_to_one_more_group_from_the_top_every_n_steps(
        base_checkpoint, datasets, tmp_path, monkeypatch, freeze_embeddings, last):
    from models_lib.checkpoint import load_model

    from trainer.training.checkpoints import read_optimizer_state

    seen = _record_gradients(monkeypatch)
    result, sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", max_steps=12,
                         gradual_unfreeze_every=3, freeze_embeddings=freeze_embeddings)
    assert result.status == "succeeded" and len(seen) == 12
    expected = [{3}] * 3 + [{2, 3}] * 3 + [{1, 2, 3}] * 3 + [last] * 3  # groups: embeddings, layer 0, 1, head
    for step, ((with_grad, without), wanted) in enumerate(zip(seen, expected)):
        assert with_grad == wanted and without == {0, 1, 2, 3} - wanted, f"update {step + 1}"
    assert "Step 4: unfreezing layer 1 (2 of 4 layer groups train now)." in sink.lines or freeze_embeddings
    assert any(line.startswith("Step 7: unfreezing layer 0") for line in sink.lines)
    total, start = (3, 7) if freeze_embeddings else (4, 10)
    assert (f"Gradual unfreezing: the head trains alone at first; one more layer group joins every 3 steps "
            f"(all {total} from step {start}).") in sink.lines
    assert any(line.startswith("Step 10: unfreezing the embeddings") for line in sink.lines) != freeze_embeddings
    # The optimizer held every group that was to train from the start (one state, one schedule).
    saved = read_optimizer_state(result.last_checkpoint)["optimizer"]
    groups = load_model(result.last_checkpoint).layer_groups()
    assert sum(len(g["params"]) for g in saved["param_groups"]) == sum(len(groups[i]) for i in last)


def test_a_group_still_frozen_is_not_touched_by_weight_decay(base_checkpoint, datasets, tmp_path):
    from models_lib.checkpoint import load_model

    result, _ = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", max_steps=5,
                      gradual_unfreeze_every=10, weight_decay=0.5, lr=1e-2)
    before, after = load_model(base_checkpoint).layer_groups(), load_model(result.last_checkpoint).layer_groups()
    for i in (0, 1, 2):
        assert all(torch.equal(a, b) for a, b in zip(before[i], after[i])), f"group {i} changed"


# ---------------------------------------------------------------------------- early stopping
def _scripted_metric(monkeypatch, key: str, script: list[float]):
    """Validation returns `script`'s values for the primary metric, one per evaluation; later
    calls (the test split) get the real numbers."""
    from trainer.finetune.metrics import METRICS

    real = METRICS["classification"]
    calls = []

    def compute(predictions, references):
        values = real.compute(predictions, references)
        if len(calls) < len(script):
            values[key] = script[len(calls)]
        calls.append(values)
        return values

    monkeypatch.setitem(METRICS, "classification", dataclasses.replace(real, compute=compute))
    return calls


def _test_loss(folder, dataset) -> float:
    from models_lib.checkpoint import load_model

    from trainer.finetune.tasks import CLASSIFICATION
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    model = load_model(folder).eval()
    collate = CLASSIFICATION.build_collator(load_tokenizer(folder), read_meta(dataset)["labels"], 64)
    batch = collate(list(iter_examples(dataset, "test")))
    with torch.no_grad():
        return float(model(batch.input_ids, batch.attention_mask, batch.token_type_ids, labels=batch.labels).loss)


def test_early_stopping_ends_at_the_right_evaluation_and_scores_the_test_split_with_the_best_weights(
        base_checkpoint, datasets, tmp_path, monkeypatch):
    calls = _scripted_metric(monkeypatch, "accuracy", [0.3, 0.6, 0.5, 0.6, 0.55, 0.9, 0.9])
    out = tmp_path / "run"
    result, sink = _tune(base_checkpoint, datasets["classification"], out, max_steps=100, eval_every=10,
                         early_stopping_patience=3, lr=5e-3)
    # Best at step 20; 30, 40 (equal is not better) and 50 do not beat it: three in a row.
    assert result.status == "succeeded" and result.final_step == 50
    assert [step for step, split, _ in sink.events if split == "valid"] == [10, 20, 30, 40, 50]
    assert ("Early stopping at step 50: validation accuracy has not improved on 0.6000 (step 20) for 3 evaluations "
            "in a row (early_stopping_patience 3).") in sink.lines
    assert any(line.startswith("Finished at step 50") for line in sink.lines)
    best = json.loads((out / "best.json").read_text())
    assert best == {"step": 20, "metric": "accuracy", "value": 0.6, "higher_is_better": True,
                    "checkpoint": "step-00000020"}
    assert "New best validation accuracy 0.6000 at step 20; kept as step-00000020 (best.json)." in sink.lines
    best_folder = out / "checkpoints" / "step-00000020"
    assert best_folder.is_dir() and result.last_checkpoint == out / "checkpoints" / "step-00000050"
    # The test split is scored with the weights of step 20, not with the last ones.
    assert len(calls) == 6  # five validations, then the test split
    (_, _, test), = [e for e in sink.events if e[1] == "test"]
    assert test == json.loads((out / "test_metrics.json").read_text())
    assert test["loss"] == pytest.approx(_test_loss(best_folder, datasets["classification"]), rel=1e-5)
    # ... and the last weights score the test split differently at that same tolerance (the tiny model is near
    # uniform, so the two losses can be within 0.05% of each other: CI saw 1.63815 against 1.63749)
    assert test["loss"] != pytest.approx(_test_loss(result.last_checkpoint, datasets["classification"]), rel=1e-5)
    assert "Scoring the test split with the best checkpoint, step-00000020 (accuracy 0.6000 at step 20)." in sink.lines


def test_without_early_stopping_the_run_goes_on_and_tests_the_last_weights(base_checkpoint, datasets, tmp_path,
                                                                           monkeypatch):
    _scripted_metric(monkeypatch, "accuracy", [0.9, 0.1, 0.1, 0.1])
    result, sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", max_steps=40,
                         eval_every=10)
    assert result.final_step == 40 and not (tmp_path / "run" / "best.json").exists()
    (_, _, test), = [e for e in sink.events if e[1] == "test"]
    assert test["loss"] == pytest.approx(_test_loss(result.last_checkpoint, datasets["classification"]), rel=1e-5)


def test_early_stopping_follows_the_metrics_direction():
    from trainer.finetune.metrics import METRICS
    from trainer.finetune.techniques import EarlyStopping

    lower = EarlyStopping(METRICS["sft"], patience=2)  # perplexity: lower is better
    assert [lower.update(s, {"perplexity": v}) for s, v in enumerate([9.0, 7.0, 8.0, float("nan")])] == \
        [True, True, False, False]
    assert lower.best == 7.0 and lower.best_step == 1 and lower.exhausted
    higher = EarlyStopping(METRICS["classification"], patience=2)
    assert [higher.update(s, {"accuracy": v}) for s, v in enumerate([0.5, 0.4, 0.7])] == [True, False, True]
    assert not higher.exhausted and higher.update(3, {}) is False  # a missing value is no improvement


# ---------------------------------------------------------------------------- class weights
def _train_counts(dataset, labels, tags: bool) -> list[int]:
    from trainer.prep.labelled import iter_examples

    counts = Counter()
    for ex in iter_examples(dataset, "train"):
        counts.update(ex["tags"] if tags else [ex["label"]])
    return [counts[label] for label in labels]


@pytest.mark.parametrize("name", ["classification", "token_classification"])
def test_balanced_class_weights_follow_the_formula_and_reach_the_loss(base_checkpoint, datasets, name):
    from models_lib.checkpoint import load_model
    from models_lib.families.downstream import from_pretraining

    from trainer import finetune as tasks
    from trainer.finetune.techniques import class_weights_for
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    task, meta = tasks.get(name), read_meta(datasets[name])
    labels = meta["labels"]
    counts = _train_counts(datasets[name], labels, tags=name == "token_classification")
    weights = class_weights_for(_config(class_weights="balanced"), task, meta, labels)
    assert weights == pytest.approx([sum(counts) / (len(labels) * c) for c in counts])
    assert len(set(round(w, 6) for w in weights)) > 1, "the demo's classes are balanced: nothing is checked"
    assert class_weights_for(_config(), task, meta, labels) is None

    model = from_pretraining(load_model(base_checkpoint), task.head, len(labels), labels=labels,
                             problem_type=task.problem).eval()
    torch.manual_seed(0)
    for p in model.layer_groups()[-1]:  # a fresh head's logits are all alike: make the classes differ
        torch.nn.init.normal_(p.data, std=0.5)
    step = task.step(_config(), model, "cpu", task=task, labels=labels)
    step.class_weights = torch.tensor(weights)
    batch = task.build_collator(load_tokenizer(base_checkpoint), labels, 64)(
        list(iter_examples(datasets[name], "train"))[::9][:40])  # spread out: several classes
    with torch.no_grad():
        loss = step(batch, train=False).loss
        logits = model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits
    flat, targets = logits.reshape(-1, len(labels)), batch.labels.reshape(-1)
    assert len(set(targets.tolist()) - {-100}) > 2
    assert loss == pytest.approx(float(F.cross_entropy(flat, targets, weight=torch.tensor(weights))), rel=1e-5)
    assert loss != pytest.approx(float(F.cross_entropy(flat, targets)), rel=1e-3)


def test_the_engine_passes_the_weights_to_the_loss(base_checkpoint, datasets, tmp_path, monkeypatch):
    from trainer.finetune.techniques import balanced_class_weights
    from trainer.prep.labelled import read_meta

    real, used = F.cross_entropy, []

    def spy(*args, **kwargs):
        used.append(kwargs.get("weight"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", spy)
    result, sink = _tune(base_checkpoint, datasets["classification"], tmp_path / "run", max_steps=2,
                         class_weights="balanced")
    labels = read_meta(datasets["classification"])["labels"]
    expected = balanced_class_weights(_train_counts(datasets["classification"], labels, tags=False))
    assert used and all(w is not None and w.tolist() == pytest.approx(expected) for w in used)
    assert "Class weights: balanced." in sink.lines


@pytest.mark.parametrize("counts, weights", [([10, 30, 60], [100 / 30, 100 / 90, 100 / 180]),
                                             ([5, 5], [1.0, 1.0]), ([4, 0, 4], [8 / 12, 1.0, 8 / 12])])
def test_balanced_weights_formula(counts, weights):
    from trainer.finetune.techniques import balanced_class_weights

    assert balanced_class_weights(counts) == pytest.approx(weights)


def test_class_weights_are_refused_where_there_are_no_classes_to_balance(base_checkpoint, datasets, tmp_path):
    with pytest.raises(ConfigError, match=r"class_weights: balanced weighs the classes of classification and token "
                                          r"classification; a multilabel run cannot use it"):
        _tune(base_checkpoint, datasets["multilabel"], tmp_path / "run", class_weights="balanced")
