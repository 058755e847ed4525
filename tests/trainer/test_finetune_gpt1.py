"""GPT-1's task heads (models_lib/families/gpt_tasks.py, trainer/finetune/gpt1.py): the input
transformations with learned start/delimiter/extract tokens, the head on the extract state (both
orders summed for a similarity pair; one pass per choice for multiple choice), the auxiliary LM
loss at weight 0.5, and classification and multiple choice on a GPT checkpoint end to end."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from models_lib.families.downstream import TaskConfig
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.gpt_tasks import GPTForMultipleChoice, GPTForSequenceClassification
from tests.trainer.finetune_helpers import ingested_demo
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink

V = 50
MC_STEPS = 12  # the multiple-choice demo's short run


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
    # In a plain shuffle, as calibrated: 200 steps of this tiny model swing with the data order
    # (test accuracy 0.26 grouped against 0.36 plain at seed 0; 0.45 against 0.40 at seed 1). Not
    # because grouped batches lean to a few packages: the packages' paragraphs differ in length
    # (mean 22 to 32 words) but a grouped batch of 32 mixes them nearly as a shuffled one does
    # (mean label entropy 1.51 nats against 1.53; bench/RESULTS.md, 2026-11-27 evening).
    result, sink = _tune(gpt_base, datasets["classification"], tmp_path / "run", group_by_length=False)
    assert result.status == "succeeded"
    (_, test), = sink.split("test")
    # five packages: chance is 0.2. Calibrated on the stored tokenizers (2026-12-02): 0.426, so the
    # bound 0.3 leaves a margin of 0.126 above it and 0.1 above chance.
    assert test["accuracy"] > 0.3, test
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


# ---------------------------------------------------------------------------- multiple choice
def chooser(lm) -> GPTForMultipleChoice:
    return GPTForMultipleChoice.from_lm(lm, TaskConfig("multiple_choice", 1)).eval()


def test_multiple_choice_scores_each_choice_at_its_extract_token_with_half_the_lm_loss():
    model = chooser(tiny_lm())
    s, d, e = model.start_id, model.delimiter_id, model.extract_id
    rows = [[[s, 5, 6, d, 7, e], [s, 5, 6, d, 8, 9, e], [s, 5, 6, d, 10, e]],
            [[s, 11, d, 12, e], [s, 11, d, 13, 14, 15, e], [s, 11, d, 16, e]]]
    ids = torch.zeros(2, 3, 7, dtype=torch.long)
    mask = torch.zeros(2, 3, 7, dtype=torch.long)
    for b, example in enumerate(rows):
        for k, row in enumerate(example):
            ids[b, k, :len(row)], mask[b, k, :len(row)] = torch.tensor(row), 1
    labels = torch.tensor([1, 2])
    out = model(ids, mask, labels, lm_weight=0.5)
    assert out.logits.shape == (2, 3)
    lm_terms = []
    for b, example in enumerate(rows):
        for k, row in enumerate(example):  # each choice read on its own: its score is the head on its extract state
            states = model.encode(torch.tensor([row]))[0]
            assert torch.allclose(out.logits[b, k], model.classifier(states[-1])[0], atol=1e-5)
            logits = model.logits(states[None])[0]
            lm_terms += [F.cross_entropy(logits[t], torch.tensor(row[t + 1])) for t in range(len(row) - 1)
                         if row[t + 1] < V]  # the special tokens are never LM targets
    assert torch.allclose(out.task_loss, F.cross_entropy(out.logits, labels))  # a softmax over the choices
    assert torch.allclose(out.lm_loss, torch.stack(lm_terms).mean(), atol=1e-5)
    assert torch.allclose(out.loss, out.task_loss + 0.5 * out.lm_loss)
    assert model.predict(out.logits).tolist() == out.logits.argmax(-1).tolist()
    with pytest.raises(ValueError, match="multiple choice reads"):
        model(ids[:, 0], mask[:, 0])


def test_the_multiple_choice_collator_reads_one_sequence_per_choice(gpt_base):
    from models_lib.checkpoint import read_model_config
    from trainer.finetune.gpt1 import GPT_MULTIPLE_CHOICE
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(gpt_base)
    vocab = read_model_config(gpt_base)["config"]["vocab_size"]
    S, D, E = vocab, vocab + 1, vocab + 2
    config = FinetuneConfig(checkpoint=str(gpt_base), dataset="y")
    enc = lambda text: tok.tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    examples = [{"context": "open a file", "choices": ["open", "close the file", "read"], "label": 1},
                {"context": "read it", "question": "which one?", "choices": ["read", "write", "seek"], "label": 2}]
    batch = GPT_MULTIPLE_CHOICE.build_collator(tok, [], 32, config)(examples)
    assert batch.input_ids.shape[:2] == (2, 3) and batch.labels.tolist() == [1, 2]
    for i, (ex, first) in enumerate(zip(examples, ["open a file", "read it which one?"])):
        for j, choice in enumerate(ex["choices"]):
            n = int(batch.attention_mask[i, j].sum())
            assert batch.input_ids[i, j, :n].tolist() == [S, *enc(first), D, *enc(choice), E]  # extract: last real
    long = {"context": "open a file in the directory and then read every line of it now", "choices": ["x y", "z"],
            "label": 0}
    cut = GPT_MULTIPLE_CHOICE.build_collator(tok, [], 10, config)([long])
    for j, choice in enumerate(long["choices"]):
        n = int(cut.attention_mask[0, j].sum())
        row = cut.input_ids[0, j, :n].tolist()
        assert n <= 10 and row[-1] == E and row[-2 - len(enc(choice)):-1] == [D, *enc(choice)]  # the choice whole
        assert row[1:row.index(D)] == enc(long["context"])[-(row.index(D) - 1):]  # the context's end kept


def test_multiple_choice_trains_on_gpt_writes_choice_texts_exports_and_refuses_encoders(gpt_base, tmp_path):
    """A short run on the demo (its accuracy above chance is tests/webapp/test_finetune_multiple_choice.py's)."""
    from models_lib.checkpoint import load_model
    from trainer import finetune as tasks
    from trainer.export import export_checkpoint

    dataset = ingested_demo("multiple_choice", tmp_path / "data")
    assert tasks.check_checkpoint(gpt_base, "multiple_choice") == "gpt"
    result, sink = _tune(gpt_base, dataset, tmp_path / "run", max_steps=MC_STEPS, eval_every=MC_STEPS,
                         checkpoint_every=MC_STEPS, max_length=32)
    assert result.status == "succeeded"
    (_, test), = sink.split("test")
    assert set(test) == {"loss", "task_loss", "lm_loss", "accuracy"} and 0.0 <= test["accuracy"] <= 1.0
    valid = sink.split("valid")[-1][1]
    assert valid["loss"] == pytest.approx(valid["task_loss"] + 0.5 * valid["lm_loss"], rel=1e-6)
    model = load_model(result.last_checkpoint)
    assert isinstance(model, GPTForMultipleChoice) and model.task_config.task == "multiple_choice"
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert {"input", "gold", "predicted", "score"} <= set(rows[0]) and rows[0]["gold"].count(".") >= 1  # the names
    assert [row["correct"] for row in rows] == sorted(row["correct"] for row in rows)  # the errors first
    exported = export_checkpoint(result.last_checkpoint, tmp_path / "hf")
    assert exported.architecture == "GPT2DoubleHeadsModel"
    readme = (tmp_path / "hf" / "README.md").read_text()
    assert "GPT2DoubleHeadsModel.from_pretrained" in readme and f"the ids {model.start_id}, " in readme
    with pytest.raises(ConfigError, match="cannot be fine-tuned for multiple choice: that task trains a GPT model"):
        tasks.check_checkpoint(_bert_checkpoint(tmp_path), "multiple_choice")


def _bert_checkpoint(tmp_path):
    from models_lib.checkpoint import save_model
    from models_lib.families.bert import BertConfig, BertForPreTraining

    config = BertConfig.from_preset("bert-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                                    num_layers=1)
    return save_model(BertForPreTraining(config), tmp_path / "bert")
