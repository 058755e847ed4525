"""GPT-1's task heads (models_lib/families/gpt_tasks.py, trainer/finetune/gpt1.py): the input
transformations with learned start/delimiter/extract tokens, the head on the extract state (both
orders summed for a similarity pair), the auxiliary LM loss at weight 0.5, and classification on
a GPT checkpoint end to end."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from models_lib.families.downstream import TaskConfig
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.gpt_tasks import GPTForSequenceClassification
from tests.trainer.finetune_helpers import ingested_demo
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink

V = 50


def tiny_lm(seed: int = 0) -> GPTLMHeadModel:
    torch.manual_seed(seed)
    config = GPTConfig.from_preset("gpt-tiny", vocab_size=V, pad_token_id=0, eos_token_id=1, hidden_size=32,
                                   num_heads=2, num_layers=2)
    return GPTLMHeadModel(config).eval()


def classifier(lm, labels=("a", "b", "c"), problem=None) -> GPTForSequenceClassification:
    task = TaskConfig("sequence_classification", 1 if problem == "regression" else len(labels),
                      None if problem == "regression" else list(labels), problem)
    return GPTForSequenceClassification.from_lm(lm, task).eval()


# ---------------------------------------------------------------------------- the model
def test_the_classifier_keeps_the_language_model_and_reads_the_extract_state():
    lm = tiny_lm()
    model = classifier(lm)
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.allclose(model.logits(model.encode(ids)), lm(ids).logits, atol=1e-6)  # it still generates as before
    row = torch.tensor([[model.start_id, 5, 6, model.delimiter_id, 7, model.extract_id]])
    padded = torch.cat([row, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 3)], 1).long()
    out, again = model(row), model(padded, mask)
    assert torch.allclose(out.logits, again.logits, atol=1e-5)  # the extract token is the last real one
    hidden = model.encode(row)[:, -1]
    assert torch.allclose(out.logits, model.classifier(hidden), atol=1e-6)
    special = model.embeddings.special.weight
    assert torch.allclose(model.embeddings(row, torch.arange(6))[0, 0], special[0] + model.embeddings.position.weight[0])


def test_both_orders_are_summed_before_the_head():
    model = classifier(tiny_lm(), problem="regression")
    ab = [model.start_id, 5, 6, model.delimiter_id, 7, model.extract_id]
    ba = [model.start_id, 7, model.delimiter_id, 5, 6, model.extract_id]
    out = model(torch.tensor([[ab, ba]]), torch.ones(1, 2, 6, dtype=torch.long))
    h = model.encode(torch.tensor([ab, ba]))[:, -1].sum(0)
    assert out.logits.shape == (1, 1) and torch.allclose(out.logits[0], model.classifier(h), atol=1e-5)


def test_the_auxiliary_lm_loss_covers_the_text_tokens_at_its_weight():
    model = classifier(tiny_lm())
    s, d, e = model.start_id, model.delimiter_id, model.extract_id
    ids = torch.tensor([[s, 5, 6, d, 7, e, 0], [s, 8, d, 9, 10, 11, e]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1] * 7])
    labels = torch.tensor([0, 2])
    out = model(ids, mask, labels, lm_weight=0.5)
    assert torch.allclose(out.task_loss, F.cross_entropy(out.logits, labels))
    logits = model.logits(model.encode(ids, mask))
    # (row, position, the next token): every real text token predicted from the one before it;
    # the start, delimiter and extract tokens are never targets, padding neither.
    pairs = [(0, 0, 5), (0, 1, 6), (0, 3, 7), (1, 0, 8), (1, 2, 9), (1, 3, 10), (1, 4, 11)]
    expected = torch.stack([F.cross_entropy(logits[r, t], torch.tensor(tok)) for r, t, tok in pairs]).mean()
    assert torch.allclose(out.lm_loss, expected, atol=1e-5)
    assert torch.allclose(out.loss, out.task_loss + 0.5 * out.lm_loss)
    assert model(ids, mask, labels).lm_loss is None  # lm_weight 0: no LM loss


# ---------------------------------------------------------------------------- the collator
@pytest.fixture(scope="module")
def gpt_base(tmp_path_factory, bpe_tokenizer_dir, make_family_config):
    from trainer.training.engine import train

    config = make_family_config("gpt", max_steps=30, checkpoint_every=30, eval_every=30)
    return train(config, data_dir=bpe_tokenizer_dir, out_dir=tmp_path_factory.mktemp("gpt"),
                 sink=ListSink()).last_checkpoint


def test_the_input_transformations(gpt_base):
    from models_lib.checkpoint import read_model_config
    from trainer.finetune.gpt1 import GPT_CLASSIFICATION, GPT_REGRESSION
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(gpt_base)
    vocab = read_model_config(gpt_base)["config"]["vocab_size"]
    S, D, E = vocab, vocab + 1, vocab + 2
    config = FinetuneConfig(checkpoint=str(gpt_base), dataset="y")
    enc = lambda text: tok.tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    single = GPT_CLASSIFICATION.build_collator(tok, ["x", "y"], 32, config)([{"text": "open a file", "label": "y"}])
    assert single.input_ids.tolist() == [[S, *enc("open a file"), E]] and single.labels.tolist() == [1]
    pair = GPT_CLASSIFICATION.build_collator(tok, ["x", "y"], 32, config)(
        [{"sentence1": "open a file", "sentence2": "close it", "label": "x"}])
    assert pair.input_ids.tolist() == [[S, *enc("open a file"), D, *enc("close it"), E]]
    both = GPT_REGRESSION.build_collator(tok, [], 32, config)(
        [{"sentence1": "open a file", "sentence2": "close it", "label": "0.5"}])
    assert both.input_ids.shape[:2] == (1, 2) and both.labels.tolist() == [0.5]
    assert both.input_ids[0, 1, : both.attention_mask[0, 1].sum()].tolist() == [S, *enc("close it"), D,
                                                                                  *enc("open a file"), E]
    cut = GPT_CLASSIFICATION.build_collator(tok, ["x", "y"], 8, config)(
        [{"sentence1": "open a file in the directory now", "sentence2": "close it", "label": "x"}])
    assert cut.input_ids.shape[1] == 8 and cut.input_ids[0, -1] == E and D in cut.input_ids[0].tolist()


# ---------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("labelled"), {}
    for name in ("classification", "regression", "multilabel"):
        out[name] = ingested_demo(name, root)
    return out


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=200, batch_size=16, max_length=64, lr=2e-3, eval_every=100, checkpoint_every=200,
                    log_every=20, device="cpu", num_threads=1)
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


def test_gpt_classifies_the_demo_dataset_above_chance_with_the_auxiliary_loss(gpt_base, datasets, tmp_path):
    from models_lib.checkpoint import load_model
    from trainer import finetune as tasks

    assert tasks.check_checkpoint(gpt_base, "classification") == "gpt"
    result, sink = _tune(gpt_base, datasets["classification"], tmp_path / "run")
    assert result.status == "succeeded"
    (_, test), = sink.split("test")
    assert test["accuracy"] > 0.3, test  # five packages: chance is 0.2
    valid = sink.split("valid")[-1][1]
    assert valid["loss"] == pytest.approx(valid["task_loss"] + 0.5 * valid["lm_loss"], rel=1e-6)
    model = load_model(result.last_checkpoint)
    assert isinstance(model, GPTForSequenceClassification) and model.task_config.labels[0] == "asyncio"


def test_gpt_regression_trains_and_other_tasks_are_refused(gpt_base, datasets, tmp_path):
    from trainer import finetune as tasks

    result, sink = _tune(gpt_base, datasets["regression"], tmp_path / "run", max_steps=20, eval_every=20,
                         checkpoint_every=20, aux_lm_weight=0.0)
    (_, test), = sink.split("test")
    assert math.isfinite(test["pearson"]) and "lm_loss" not in test
    with pytest.raises(ConfigError, match="A GPT checkpoint cannot be fine-tuned for multi-label classification"):
        tasks.check_checkpoint(gpt_base, "multilabel")
    with pytest.raises(ConfigError, match="aux_lm_weight must be between 0 and 10"):
        FinetuneConfig(checkpoint="x", dataset="y", aux_lm_weight=-1)
