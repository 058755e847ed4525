"""Fine-tuning heads against transformers, both ways, on tiny random weights.

For every (family, task) pair transformers has (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT x
sequence classification, token classification, extractive QA): their folder read with
hf.from_pretrained(task="auto") gives their logits and loss; our model written with
hf.to_pretrained loads into their class with no missing or unexpected keys and gives ours.
Batches are padded, and pairs (token_type_ids) where the family has segments.
"""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402
from models_lib.families import presets  # noqa: E402
from models_lib.families.bert import BertForPreTraining  # noqa: E402
from models_lib.families.downstream import (  # noqa: E402
    EncoderForQuestionAnswering, EncoderForSequenceClassification, EncoderForTokenClassification, build_downstream,
)
from tests.models_lib.helpers import padded_batch, randomise  # noqa: E402

TOL = dict(atol=1e-4, rtol=1e-4)
V = 97
SIZE = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=40)
HF_CONFIGS = {
    "bert": lambda **kw: transformers.BertConfig(**SIZE, **kw),
    "roberta": lambda **kw: transformers.RobertaConfig(**SIZE, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5,
                                                       **kw),
    "albert": lambda **kw: transformers.AlbertConfig(**SIZE, embedding_size=32, **kw),
    "electra": lambda **kw: transformers.ElectraConfig(**SIZE, embedding_size=32, **kw),
    "distilbert": lambda **kw: transformers.DistilBertConfig(vocab_size=V, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                             max_position_embeddings=40, **kw),
}
PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "electra": "Electra", "distilbert": "DistilBert"}
PAD = {"roberta": 1}
SEGMENTS = ("bert", "albert", "electra")  # families with a second token type: pair inputs

# task id -> (transformers class suffix, our class, problem_type, num_labels)
TASKS = {
    "single": ("ForSequenceClassification", EncoderForSequenceClassification, "single_label_classification", 3),
    "multi": ("ForSequenceClassification", EncoderForSequenceClassification, "multi_label_classification", 4),
    "regression": ("ForSequenceClassification", EncoderForSequenceClassification, "regression", 1),
    "token": ("ForTokenClassification", EncoderForTokenClassification, None, 5),
    "qa": ("ForQuestionAnswering", EncoderForQuestionAnswering, None, 2),
}
PAIRS = [(family, task) for family in PREFIX for task in TASKS]


def batch_for(family: str, task: str):
    """(input_ids, attention_mask, token_type_ids or None, labels as keyword arguments)."""
    ids, mask, types = padded_batch(V, pad_id=PAD.get(family, 0), segments=family in SEGMENTS)
    B, T = ids.shape
    g = torch.Generator().manual_seed(7)
    num_labels = TASKS[task][3]
    if task == "single":
        labels = {"labels": torch.tensor([0, 2, 1])}
    elif task == "multi":
        labels = {"labels": torch.randint(0, 2, (B, num_labels), generator=g).float()}
    elif task == "regression":
        labels = {"labels": torch.randn(B, generator=g)}
    elif task == "token":
        tags = torch.randint(0, num_labels, (B, T), generator=g)
        tags[mask == 0] = -100
        tags[:, 0] = -100  # [CLS]
        labels = {"labels": tags}
    else:  # the third answer lies past the input: clamped to T and ignored
        labels = {"start_positions": torch.tensor([1, 3, 40]), "end_positions": torch.tensor([2, 6, 4])}
    return ids, mask, types, labels


def their_outputs(model, ids, mask, types, labels) -> dict[str, torch.Tensor]:
    kwargs = dict(input_ids=ids, attention_mask=mask, **labels)
    if types is not None:
        kwargs["token_type_ids"] = types
    with torch.no_grad():
        out = model(**kwargs)
    names = ("start_logits", "end_logits") if hasattr(out, "start_logits") else ("logits",)
    return {"loss": out.loss, **{n: getattr(out, n) for n in names}}


def our_outputs(model, ids, mask, types, labels) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(ids, mask, types, **labels)
    names = ("start_logits", "end_logits") if hasattr(out, "start_logits") else ("logits",)
    return {"loss": out.loss, **{n: getattr(out, n) for n in names}}


def assert_same(ours: dict, theirs: dict, mask: torch.Tensor) -> None:
    assert ours.keys() == theirs.keys()
    for name in ours:
        a, b = ours[name], theirs[name]
        if name == "logits" and a.dim() == 3:  # token logits: the padding's are garbage in both
            a, b = a[mask.bool()], b[mask.bool()]
        torch.testing.assert_close(a, b, **TOL)


def head_dropouts(model: nn.Module, skip: str) -> set[float]:
    """The rates of the dropout modules outside the backbone (named `skip`)."""
    return {m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout) and not name.startswith(skip)}


# --- their folders into our models --------------------------------------------------------

