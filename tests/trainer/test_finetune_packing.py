"""Packed fine-tuning batches (trainer.finetune.tasks.TaskBatch, trainer.objectives.packing): an
encoder's task head computes only the real tokens, and gives the padded batch's losses, logits
(in the padded layout) and gradients, for every task and every encoder family; a run packs its
batches, logs the higher fill, scores as the padded run does and resumes exactly."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainer.finetune.qa import QABatch
from trainer.finetune.tasks import SequenceBatch, TokenBatch, model_inputs
from trainer.objectives.packing import pack_rows

FAMILIES = ["bert", "roberta", "distilbert", "albert", "electra", "spanbert", "tinybert", "unilm"]
# (name, model task, problem type, num_labels)
TASKS = [
    ("single_label", "sequence_classification", "single_label_classification", 3),
    ("pair", "sequence_classification", "single_label_classification", 2),
    ("regression", "sequence_classification", "regression", 1),
    ("multi_label", "sequence_classification", "multi_label_classification", 4),
    ("token", "token_classification", None, 5),
    ("qa", "question_answering", None, 2),
]
LENGTHS = [23, 5, 9, 17, 4, 30, 12, 7]  # one batch, padded to 30: first fit packs it into 4 rows
PAD = 1  # RoBERTa's padding_idx: its positions start at PAD + 1


def tiny_model(family: str, task: str, problem: str | None, num_labels: int):
    from models_lib.families import presets
    from models_lib.families.downstream import build_downstream

    torch.manual_seed(0)
    config = presets.get(f"{family}-tiny", vocab_size=100, hidden_size=64, num_heads=2, num_layers=2,
                         intermediate_size=128, pad_token_id=PAD)
    model = build_downstream(config, task, num_labels, problem_type=problem)
    with torch.no_grad():  # the head's bias too, so that the padding's 0 logits would show
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model.eval()  # no dropout: the two layouts compute the same function


def padded_batch(name: str, num_labels: int, lengths=LENGTHS, *, pairs: bool = True):
    """A padded batch of len(lengths) examples of those lengths (real tokens first, padding after);
    pairs: the second half of a pair (or a QA window) has token type 1."""
    g = torch.Generator().manual_seed(1)
    B, T = len(lengths), max(lengths)
    ids = torch.full((B, T), PAD, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    types = torch.zeros((B, T), dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(5, 100, (n,), generator=g)
        ids[b, 0] = 2  # [CLS]
        mask[b, :n] = 1
        if name in ("pair", "qa") and pairs:
            types[b, n // 2:n] = 1
    if name == "token":
        labels = torch.full((B, T), -100, dtype=torch.long)
        for b, n in enumerate(lengths):
            labels[b, 1:n - 1] = torch.randint(0, num_labels, (n - 2,), generator=g)
            labels[b, 1:n - 1:3] = -100  # later sub-tokens of a word
        return TokenBatch(ids, mask, types, labels, [n - 2 for n in lengths])
    if name == "qa":
        starts = torch.tensor([min(n - 2, 3 + b) if b % 3 else 0 for b, n in enumerate(lengths)])
        ends = torch.minimum(starts + 2, torch.tensor(lengths) - 2) * (starts > 0)
        return QABatch(ids, mask, types, starts, ends, list(range(B)),
                       [[None] * (n // 2) + [(i, i + 1) for i in range(n - n // 2)] for n in lengths],
                       ["context"] * B, [["a"]] * B)
    if name == "regression":
        labels = torch.randn(B, generator=g)
    elif name == "multi_label":
        labels = (torch.rand(B, num_labels, generator=g) > 0.5).float()
    else:
        labels = torch.randint(0, num_labels, (B,), generator=g)
    return SequenceBatch(ids, mask, types, labels)


def pack(batch):
    return pack_rows(batch, seq_len=batch.input_ids.shape[1], pad_id=PAD, unpad=True)


def outputs(model, batch):
    """(loss, logits in the padded layout, gradients) of one forward and backward."""
    model.zero_grad(set_to_none=True)
    out = model(**model_inputs(model, batch))
    loss = out.loss
    logits = out.logits if hasattr(out, "logits") else torch.stack((out.start_logits, out.end_logits), -1)
    if batch.packed is None and isinstance(batch, QABatch):
        # The padded batch's span loss spans its padding too (transformers'); a packed batch's
        # spans each window's own tokens: compare with the padded logits masked so.
        from models_lib.heads.tasks import span_loss

        masked = logits.masked_fill(~batch.attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
        loss = span_loss(masked[..., 0], masked[..., 1], batch.start_positions, batch.end_positions)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), logits.detach(), grads


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name,task,problem,num_labels", TASKS, ids=[t[0] for t in TASKS])
def test_a_packed_batch_gives_the_padded_loss_logits_and_gradients(family, name, task, problem, num_labels):
    model = tiny_model(family, task, problem, num_labels)
    batch = padded_batch(name, num_labels, pairs=model.config.type_vocab_size >= 2)  # RoBERTa has one type
    packed = pack(batch)
    B, T = batch.input_ids.shape
    R, L = packed.input_ids.shape
    assert R < B and L <= T and packed.size == B and packed.n_tokens == batch.n_tokens
    loss, logits, grads = outputs(model, batch)
    p_loss, p_logits, p_grads = outputs(model, packed)
    torch.testing.assert_close(p_loss, loss, rtol=1e-5, atol=1e-5)
    assert p_logits.shape == logits.shape
    if logits.dim() == 3:  # per token: the same on the real tokens of the padded layout
        real = batch.attention_mask.bool()
        torch.testing.assert_close(p_logits[real], logits[real], rtol=1e-4, atol=1e-5)
    else:
        torch.testing.assert_close(p_logits, logits, rtol=1e-4, atol=1e-5)
    assert p_grads.keys() == grads.keys()
    for key, g in grads.items():
        torch.testing.assert_close(p_grads[key], g, rtol=1e-3, atol=1e-5, msg=key)


def test_the_packed_batch_keeps_labels_and_knows_the_way_back():
    batch = padded_batch("token", 5)
    packed = pack(batch)
    assert packed.labels is batch.labels and packed.words == batch.words  # the padded layout's
    real = batch.attention_mask.flatten().nonzero().flatten()
    assert sorted(packed.padded_index.tolist()) == real.tolist() and packed.padded_width == batch.input_ids.shape[1]
    # each real token's id, read through the packing, is the one at its padded place
    assert torch.equal(packed.input_ids.flatten()[packed.real_tokens], batch.input_ids.flatten()[packed.padded_index])
    assert packed.n_positions < batch.n_positions  # the fill is higher
    assert packed.n_tokens / packed.n_positions > batch.n_tokens / batch.n_positions


def test_a_batch_that_saves_no_row_still_skips_its_padding_and_one_without_padding_stays():
    batch = padded_batch("single_label", 3, lengths=[20, 19, 18, 17])  # no two fit in one row of 20
    packed = pack(batch)
    assert packed.input_ids.shape[0] == 4 and packed.real_tokens.numel() == 74 < packed.n_positions
    model = tiny_model("bert", "sequence_classification", "single_label_classification", 3)
    torch.testing.assert_close(outputs(model, packed)[1], outputs(model, batch)[1], rtol=1e-4, atol=1e-5)
    full = padded_batch("single_label", 3, lengths=[9, 9, 9])
    assert pack(full) is full


def test_the_token_types_of_a_model_without_them_are_left_out():
    model = tiny_model("distilbert", "sequence_classification", "single_label_classification", 3)
    batch = padded_batch("pair", 3)
    assert model_inputs(model, batch)["token_type_ids"] is None
    bert = tiny_model("bert", "sequence_classification", "single_label_classification", 3)
    assert model_inputs(bert, batch)["token_type_ids"] is batch.token_type_ids


def test_a_packed_qa_batch_refuses_label_smoothing():
    model = tiny_model("bert", "question_answering", None, 2)
    packed = pack(padded_batch("qa", 2))
    with pytest.raises(ValueError, match="label smoothing"):
        model(**model_inputs(model, packed), label_smoothing=0.1)


def test_packed_batches_pickle_and_move_whole():
    import pickle

    packed = pack(padded_batch("qa", 2))
    again = pickle.loads(pickle.dumps(packed))
    for f in dataclasses.fields(packed):
        a, b = getattr(packed, f.name), getattr(again, f.name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, f.name
    moved = packed.to("cpu")
    assert moved.padded_width == packed.padded_width and torch.equal(moved.padded_index, packed.padded_index)
    assert np.array_equal(moved.starts.numpy(), packed.starts.numpy())


# ---------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def quiet_checkpoint(trained_run, tmp_path_factory):
    """The pre-training run's checkpoint with dropout 0 (a copy): packed and padded runs from it
    compute the same function, whatever positions their dropout masks would cover."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("quiet") / "checkpoint"
    shutil.copytree(trained_run[0].last_checkpoint, folder)
    path = folder / "model_config.json"
    meta = json.loads(path.read_text())
    meta["config"].update(hidden_dropout=0.0, attention_dropout=0.0)
    path.write_text(json.dumps(meta))
    return folder


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from tests.trainer.finetune_helpers import ingested_demo

    root = tmp_path_factory.mktemp("labelled")
    return lambda name: ingested_demo(name, root) if not (root / name).exists() else root / name


