"""Packed batches (trainer.objectives.packing, models_lib.core.packing): the examples of a batch
laid end to end in fewer rows give the padded batch's losses, accuracies and gradients in every
encoder objective that packs, and the run computes fewer positions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.objectives.packing import first_fit, pack_rows

# family, objectives, masking unit (None: the objective's default); single segments packed
# DOC-SENTENCES (full-sentences fills whole rows: nothing to pack)
PACKED_SETS = [
    ("bert", ["mlm", "nsp"], None),
    ("bert", ["mlm", "nsp"], "word"),
    ("roberta", ["mlm"], None),
    ("albert", ["mlm", "sop"], None),
    ("spanbert", ["mlm", "sbo"], None),
    ("electra", ["mlm", "rtd"], None),
    ("unilm", ["mlm", "unilm"], None),
]


def padded_batch(tokenizer_dir, config, special):
    from trainer.training import data

    stream = data.build_train_stream(config, tokenizer_dir, special, pack=False)
    return stream.next_batch()


def special_ids(tokenizer_dir):
    from trainer.objectives.examples import SpecialIds
    from trainer.prep.tokenization import load_tokenizer

    return SpecialIds.from_tokenizer(load_tokenizer(tokenizer_dir))


def test_first_fit_places_every_example_without_overlap():
    lengths = np.array([60, 10, 64, 30, 5, 33, 64, 1])
    rows, offsets = first_fit(lengths, 64)
    assert rows.max() + 1 == 5  # 267 tokens: 64 | 64 | 60 + 1 | 33 + 30 | 10 + 5
    for r in range(rows.max() + 1):
        here = np.flatnonzero(rows == r)
        spans = sorted((offsets[i], offsets[i] + lengths[i]) for i in here)
        assert spans[-1][1] <= 64
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_a_packed_batch_holds_each_example_unchanged_in_its_place(tokenizer_dir, make_family_config):
    config = make_family_config("bert", batch_size=24, seq_len=128)
    special = special_ids(tokenizer_dir)
    batch = padded_batch(tokenizer_dir, config, special)
    packed = pack_rows(batch, seq_len=128, pad_id=special.pad)
    B, R = batch.input_ids.shape[0], packed.input_ids.shape[0]
    assert R < B and packed.size == B and packed.n_tokens == batch.n_tokens
    assert packed.n_positions < batch.n_positions
    assert torch.equal(packed.nsp_labels, batch.nsp_labels)
    L = packed.input_ids.shape[1]
    for b in range(B):
        n = int(batch.attention_mask[b].sum())
        row, col = divmod(int(packed.starts[b]), L)
        assert int(packed.input_ids[row, col]) == special.cls
        for name in ("input_ids", "token_type_ids", "mlm_labels", "attention_mask"):
            assert torch.equal(getattr(packed, name)[row, col:col + n], getattr(batch, name)[b, :n]), name
        assert torch.equal(packed.positions[row, col:col + n], torch.arange(n))
        segment = packed.segments[row, col:col + n]
        assert (segment == segment[0]).all() and int(segment[0]) >= 1
    real = packed.attention_mask.bool()
    assert bool((packed.segments[~real] == 0).all()) and bool((packed.input_ids[~real] == special.pad).all())


def steps_for(family, objectives, unit, tokenizer_dir, make_family_config):
    from trainer.training import steps
    from trainer.prep.tokenization import load_tokenizer

    changes = dict(objectives=objectives, batch_size=12, seq_len=128, model_overrides={"hidden_size": 64,
                                                                                        "num_heads": 2})
    if unit is not None:
        changes["masking_unit"] = unit
    if objectives in (["mlm"], ["mlm", "sbo"], ["mlm", "rtd"]):
        changes["packing"] = "doc-sentences"
    config = make_family_config(family, **changes)
    tokenizer = load_tokenizer(tokenizer_dir)
    torch.manual_seed(0)
    model, step = steps.build(config, vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, device="cpu",
                              data_dir=tokenizer_dir, tokenizer=tokenizer)
    return config, model, step


def step_values(step, model, batch):
    model.zero_grad(set_to_none=True)
    out = step(batch, train=True)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    values = {k: float(v) for k, v in out.losses.items()}
    values.update({k: (float(h), float(t)) for k, (h, t) in out.ratios.items()})
    return float(out.loss.detach()), values, grads


def assert_packed_gives_the_padded_step(step, model, batch, packed, *, between=lambda: None):
    """The Step's loss, named losses, ratios and gradients on `packed` equal those on `batch`
    (`between` runs after the padded step: a step that counts its calls resets here)."""
    loss, values, grads = step_values(step, model, batch)
    between()
    p_loss, p_values, p_grads = step_values(step, model, packed)
    assert p_loss == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert p_values.keys() == values.keys()
    for key, value in values.items():
        assert p_values[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert p_grads.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(p_grads[name], g, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("family,objectives,unit", PACKED_SETS, ids=lambda v: str(v))
def test_packed_batches_give_the_padded_losses_accuracies_and_gradients(family, objectives, unit, tokenizer_dir,
                                                                       make_family_config, monkeypatch):
    if family == "electra":
        # ELECTRA's generator samples the masked positions in row-major order, which packing
        # changes (same distribution, other draws): compare with its argmax instead.
        from models_lib.families import electra

        sample = electra.sample_tokens
        monkeypatch.setattr(electra, "sample_tokens", lambda logits, *args: sample(logits, False))
    config, model, step = steps_for(family, objectives, unit, tokenizer_dir, make_family_config)
    special = special_ids(tokenizer_dir)
    batch = padded_batch(tokenizer_dir, config, special)
    packed = pack_rows(batch, seq_len=config.seq_len, pad_id=special.pad)
    assert packed.input_ids.shape[0] < batch.input_ids.shape[0], "the test batch should pack into fewer rows"
    model.eval()  # no dropout: the two layouts must compute the same function
    assert_packed_gives_the_padded_step(step, model, batch, packed)


def distillation_setup(tokenizer_dir, make_family_config, seq_len):
    """(padded batch, packed batch, a vocabulary size that covers it, the pad id, a tiny BERT teacher)."""
    from models_lib.families.bert import BertConfig, BertForPreTraining

    config = make_family_config("bert", batch_size=12, seq_len=seq_len)
    special = special_ids(tokenizer_dir)
    batch = padded_batch(tokenizer_dir, config, special)
    packed = pack_rows(batch, seq_len=seq_len, pad_id=special.pad)
    torch.manual_seed(0)
    V = int(batch.input_ids.max()) + 100
    teacher = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=V, hidden_size=64, num_heads=2,
                                                        pad_token_id=special.pad)).eval()
    return batch, packed, V, special.pad, teacher


def test_distillation_packs_for_student_and_teacher(tokenizer_dir, make_family_config):
    from models_lib.families.distilbert import DistilBertForPreTraining
    from models_lib.families import presets
    from trainer.objectives.distill import DistillationStep

    batch, packed, V, pad, teacher = distillation_setup(tokenizer_dir, make_family_config, 64)
    student = DistilBertForPreTraining(presets.get("distilbert-tiny", vocab_size=V, hidden_size=64, num_heads=2,
                                                   pad_token_id=pad)).eval()
    step = DistillationStep(make_family_config("distilbert", teacher_checkpoint="unused"), student, "cpu", teacher)
    assert_packed_gives_the_padded_step(step, student, batch, packed)


def test_a_run_packs_its_batches_and_logs_the_fill(tokenizer_dir, make_config, tmp_path):
    from trainer.training import data
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    config = make_config(max_steps=5, log_every=5, eval_every=5, checkpoint_every=5, seq_len=128)
    sink = ListSink()
    train(config, data_dir=tokenizer_dir, out_dir=tmp_path, sink=sink)
    logged = sink.split("train")[-1][1]["fill"]
    special = special_ids(tokenizer_dir)
    fills = {}
    for pack in (True, False):
        stream = data.build_train_stream(config, tokenizer_dir, special, pack=pack)
        batches = [stream.next_batch() for _ in range(5)][1:]  # the last log line covers steps 2-5
        fills[pack] = sum(b.n_tokens for b in batches) / sum(b.n_positions for b in batches)
    assert logged == pytest.approx(fills[True])
    assert fills[True] > 0.85 and fills[True] > fills[False] + 0.2, fills


@pytest.mark.parametrize("predicting", [False, True], ids=["layers", "predictions"])
def test_tinybert_distillation_packs_and_compares_attention_inside_each_example(predicting, tokenizer_dir,
                                                                                make_family_config):
    from models_lib.families.tinybert import TinyBertForPreTraining
    from models_lib.families import presets
    from trainer.objectives.tinybert import TinyBertStep

    batch, packed, V, pad, teacher = distillation_setup(tokenizer_dir, make_family_config, 128)
    student = TinyBertForPreTraining(presets.get("tinybert-tiny", vocab_size=V, hidden_size=32, num_heads=2,
                                                 pad_token_id=pad, teacher_hidden_size=64)).eval()
    share = 1.0 if predicting else 0.0
    run = make_family_config("tinybert", teacher_checkpoint="unused", tinybert_prediction_share=share)
    step = TinyBertStep(run, student, "cpu", teacher)
    assert_packed_gives_the_padded_step(step, student, batch, packed,
                                        between=lambda: setattr(step, "micro_batches", 0))


def test_the_blocks_compute_the_real_tokens_only(tokenizer_dir, make_family_config):
    """Unpadded: the transformer blocks see (N, H), N the batch's real tokens; attention lays
    them out in their rows by itself."""
    config, model, step = steps_for("bert", ["mlm", "nsp"], None, tokenizer_dir, make_family_config)
    special = special_ids(tokenizer_dir)
    packed = pack_rows(padded_batch(tokenizer_dir, config, special), seq_len=config.seq_len, pad_id=special.pad)
    assert torch.equal(packed.real_tokens, torch.nonzero(packed.attention_mask.flatten()).flatten())
    seen = []
    block = model.bert.encoder.layers[0]
    handle = block.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    try:
        step(packed, train=False)
    finally:
        handle.remove()
    assert seen == [(packed.n_tokens, config.model_overrides["hidden_size"])]


def full_batch(special, seq_len=16, lengths=(14, 14, 14, 14)):
    """An MLM batch of examples of `lengths` tokens (+ [CLS] and [SEP]); equal lengths: all rows real."""
    from trainer.objectives.encoder import MLMCollator
    from trainer.objectives.examples import Example

    collator = MLMCollator(special=special, seq_len=seq_len, seed=0)
    return collator([Example(uid, 0, a=np.arange(20 + uid, 20 + uid + n)) for uid, n in enumerate(lengths)])


def forward_inputs(model, step, batch):
    """(the keyword arguments the step gives the model's forward, the step's output, the forward)."""
    given = []
    real_forward = model.forward
    model.forward = lambda **kwargs: given.append(kwargs) or real_forward(**kwargs)
    try:
        out = step(batch, train=True)
    finally:
        del model.forward
    return given[0], out, real_forward


def graph_breaks(forward, inputs):
    import torch._dynamo

    torch._dynamo.reset()
    explained = torch._dynamo.explain(forward)(**inputs)
    return explained.graph_break_count, explained.break_reasons


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_batch_of_full_rows_says_so_and_its_step_asks_the_device_nothing(family, tokenizer_dir,
                                                                           make_family_config):
    """A masked-LM batch whose rows are all real says so when collated (`full`) and packing leaves
    it as it is. Its step gives the model no padding mask (the encoder would ask the device whether
    anything is padded) and the labelled positions (the MLM head would index with a boolean mask):
    the padded path's loss, and a forward that compiles as one graph."""
    _, model, step = steps_for(family, ["mlm"], None, tokenizer_dir, make_family_config)
    special = special_ids(tokenizer_dir)
    full = full_batch(special)
    assert full.full and not full_batch(special, lengths=(14, 9)).full
    assert pack_rows(full, seq_len=16, pad_id=special.pad, unpad=True) is full
    model.eval()
    inputs, out, forward = forward_inputs(model, step, full)
    labelled = (full.mlm_labels != -100).flatten().nonzero().squeeze(1)
    assert labelled.numel() > 0
    assert inputs["attention_mask"] is None and torch.equal(inputs["mlm_positions"], labelled)
    reference = forward(full.input_ids, full.attention_mask, full.token_type_ids, full.mlm_labels)  # no flags
    torch.testing.assert_close(out.loss, reference.loss)
    breaks, reasons = graph_breaks(forward, inputs)
    assert breaks == 0, reasons