@pytest.mark.parametrize("family, task", PAIRS, ids=[f"{f}-{t}" for f, t in PAIRS])
def test_their_task_folder_reads_into_our_model_with_equal_logits_and_loss(family, task, tmp_path):
    suffix, our_class, problem_type, num_labels = TASKS[task]
    fields = {} if task == "qa" else {"num_labels": num_labels}
    if problem_type:
        fields["problem_type"] = problem_type
    torch.manual_seed(0)
    theirs = randomise(getattr(transformers, PREFIX[family] + suffix)(HF_CONFIGS[family](**fields)), seed=len(task))
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path, task="auto")
    assert type(ours) is our_class and ours.config.family == family
    assert ours.missing_keys == [] and ours.unexpected_keys == []
    assert ours.num_labels == num_labels and ours.task_config.problem_type == problem_type
    batch = batch_for(family, task)
    assert_same(our_outputs(ours, *batch), their_outputs(theirs, *batch), batch[1])
    ours_p, theirs_p = head_dropouts(ours, ours.backbone_name), head_dropouts(theirs, theirs.base_model_prefix)
    assert ours_p == theirs_p or (not theirs_p and ours_p == {0.0})  # their QA heads have no dropout


# --- our models into their classes --------------------------------------------------------

def tiny(family: str, **fields):
    extra = {"embedding_size": 32} if family in ("albert", "electra") else {}
    sizes = dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=40)
    return presets.get(f"{family}-tiny", **{**sizes, **extra, **fields})


@pytest.mark.parametrize("family, task", PAIRS, ids=[f"{f}-{t}" for f, t in PAIRS])
def test_our_model_exports_to_their_task_class_with_equal_logits_and_loss(family, task, tmp_path):
    suffix, _, problem_type, num_labels = TASKS[task]
    torch.manual_seed(0)
    kind = {"single": "sequence_classification", "multi": "sequence_classification",
            "regression": "sequence_classification", "token": "token_classification",
            "qa": "question_answering"}[task]
    ours = randomise(build_downstream(tiny(family), kind, num_labels, problem_type=problem_type), seed=3)
    hf.to_pretrained(ours, tmp_path)
    theirs, info = getattr(transformers, PREFIX[family] + suffix).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert theirs.config.num_labels == num_labels and theirs.config.problem_type == problem_type
    batch = batch_for(family, task)
    assert_same(our_outputs(ours, *batch), their_outputs(theirs.eval(), *batch), batch[1])
    ours_p, theirs_p = head_dropouts(ours, ours.backbone_name), head_dropouts(theirs, theirs.base_model_prefix)
    assert ours_p == theirs_p or (not theirs_p and ours_p == {0.0})


@pytest.mark.parametrize("family, task", PAIRS, ids=[f"{f}-{t}" for f, t in PAIRS])
def test_default_head_dropout_is_their_default(family, task):
    """Built from scratch (no config.json to read a rate from), our head drops out at the rate
    their freshly configured head does: ALBERT 0.1, DistilBERT 0.2 / 0.1, else hidden_dropout."""
    suffix, _, problem_type, num_labels = TASKS[task]
    kind = {"token": "token_classification", "qa": "question_answering"}.get(task, "sequence_classification")
    their_config = HF_CONFIGS[family](hidden_dropout_prob=0.05) if family != "distilbert" else HF_CONFIGS[family](
        dropout=0.05)
    theirs = getattr(transformers, PREFIX[family] + suffix)(their_config)
    ours = build_downstream(hf.config_from_hf(their_config.to_dict()), kind, num_labels, problem_type=problem_type)
    ours_p, theirs_p = head_dropouts(ours, ours.backbone_name), head_dropouts(theirs, theirs.base_model_prefix)
    assert ours_p == theirs_p or (not theirs_p and ours_p == {0.0})


TRAIN_PAIRS = [(family, task) for family in PREFIX for task in ("single", "token", "qa")]


@pytest.mark.parametrize("family, task", TRAIN_PAIRS, ids=[f"{f}-{t}" for f, t in TRAIN_PAIRS])
def test_head_dropout_sits_where_theirs_does(family, task, tmp_path, caplog):
    """In training mode, with the encoder's dropout off and the head's at 0.5, the same seed
    drops the same units in both libraries only if the dropouts come in the same places.
    Where their head takes no dropout setting (QA outside DistilBERT, DistilBERT's token
    classifier, which uses the encoder's), ours is the default and the export says so."""
    suffix, _, problem_type, num_labels = TASKS[task]
    kind = {"single": "sequence_classification", "token": "token_classification", "qa": "question_answering"}[task]
    config = tiny(family, hidden_dropout=0.0, attention_dropout=0.0)
    fixed = task == "qa" and family != "distilbert" or (task == "token" and family == "distilbert")
    ours = randomise(build_downstream(config, kind, num_labels, classifier_dropout=0.5), seed=9)
    hf.to_pretrained(ours, tmp_path / "dropout")
    assert ("has no setting for its head's dropout" in caplog.text) == fixed
    if fixed:
        ours = randomise(build_downstream(config, kind, num_labels), seed=9)
    hf.to_pretrained(ours, tmp_path / "model")
    theirs = getattr(transformers, PREFIX[family] + suffix).from_pretrained(tmp_path / "model").train()
    ours.train()
    ids, mask, types, _ = batch_for(family, task)
    torch.manual_seed(5)
    expected = their_outputs(theirs, ids, mask, types, {})
    torch.manual_seed(5)
    assert_same(our_outputs(ours, ids, mask, types, {}), expected, mask)


