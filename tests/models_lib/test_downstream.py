"""Fine-tuning models without transformers: building, losses, native checkpoints, encoders
taken from pre-training models, and the layer groups fine-tuning techniques use."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from models_lib.checkpoint import load_model, read_model_config, save_model
from models_lib.core.encoder import TransformerEncoder
from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertForPreTraining
from models_lib.families.distilbert import DistilBertForPreTraining
from models_lib.families.downstream import (
    EncoderForSequenceClassification, EncoderForTokenClassification, TaskConfig,
    build_downstream, from_pretraining,
)
from models_lib.families.electra import ElectraForPreTraining
from models_lib.families.roberta import RobertaForPreTraining
from models_lib.families.spanbert import SpanBertForPreTraining
from models_lib.families.unilm import UniLMForPreTraining
from tests.models_lib.helpers import padded_batch, randomise

V = 61
FAMILIES = ("bert", "roberta", "albert", "electra", "distilbert", "spanbert", "unilm")
TASKS = ("sequence_classification", "token_classification", "question_answering")
PRETRAINING = {"bert": BertForPreTraining, "roberta": RobertaForPreTraining, "albert": AlbertForPreTraining,
               "electra": ElectraForPreTraining, "distilbert": DistilBertForPreTraining,
               "spanbert": SpanBertForPreTraining, "unilm": UniLMForPreTraining}
POOLED = ("bert", "albert", "spanbert", "unilm")  # their sequence classifier reads BERT's pooler


def tiny(family: str, **fields):
    sizes = dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=40)
    return presets.get(f"{family}-tiny", **{**sizes, **fields})


def batch(config, B: int = 3, T: int = 12):
    ids, mask, types = padded_batch(V, pad_id=config.pad_token_id, B=B, T=T, segments=config.type_vocab_size > 1)
    return ids, mask, types


# --- building ------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    (dict(task="ner"), "Unknown task"),
    (dict(task="question_answering", num_labels=3), "num_labels is 2"),
    (dict(task="sequence_classification", num_labels=3, labels=["a", "b"]), "name each of the 3"),
    (dict(task="sequence_classification", num_labels=2, labels=["a", "a"]), "name each of the 2"),
    (dict(task="sequence_classification", num_labels=1, problem_type="single_label_classification"), "at least 2"),
    (dict(task="sequence_classification", problem_type="ordinal"), "Unknown problem_type"),
    (dict(task="token_classification", problem_type="regression"), "for sequence classification"),
    (dict(task="token_classification", num_labels=0), "num_labels must be a positive"),
    (dict(task="sequence_classification", classifier_dropout=1.0), "classifier_dropout"),
    (dict(task="sequence_classification", problem_type="multi_label_classification", threshold=1.0), "threshold"),
])
def test_task_config_refuses_what_cannot_be_trained(fields, message):
    with pytest.raises(ValueError, match=message):
        TaskConfig(**fields)


def test_problem_type_defaults_as_transformers_infers_it():
    assert TaskConfig("sequence_classification", 1).problem_type == "regression"
    assert TaskConfig("sequence_classification", 5).problem_type == "single_label_classification"
    assert TaskConfig("token_classification", 5).problem_type is None


def test_build_downstream_counts_labels_and_refuses_other_families():
    model = build_downstream(tiny("bert"), "sequence_classification", labels=["neg", "neu", "pos"])
    assert model.num_labels == 3 and model.task_config.label2id == {"neg": 0, "neu": 1, "pos": 2}
    with pytest.raises(ValueError, match="encoder families"):
        build_downstream(presets.get("gpt-tiny", vocab_size=V), "sequence_classification")
    with pytest.raises(ValueError, match="Unknown task"):
        build_downstream(tiny("bert"), "translation")
    with pytest.raises(ValueError, match="needs a TaskConfig for 'token_classification'"):
        EncoderForTokenClassification(tiny("bert"), TaskConfig("sequence_classification"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task", TASKS)
def test_every_family_and_task_builds_runs_and_trains(family, task):
    config = tiny(family)
    torch.manual_seed(0)
    model = build_downstream(config, task, 2 if task == "question_answering" else 3)
    assert model.backbone_name == ("bert" if family in ("spanbert", "unilm") else family)
    assert (model.backbone.pooler is not None) == (task == "sequence_classification" and family in POOLED)
    ids, mask, types = batch(config)
    B, T = ids.shape
    if task == "sequence_classification":
        labels = {"labels": torch.tensor([0, 2, 1])}
    elif task == "token_classification":
        labels = {"labels": torch.where(mask.bool(), torch.randint(0, 3, (B, T)), -100)}
    else:
        labels = {"start_positions": torch.tensor([1, 2, 3]), "end_positions": torch.tensor([2, 4, 3])}
    out = model(ids, mask, types, **labels, output_hidden_states=True)
    logits = out.start_logits if task == "question_answering" else out.logits
    assert logits.shape == {"sequence_classification": (B, 3), "token_classification": (B, T, 3),
                            "question_answering": (B, T)}[task]
    assert len(out.hidden_states) == config.num_layers + 1
    out.loss.backward()
    assert all(p.grad is not None for p in model.head.parameters())
    assert model.backbone.embeddings.word.weight.grad is not None
    assert model(ids, mask, types).loss is None


def test_qa_needs_both_positions():
    model = build_downstream(tiny("bert"), "question_answering")
    with pytest.raises(ValueError, match="both start_positions and end_positions"):
        model(torch.randint(3, V, (2, 6)), start_positions=torch.tensor([1, 2]))


# --- losses --------------------------------------------------------------------------------

@pytest.fixture
def classifier():
    torch.manual_seed(0)
    return randomise(build_downstream(tiny("bert"), "sequence_classification", 3), seed=2)


def test_label_smoothing_and_class_weights_shape_the_loss_as_cross_entropy_does(classifier):
    ids, mask, types = batch(classifier.config, B=4)
    labels = torch.tensor([0, 2, 1, 2])
    weights = torch.tensor([0.2, 1.0, 3.0])
    plain = classifier(ids, mask, types, labels)
    logits = plain.logits
    torch.testing.assert_close(plain.loss, F.cross_entropy(logits, labels))
    smoothed = classifier(ids, mask, types, labels, label_smoothing=0.1).loss
    weighted = classifier(ids, mask, types, labels, class_weights=weights).loss
    both = classifier(ids, mask, types, labels, label_smoothing=0.1, class_weights=weights).loss
    torch.testing.assert_close(smoothed, F.cross_entropy(logits, labels, label_smoothing=0.1))
    torch.testing.assert_close(weighted, F.cross_entropy(logits, labels, weight=weights))
    torch.testing.assert_close(both, F.cross_entropy(logits, labels, weight=weights, label_smoothing=0.1))
    # and by hand: smoothing mixes in the mean log-probability; weights make a weighted mean
    logp = logits.log_softmax(-1)
    nll = -logp[torch.arange(4), labels]
    torch.testing.assert_close(smoothed, (0.9 * nll - 0.1 * logp.mean(-1)).mean())
    torch.testing.assert_close(weighted, (weights[labels] * nll).sum() / weights[labels].sum())
    assert len({round(x.item(), 5) for x in (plain.loss, smoothed, weighted, both)}) == 4
    with pytest.raises(ValueError, match="one weight per label"):
        classifier(ids, mask, types, labels, class_weights=torch.ones(2))
    with pytest.raises(ValueError, match="class indices"):
        classifier(ids, mask, types, labels.float())


def test_token_loss_skips_minus_100_with_weights_and_smoothing():
    torch.manual_seed(0)
    model = randomise(build_downstream(tiny("roberta"), "token_classification", 4), seed=3)
    ids, mask, _ = batch(model.config)
    labels = torch.randint(0, 4, ids.shape)
    labels[mask == 0] = -100
    labels[:, 0] = -100
    weights = torch.tensor([1.0, 2.0, 0.5, 1.5])
    out = model(ids, mask, labels=labels, label_smoothing=0.2, class_weights=weights)
    keep = labels != -100
    expected = F.cross_entropy(out.logits[keep], labels[keep], weight=weights, label_smoothing=0.2)
    torch.testing.assert_close(out.loss, expected)
    assert not torch.allclose(out.loss, model(ids, mask, labels=labels).loss)


def test_multi_label_uses_one_sigmoid_per_label_and_one_threshold():
    torch.manual_seed(0)
    model = randomise(build_downstream(tiny("electra"), "sequence_classification", 4,
                                       problem_type="multi_label_classification", threshold=0.6), seed=4)
    ids, mask, types = batch(model.config)
    labels = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 0]]).float()
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = model(ids, mask, types, labels)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, labels))
    weighted = model(ids, mask, types, labels, class_weights=weights).loss
    torch.testing.assert_close(weighted, F.binary_cross_entropy_with_logits(out.logits, labels, weight=weights))
    assert torch.equal(model.predict(out.logits), (out.logits.sigmoid() > 0.6).long())
    with pytest.raises(ValueError, match="label_smoothing"):
        model(ids, mask, types, labels, label_smoothing=0.1)
    with pytest.raises(ValueError, match="one 0/1 value per label"):
        model(ids, mask, types, labels[:, :2])


def test_regression_is_mean_squared_error_and_refuses_class_options():
    model = build_downstream(tiny("distilbert"), "sequence_classification", 1)
    ids, mask, _ = batch(model.config)
    target = torch.tensor([0.5, -1.0, 2.0])
    out = model(ids, mask, labels=target)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), target))
    assert model.predict(out.logits).shape == (3,)
    with pytest.raises(ValueError, match="label_smoothing"):
        model(ids, mask, labels=target, label_smoothing=0.1)
    with pytest.raises(ValueError, match="no classes"):
        model(ids, mask, labels=target, class_weights=torch.ones(1))


def test_qa_loss_is_the_mean_of_start_and_end_with_positions_clamped():
    torch.manual_seed(0)
    model = randomise(build_downstream(tiny("albert"), "question_answering"), seed=5)
    ids, mask, types = batch(model.config)
    T = ids.shape[1]
    start, end = torch.tensor([2, 50, -3]), torch.tensor([4, 5, 1])  # 50 -> T: ignored; -3 -> 0
    out = model(ids, mask, types, start, end, label_smoothing=0.1)
    s, e = out.start_logits, out.end_logits
    expected_start = F.cross_entropy(s[[0, 2]], torch.tensor([2, 0]), label_smoothing=0.1)
    expected_end = F.cross_entropy(e, end, label_smoothing=0.1)
    torch.testing.assert_close(out.loss, (expected_start + expected_end) / 2)
    assert s.shape == (3, T)
    assert not torch.allclose(out.loss, model(ids, mask, types, start, end).loss)


# --- native checkpoints ---------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task", TASKS)
def test_native_round_trip_rebuilds_the_task_model(family, task, tmp_path):
    torch.manual_seed(0)
    labels = None if task == "question_answering" else ["B-PER", "I-PER", "O"]
    model = randomise(build_downstream(tiny(family), task, labels=labels, classifier_dropout=0.25), seed=6)
    save_model(model, tmp_path)
    meta = read_model_config(tmp_path)
    assert meta["family"] == family and meta["class"] == type(model).__name__
    assert meta["task"]["task"] == task and meta["task"]["labels"] == labels
    assert meta["task"]["num_labels"] == (2 if labels is None else 3)
    assert meta["config"]["use_pooler"] == (task == "sequence_classification" and family in POOLED)
    again = load_model(tmp_path)
    assert type(again) is type(model) and again.task_config == model.task_config and not again.training
    assert again.state_dict().keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    ids, mask, types = batch(model.config)
    with torch.no_grad():
        a, b = model(ids, mask, types), again(ids, mask, types)
    for name in ("logits",) if task != "question_answering" else ("start_logits", "end_logits"):
        assert torch.equal(getattr(a, name), getattr(b, name))


def test_pretraining_checkpoints_still_save_and_load_without_a_task(tmp_path):
    model = BertForPreTraining(tiny("bert"))
    save_model(model, tmp_path)
    assert "task" not in read_model_config(tmp_path)
    assert type(load_model(tmp_path)) is BertForPreTraining


def test_a_task_class_without_its_task_is_refused(tmp_path):
    save_model(build_downstream(tiny("bert"), "token_classification", 3), tmp_path)
    meta = json.loads((tmp_path / "model_config.json").read_text())
    del meta["task"]
    (tmp_path / "model_config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="records no task"):
        load_model(tmp_path)


# --- from pre-training models ---------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task", TASKS)
def test_from_pretraining_keeps_every_encoder_weight_and_adds_a_fresh_head(family, task):
    torch.manual_seed(0)
    pretrained = randomise(PRETRAINING[family](tiny(family)), seed=7)
    source = pretrained.discriminator.backbone if family == "electra" else pretrained.backbone
    model = from_pretraining(pretrained, task, 2 if task == "question_answering" else 4)
    assert model.config.family == family and not model.training  # randomise() left the source in eval mode
    theirs, ours = source.state_dict(), model.backbone.state_dict()
    reads_pooler = task == "sequence_classification" and family in POOLED
    for key, value in ours.items():
        if key.startswith("pooler.") and "pooler.dense.weight" not in theirs:
            continue  # a fresh pooler where the source has none (SpanBERT, UniLM)
        assert torch.equal(value, theirs[key]), key
    assert ("pooler.dense.weight" in ours) == reads_pooler
    assert {k for k in theirs if not k.startswith("pooler.")} == {k for k in ours if not k.startswith("pooler.")}
    # the head is freshly initialised (BERT's normal(0, 0.02), zero bias), not randomise()'s 0.1 noise
    assert model.head.out_proj.weight.std() < 0.05 and not model.head.out_proj.bias.any()
    # a copy: training the new model leaves the pre-training model as it was
    with torch.no_grad():
        model.backbone.embeddings.word.weight.add_(1.0)
    assert not torch.equal(model.backbone.embeddings.word.weight, source.embeddings.word.weight)


def test_from_pretraining_takes_a_bare_encoder_or_another_task_model():
    backbone = randomise(TransformerEncoder(tiny("bert")), seed=8)
    tagger = from_pretraining(backbone, "token_classification", labels=["O", "B", "I"])
    assert tagger.num_labels == 3 and torch.equal(tagger.backbone.encoder.layers[1].ffn.up.weight,
                                                  backbone.encoder.layers[1].ffn.up.weight)
    classifier = from_pretraining(tagger, "sequence_classification", 2)  # the pooler starts fresh
    assert isinstance(classifier, EncoderForSequenceClassification)
    assert torch.equal(classifier.backbone.embeddings.word.weight, backbone.embeddings.word.weight)
    with pytest.raises(TypeError, match="encoder model of models_lib"):
        from_pretraining(torch.nn.Linear(2, 2), "question_answering")


# --- layer groups ---------------------------------------------------------------------------

def expected_groups(model) -> list[list[str]]:
    """Parameter names per group, bottom up, each name the first module owning the tensor."""
    backbone = model.backbone_name
    names = [n for n, _ in model.named_parameters()]  # each tensor once, under its first name
    bottom = [n for n in names if n.startswith((f"{backbone}.embeddings.", f"{backbone}.embeddings_project."))]
    layers = [[n for n in names if n.startswith(f"{backbone}.encoder.layers.{i}.")]
              for i in range(len(model.backbone.encoder.layers))]
    used = set(bottom).union(*layers)
    return [bottom, *layers, [n for n in names if n not in used]]


@pytest.mark.parametrize("family, task, fields, groups", [
    ("bert", "sequence_classification", {}, 4),
    ("roberta", "token_classification", {}, 4),
    ("electra", "question_answering", dict(embedding_size=32), 4),
    ("distilbert", "sequence_classification", dict(num_layers=3), 5),
    ("spanbert", "sequence_classification", {}, 4),
    ("albert", "sequence_classification", dict(num_layers=4), 3),  # one shared block: one group
    ("albert", "token_classification", dict(num_layers=3, share_layers="attention"), 5),
    ("bert", "question_answering", dict(norm_placement="pre"), 4),
])
def test_layer_groups_cover_every_parameter_once_from_the_bottom_up(family, task, fields, groups):
    model = build_downstream(tiny(family, **fields), task)
    got = model.layer_groups()
    assert len(got) == groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert [[names[id(p)] for p in group] for group in got] == expected_groups(model)
    flat = [id(p) for group in got for p in group]
    assert len(flat) == len(set(flat)) == len(list(model.parameters()))
    assert set(flat) == {id(p) for p in model.parameters()}
    top = {names[id(p)] for p in got[-1]}
    assert {f"head.{n}" for n, _ in model.head.named_parameters()} <= top
    if model.backbone.pooler is not None:
        assert f"{model.backbone_name}.pooler.dense.weight" in top
    if fields.get("norm_placement") == "pre":
        assert f"{model.backbone_name}.encoder.final_norm.weight" in top
    if fields.get("share_layers") == "attention":  # the shared attention belongs to layer 0 only
        assert any(n.startswith("albert.encoder.layers.0.attention.") for n in map(names.get, map(id, got[1])))
        assert not any(".attention.qkv" in names[id(p)] for p in got[2])


def test_pretraining_models_have_layer_groups_too():
    model = BertForPreTraining(tiny("bert"))
    groups = model.layer_groups()
    assert len(groups) == 4 and sum(map(len, groups)) == len(list(model.parameters()))
    # the MLM decoder is the word table: it stays in the embeddings group
    assert any(p is model.word_embeddings for p in groups[0])