@pytest.mark.parametrize("layout", ["packed", "full"])
def test_electra_s_step_draws_its_uniforms_outside_the_model_which_compiles_as_one_graph(
        layout, tokenizer_dir, make_family_config):
    """ELECTRA's step on a packed (or full) batch draws one uniform per labelled position from its
    checkpointed sampler and gives them to the model with the labelled positions: the generator,
    its sampling (inverse CDF), the corrupted input, the discriminator and the RTD loss (a masked
    mean) compile as one graph, with no boolean index and no Generator in it."""
    config, model, step = steps_for("electra", ["mlm", "rtd"], None, tokenizer_dir, make_family_config)
    special = special_ids(tokenizer_dir)
    if layout == "packed":
        batch = pack_rows(padded_batch(tokenizer_dir, config, special), seq_len=config.seq_len, pad_id=special.pad,
                          unpad=True)
        assert batch.segments is not None
    else:
        batch = full_batch(special)
    state = step.sampler.get_state()
    inputs, out, forward = forward_inputs(model, step, batch)
    assert "generator" not in inputs and inputs["uniforms"].shape == inputs["mlm_positions"].shape
    assert torch.equal(inputs["uniforms"], torch.rand(inputs["uniforms"].shape,
                                                      generator=torch.Generator().set_state(state)))
    assert (inputs["attention_mask"] is None) == (layout == "full")
    assert out.weights["mlm_loss"] == inputs["mlm_positions"].numel()
    breaks, reasons = graph_breaks(forward, inputs)
    assert breaks == 0, reasons