@pytest.mark.parametrize("family", ["spanbert", "unilm"])
@pytest.mark.parametrize("task", ["single", "token", "qa"])
def test_spanbert_and_unilm_export_as_bert_task_models(family, task, tmp_path):
    suffix, _, problem_type, num_labels = TASKS[task]
    kind = {"single": "sequence_classification", "token": "token_classification", "qa": "question_answering"}[task]
    ours = randomise(build_downstream(tiny(family), kind, num_labels), seed=4)
    hf.to_pretrained(ours, tmp_path)
    theirs, info = getattr(transformers, "Bert" + suffix).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    batch = batch_for("bert", task)
    assert_same(our_outputs(ours, *batch), their_outputs(theirs.eval(), *batch), batch[1])


@pytest.mark.parametrize("family, field", [("bert", "classifier_dropout"), ("roberta", "classifier_dropout"),
                                           ("albert", "classifier_dropout_prob"), ("electra", "classifier_dropout"),
                                           ("distilbert", "seq_classif_dropout")])
def test_labels_problem_type_and_head_dropout_travel_in_config_json(family, field, tmp_path):
    ours = build_downstream(tiny(family), "sequence_classification", labels=["neg", "neu", "pos"],
                            problem_type="multi_label_classification", classifier_dropout=0.3)
    hf.to_pretrained(ours, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["id2label"] == {"0": "neg", "1": "neu", "2": "pos"}
    assert written["label2id"] == {"neg": 0, "neu": 1, "pos": 2}
    assert written["problem_type"] == "multi_label_classification" and written[field] == 0.3
    theirs = getattr(transformers, PREFIX[family] + "ForSequenceClassification").from_pretrained(tmp_path)
    assert theirs.config.id2label == {0: "neg", 1: "neu", 2: "pos"} and head_dropouts(theirs, family) == {0.3}
    back = hf.from_pretrained(tmp_path, task="sequence_classification")
    assert back.task_config == ours.task_config


def test_default_label_names_read_back_as_unnamed(tmp_path):
    theirs = transformers.BertForTokenClassification(HF_CONFIGS["bert"](num_labels=4))
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path, task="auto")
    assert ours.task_config.labels is None and ours.task_config.id2label[3] == "LABEL_3"


# --- what from_pretrained(task=...) refuses, and what it leaves as it was -------------------

def test_task_argument_is_checked_against_the_folder(tmp_path):
    transformers.BertForQuestionAnswering(HF_CONFIGS["bert"]()).save_pretrained(tmp_path / "qa")
    transformers.BertForMaskedLM(HF_CONFIGS["bert"]()).save_pretrained(tmp_path / "mlm")
    assert isinstance(hf.from_pretrained(tmp_path / "qa", task="question_answering"), EncoderForQuestionAnswering)
    with pytest.raises(ValueError, match="not a token_classification model"):
        hf.from_pretrained(tmp_path / "qa", task="token_classification")
    with pytest.raises(ValueError, match="not a task model"):
        hf.from_pretrained(tmp_path / "mlm", task="auto")
    with pytest.raises(ValueError, match="Unknown task"):
        hf.from_pretrained(tmp_path / "qa", task="summarisation")


def test_without_task_a_task_folder_reads_into_the_pretraining_model_as_before(tmp_path):
    transformers.BertForSequenceClassification(HF_CONFIGS["bert"](num_labels=3)).save_pretrained(tmp_path)
    model = hf.from_pretrained(tmp_path)
    assert type(model) is BertForPreTraining
    assert model.unexpected_keys == ["classifier.bias", "classifier.weight"]


def test_a_task_folder_missing_its_head_is_refused(tmp_path):
    import safetensors.torch

    transformers.RobertaForSequenceClassification(HF_CONFIGS["roberta"](num_labels=3)).save_pretrained(tmp_path)
    state = safetensors.torch.load_file(str(tmp_path / "model.safetensors"))
    del state["classifier.out_proj.weight"]
    safetensors.torch.save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="head.out_proj.weight"):
        hf.from_pretrained(tmp_path, task="auto")
