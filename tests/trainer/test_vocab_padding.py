"""The trainer around the padded vocabulary tables (models_lib.core.vocab): checkpoints keep
vocab_size rows for the optimizer state too, a run trained before the padding resumes with it
and continues as it would have, the explorer's fill-mask never offers a padding id, and the
FLOPs formulas count the output layer as computed (the padded width)."""
from __future__ import annotations

import pytest
import safetensors.torch
import torch

from models_lib.checkpoint import load_model, save_model
from models_lib.core import vocab
from models_lib.families import presets
from models_lib.families.bert import BertForPreTraining
from models_lib.families.elmo import ElmoConfig
from models_lib.families.gpt import GPTConfig
from models_lib.families.t5 import T5Config
from models_lib.families.transfo_xl import TransfoXLConfig
from models_lib.families.xlnet import XLNetConfig
from trainer.training import distributed
from trainer.training.checkpoints import list_checkpoints
from trainer.training.flops import Workload, training_flops_per_token

V = 70  # padded to 128


# --- FLOPs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, real, padded", [
    (lambda v: presets.get("bert-base", vocab_size=v), 30522, 30528),
    (lambda v: presets.get("electra-small", vocab_size=v), 30522, 30528),
    (lambda v: GPTConfig.from_preset("gpt2-small", vocab_size=v), 50257, 50304),
    (lambda v: T5Config.from_preset("t5-small", vocab_size=v), 32101, 32128),
    (lambda v: XLNetConfig.from_preset("xlnet-tiny", vocab_size=v), 8001, 8064),
    (lambda v: TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=v), 8001, 8064),
    (lambda v: ElmoConfig.from_preset("elmo-tiny", vocab_size=v), 8001, 8064),
], ids=["bert", "electra", "gpt", "t5", "xlnet", "transfo-xl", "elmo"])
def test_flops_count_the_output_layer_at_the_padded_width(make, real, padded):
    work = Workload(seq_len=128, target_len=32, predicted=0.15, objectives=("mlm",), batch_size=8)
    assert make(real).padded_vocab_size == padded
    at_real = training_flops_per_token(make(real), work)
    assert at_real == training_flops_per_token(make(padded), work)
    assert at_real > training_flops_per_token(make(padded - 64), work)


# --- optimizer state ------------------------------------------------------------------------------

def tiny_bert() -> BertForPreTraining:
    return BertForPreTraining(presets.get("bert-tiny", vocab_size=V, hidden_size=32, num_heads=2, num_layers=1,
                                          intermediate_size=48, hidden_dropout=0.0, attention_dropout=0.0))


def step(model: BertForPreTraining, optimizer: torch.optim.Optimizer, seed: int) -> None:
    ids = torch.randint(5, V, (2, 8), generator=torch.Generator().manual_seed(seed))
    labels = torch.where(torch.arange(8) % 3 == 1, ids, torch.full_like(ids, -100))
    optimizer.zero_grad()
    model(ids, mlm_labels=labels, nsp_labels=torch.tensor([0, 1])).loss.backward()
    optimizer.step()


@pytest.mark.parametrize("optimizer", ["adamw", "adafactor"])
def test_optimizer_state_is_saved_with_vocab_size_rows_and_padded_on_load(optimizer, tmp_path):
    make = {"adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1),
            "adafactor": lambda m: torch.optim.Adafactor(m.parameters(), lr=1e-2, weight_decay=0.1)}[optimizer]
    torch.manual_seed(0)
    model = tiny_bert()
    opt = make(model)
    for seed in range(2):
        step(model, opt, seed)
    weights, state = distributed.full_state(distributed.Dist(), model, opt)
    table = model.word_embeddings
    index = [p for g in opt.param_groups for p in g["params"]].index(table)
    per_row = {k: v for k, v in state["state"][index].items() if isinstance(v, torch.Tensor) and v.dim()}
    assert per_row and all(v.shape[0] in (V, 1) for v in per_row.values())  # (1, E): Adafactor's columns
    assert opt.state[table][next(iter(per_row))].shape[0] == 128  # the live state is left padded
    save_model(model, tmp_path, state_dict=weights)
    torch.save(state, tmp_path / "optimizer.pt")

    torch.manual_seed(1)
    again = tiny_bert()
    again_opt = make(again)
    distributed.load(distributed.Dist(), again, again_opt, tmp_path / "model.safetensors",
                     torch.load(tmp_path / "optimizer.pt", weights_only=True))
    for key, value in opt.state[table].items():
        assert torch.equal(value, again_opt.state[again.word_embeddings][key]), key
    step(model, opt, 5)
    step(again, again_opt, 5)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name
    assert not model.word_embeddings[V:].any() and not model.mlm_head.bias[V:].any()