def run(checkpoint, dataset, out_dir, *, pack=True, should_stop=lambda: False, **changes):
    from trainer.finetune.config import FinetuneConfig
    from trainer.finetune.engine import finetune
    from trainer.training.sinks import ListSink

    settings = dict(max_steps=12, batch_size=16, max_length=64, lr=2e-3, warmup_ratio=0.0, eval_every=6,
                    checkpoint_every=6, log_every=6, device="cpu", num_threads=1, group_by_length=False,
                    data_workers=0)
    sink = ListSink()
    config = FinetuneConfig(checkpoint=str(checkpoint), dataset=str(dataset), **{**settings, **changes})
    return finetune(config, out_dir=out_dir, sink=sink, pack=pack, resume=out_dir.exists(),
                    should_stop=should_stop), sink


@pytest.mark.parametrize("name", ["classification", "token_classification"])
def test_a_packed_run_scores_as_the_padded_run_and_computes_fewer_positions(name, quiet_checkpoint, demo, tmp_path):
    runs = {pack: run(quiet_checkpoint, demo(name), tmp_path / str(pack), pack=pack)[1] for pack in (True, False)}
    for split in ("valid", "test"):
        packed, padded = ([v for _, s, v in runs[pack].events if s == split] for pack in (True, False))
        assert len(packed) == len(padded) >= 1
        for a, b in zip(packed, padded):
            assert a.keys() == b.keys()
            for key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), (split, key)
    fills = {pack: [v["fill"] for _, v in runs[pack].split("train")] for pack in (True, False)}
    assert all(p > q for p, q in zip(fills[True], fills[False])), fills
    assert all(f > 0.8 for f in fills[True]), fills