def test_a_checkpoint_of_an_unpadded_model_resumes_padded_and_trains_on_the_same(monkeypatch, tmp_path):
    with monkeypatch.context() as m:  # what the trainer saved before the padding
        m.setattr(vocab, "PAD_MULTIPLE", 1)
        torch.manual_seed(0)
        before = tiny_bert()
        before_opt = torch.optim.AdamW(before.parameters(), lr=1e-2, weight_decay=0.1)
        for seed in range(3):
            step(before, before_opt, seed)
        save_model(before, tmp_path)
        torch.save(before_opt.state_dict(), tmp_path / "optimizer.pt")
    assert safetensors.torch.load_file(str(tmp_path / "model.safetensors"))["bert.embeddings.word.weight"].shape[0] == V

    torch.manual_seed(1)
    resumed = tiny_bert()
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2, weight_decay=0.1)
    distributed.load(distributed.Dist(), resumed, resumed_opt, tmp_path / "model.safetensors",
                     torch.load(tmp_path / "optimizer.pt", weights_only=True))
    assert resumed.word_embeddings.shape[0] == 128
    for seed in (3, 4):
        step(before, before_opt, seed)
        step(resumed, resumed_opt, seed)
    ours, theirs = vocab.unpadded_state_dict(resumed), before.state_dict()
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, theirs[name], rtol=1e-5, atol=1e-6, msg=name)
    assert not resumed.word_embeddings[V:].any() and not resumed.mlm_head.bias[V:].any()


# --- the engine -------------------------------------------------------------------------------------

def test_a_run_trained_before_the_padding_resumes_as_it_would_have_continued(tokenizer_dir, tmp_path, make_config,
                                                                            monkeypatch):
    from trainer.training.engine import train
    from trainer.training.sinks import ListSink

    config = make_config(max_steps=8, log_every=1, eval_every=100, checkpoint_every=100, warmup_steps=2,
                         model_overrides={"hidden_size": 64, "num_heads": 2, "hidden_dropout": 0.0,
                                          "attention_dropout": 0.0})
    with monkeypatch.context() as m:
        m.setattr(vocab, "PAD_MULTIPLE", 1)
        whole = ListSink()
        train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "whole", sink=whole)
        first = ListSink()
        stopped = train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "split", sink=first,
                        should_stop=lambda: len(first.heartbeats) >= 4)
    assert stopped.status == "cancelled" and stopped.final_step == 4
    old = load_model(stopped.last_checkpoint)
    V_ = old.config.vocab_size
    assert old.config.padded_vocab_size != V_  # the tokenizer's vocabulary is padded: this test means something
    second = ListSink()
    resumed = train(config, data_dir=tokenizer_dir, out_dir=tmp_path / "split", sink=second, resume=True)
    assert resumed.status == "succeeded" and resumed.final_step == 8
    assert any("Resuming from step-00000004" in line for line in second.lines)
    whole_train = dict(whole.split("train"))
    for step_, values in second.split("train"):
        assert abs(values["loss"] - whole_train[step_]["loss"]) < 1e-5, step_
    final = tmp_path / "split/checkpoints/step-00000008"
    stored = safetensors.torch.load_file(str(final / "model.safetensors"))
    assert stored["bert.embeddings.word.weight"].shape[0] == V_  # written as before the padding
    optimizer = torch.load(final / "optimizer.pt", weights_only=True)["optimizer"]
    rows = {v.shape[0] for s in optimizer["state"].values() for v in s.values() if torch.is_tensor(v) and v.dim()}
    assert old.config.padded_vocab_size not in rows and V_ in rows
    a = load_model(tmp_path / "whole/checkpoints/step-00000008").state_dict()
    b = load_model(final).state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_fill_mask_offers_only_real_tokens_even_with_every_one_asked_for(trained_run):
    from trainer.inference import masked

    _, _, run_folder = trained_run
    _, last = list_checkpoints(run_folder)[-1]
    model = load_model(last)
    V_ = model.config.vocab_size
    assert model.config.padded_vocab_size > V_
    predictions = masked.fill_mask(last, "the [MASK] of the day.", top_k=V_)[0]["predictions"]
    assert len(predictions) == V_ and sorted(p["id"] for p in predictions) == list(range(V_))
    assert all(p["token"] is not None for p in predictions)