def test_a_packed_run_resumes_exactly(quiet_checkpoint, demo, tmp_path):
    import safetensors.torch

    whole, _ = run(quiet_checkpoint, demo("token_classification"), tmp_path / "whole")
    asked = {"n": 0}

    def stop_after_six():
        asked["n"] += 1
        return asked["n"] > 6

    first, _ = run(quiet_checkpoint, demo("token_classification"), tmp_path / "parts", should_stop=stop_after_six)
    assert first.status == "cancelled" and first.final_step == 6
    second, _ = run(quiet_checkpoint, demo("token_classification"), tmp_path / "parts")
    assert second.status == "succeeded" and second.final_step == 12
    a = safetensors.torch.load_file(str(whole.last_checkpoint / "model.safetensors"))
    b = safetensors.torch.load_file(str(second.last_checkpoint / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_packed_qa_checkpoint_is_scored_as_the_padded_one(quiet_checkpoint, demo, tmp_path):
    """QA does not pack by default (its padded loss spans the padding: trainer.finetune.qa); switched
    on, its packed batches predict every answer as the padded ones do."""
    from trainer.finetune.evaluation import evaluate_checkpoint
    from trainer.finetune.qa import EXTRACTIVE_QA

    assert not EXTRACTIVE_QA.packs
    object.__setattr__(EXTRACTIVE_QA, "packs", True)  # a frozen record; this test only
    try:
        scored_packed(quiet_checkpoint, demo, tmp_path, evaluate_checkpoint)
    finally:
        object.__setattr__(EXTRACTIVE_QA, "packs", False)


def scored_packed(quiet_checkpoint, demo, tmp_path, evaluate_checkpoint):

    result, _ = run(quiet_checkpoint, demo("extractive_qa"), tmp_path / "qa", max_steps=6, max_length=96)
    scored = {pack: evaluate_checkpoint(result.last_checkpoint, demo("extractive_qa"), split="validation",
                                        device="cpu", pack=pack, out_dir=tmp_path / str(pack)).metrics
              for pack in (True, False)}
    predictions = {pack: (tmp_path / str(pack) / "predictions.jsonl").read_text() for pack in (True, False)}
    assert predictions[True] == predictions[False]  # every answer, and its score to the printed digit
    assert scored[True].keys() == scored[False].keys() and {"exact_match", "f1"} <= scored[True].keys()
    for key, value in scored[False].items():
        if "loss" not in key:  # a packed window's span loss leaves its padding out (EncoderForQuestionAnswering)
            assert scored[True][key] == pytest.approx(value, abs=1e-6), key


def test_the_packing_collator_pickles_for_the_data_workers(quiet_checkpoint, demo):
    import pickle

    from models_lib.checkpoint import load_model
    from trainer.finetune.engine import packing
    from trainer.finetune.tasks import TOKEN_CLASSIFICATION, PackingTaskCollator, encodes_ahead
    from trainer.prep.labelled import iter_examples, read_meta
    from trainer.prep.tokenization import load_tokenizer

    labels = read_meta(demo("token_classification"))["labels"]
    collator = TOKEN_CLASSIFICATION.build_collator(load_tokenizer(quiet_checkpoint), labels, 64)
    model = TOKEN_CLASSIFICATION.build_model(load_model(quiet_checkpoint), labels)
    packs = packing(TOKEN_CLASSIFICATION, model, collator)
    assert isinstance(packs, PackingTaskCollator) and encodes_ahead(packs)
    assert packing(TOKEN_CLASSIFICATION, load_model(quiet_checkpoint), collator) is collator  # not a task head
    examples = list(iter_examples(demo("token_classification"), "train"))[:16]
    again = pickle.loads(pickle.dumps(packs))
    a, b = packs(examples), again.collate(examples, again.encode(examples))
    assert a.packed is not None and a.input_ids.shape[0] < len(examples)
    assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("input_ids", "segments", "padded_index", "labels"))
