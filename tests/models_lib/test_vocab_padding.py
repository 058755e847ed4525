"""The vocabulary's tables padded to a multiple of 64 rows inside the model (models_lib.core.vocab).

Every family is built twice from one seed: padded (the default) and unpadded (PAD_MULTIPLE 1,
what the models were before). The two must hold the same real weights (the padded table draws
what the unpadded one drew), compute the same logits (exactly vocab_size columns) and losses,
give the real rows the same gradients and the padding rows none, and stay equal through AdamW
steps with weight decay. Generation never produces an id past the vocabulary, even sampling at
a high temperature. Checkpoints and transformers exports hold vocab_size rows; a checkpoint of
an unpadded model loads into a padded one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import pytest
import safetensors.torch
import torch

from models_lib.checkpoint import load_model, save_model
from models_lib.core import generation, vocab
from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertForPreTraining
from models_lib.families.distilbert import DistilBertForPreTraining
from models_lib.families.electra import ElectraForPreTraining
from models_lib.families.elmo import ElmoConfig, ElmoLanguageModel, char_table
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.roberta import RobertaForPreTraining
from models_lib.families.spanbert import SpanBertForPreTraining
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration
from models_lib.families.tinybert import TinyBertForPreTraining
from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
from models_lib.families.unilm import UniLMForPreTraining
from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel

V = 70  # padded to 128: 58 rows of padding
B, T = 2, 9
SMALL = dict(hidden_size=32, num_heads=2, num_layers=2, intermediate_size=48, hidden_dropout=0.0,
             attention_dropout=0.0)


def test_padded_size_rounds_up_to_a_multiple_of_64():
    assert [vocab.padded_size(n) for n in (1, 64, 65, 70, 30000, 30522, 32128, 50257, 50265)] == \
        [64, 64, 128, 128, 30016, 30528, 32128, 50304, 50304]
    config = presets.get("bert-tiny", vocab_size=30522)
    assert config.vocab_size == 30522 and config.padded_vocab_size == 30528
    assert "padded_vocab_size" not in config.to_dict()  # derived, not a field: saved configs are unchanged
    assert GPTConfig.from_preset("gpt2-small").padded_vocab_size == 50304


# --- one case per family ---------------------------------------------------------------------

def ids(seed: int = 1, low: int = 5) -> torch.Tensor:
    return torch.randint(low, V, (B, T), generator=torch.Generator().manual_seed(seed))


def mlm_labels(input_ids: torch.Tensor) -> torch.Tensor:
    labels = torch.full_like(input_ids, -100)
    labels[:, 1::3] = input_ids[:, 1::3]
    return labels


def encoder_run(model, x):
    """Full logits without labels, then the labelled positions' logits and the loss."""
    full = model(x, torch.ones_like(x), None).mlm_logits
    out = model(x, torch.ones_like(x), None, mlm_labels(x))
    return {"logits": full, "mlm_logits": out.mlm_logits, "loss": out.loss}


def spanbert_run(model, x):
    pairs = torch.tensor([[0, 1, 5, 3, 1], [1, 2, 7, 4, 1], [1, 2, 7, 5, 2]])
    out = model(x, torch.ones_like(x), None, mlm_labels(x), sbo_pairs=pairs, sbo_labels=x[pairs[:, 0], pairs[:, 3]])
    return {"mlm_logits": out.mlm_logits, "sbo_logits": out.sbo_logits, "loss": out.loss}


def electra_run(model, x):
    out = model(x, torch.ones_like(x), None, mlm_labels(x), generator_sampling=False)
    return {"mlm_logits": out.mlm_logits, "rtd_logits": out.rtd_logits, "loss": out.loss}


def gpt_run(model, x):
    out = model(x, labels=x)
    return {"logits": out.logits, "loss": out.loss}


def t5_run(model, x):
    out = model(x, torch.ones_like(x), labels=x.flip(1))
    return {"logits": out.logits, "loss": out.loss}


def elmo_run(model, x):
    forward, backward = model.lm_logits(x)
    return {"forward": forward, "backward": backward, "loss": model(x).loss}


@dataclass
class Case:
    name: str
    build: Callable[[], torch.nn.Module]
    run: Callable[[torch.nn.Module, torch.Tensor], dict[str, torch.Tensor]]


def encoder(preset: str, cls: type, **fields) -> Callable[[], torch.nn.Module]:
    return lambda: cls(presets.get(preset, vocab_size=V, **{**SMALL, **fields}))


def elmo(char_cnn: bool) -> torch.nn.Module:
    config = ElmoConfig.from_dict(dict(vocab_size=V, pad_token_id=0, embedding_dim=16, hidden_size=32, dropout=0.0,
                                       max_chars=8, char_cnn=char_cnn, char_filters=[[1, 8], [2, 8]],
                                       highway_layers=1, tie_embeddings=not char_cnn))
    model = ElmoLanguageModel(config)
    if char_cnn:
        model.set_char_table(char_table([f"w{i}" for i in range(V)], max_chars=8))
    return model


T5_SIZE = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_heads=2, num_layers=2, num_decoder_layers=2,
               dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
GPT_SIZE = dict(vocab_size=V, hidden_size=32, num_heads=2, num_layers=2, max_position_embeddings=16,
                hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0, eos_token_id=1)
XL_SIZE = dict(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48, dropout=0.0,
               attention_dropout=0.0, mem_len=4)

CASES = [
    Case("bert", encoder("bert-tiny", BertForPreTraining), encoder_run),
    Case("roberta", encoder("roberta-tiny", RobertaForPreTraining), encoder_run),
    Case("albert", encoder("albert-tiny", AlbertForPreTraining, embedding_size=16), encoder_run),
    Case("electra", encoder("electra-tiny", ElectraForPreTraining, embedding_size=16), electra_run),
    Case("distilbert", encoder("distilbert-tiny", DistilBertForPreTraining), encoder_run),
    Case("tinybert", encoder("tinybert-tiny", TinyBertForPreTraining), encoder_run),
    Case("spanbert", encoder("spanbert-tiny", SpanBertForPreTraining), spanbert_run),
    Case("unilm", encoder("unilm-tiny", UniLMForPreTraining), encoder_run),
    Case("gpt", lambda: GPTLMHeadModel(GPTConfig(**GPT_SIZE)), gpt_run),
    Case("gpt-untied", lambda: GPTLMHeadModel(GPTConfig(**GPT_SIZE, tie_word_embeddings=False)), gpt_run),
    Case("t5-1.0", lambda: T5ForConditionalGeneration(T5Config(**T5_SIZE)), t5_run),
    Case("t5-1.1", lambda: T5ForConditionalGeneration(T5Config(**T5_SIZE, version="1.1")), t5_run),
    Case("xlnet", lambda: XLNetLMHeadModel(XLNetConfig(**XL_SIZE)), gpt_run),
    Case("transfo-xl", lambda: TransfoXLLMHeadModel(TransfoXLConfig(**XL_SIZE, head_size=16)), gpt_run),
    Case("elmo", lambda: elmo(char_cnn=False), elmo_run),
    Case("elmo-char-cnn", lambda: elmo(char_cnn=True), elmo_run),
]


def pair(case: Case, monkeypatch, seed: int = 3) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(padded, unpadded) models of one family from one seed, in eval mode."""
    torch.manual_seed(seed)
    padded = case.build().eval()
    with monkeypatch.context() as m:
        m.setattr(vocab, "PAD_MULTIPLE", 1)
        torch.manual_seed(seed)
        reference = case.build().eval()
    return padded, reference


def test_every_family_with_a_vocabulary_has_a_case():
    from models_lib.checkpoint import FAMILIES

    covered = {type(case.build()).__name__ for case in CASES}
    assert {family.model_classes[0].__name__ for family in FAMILIES.values()} <= covered


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_padded_model_equals_the_unpadded_one_from_the_same_seed(case, monkeypatch):
    padded, reference = pair(case, monkeypatch)
    tables = vocab.padded_names(padded)
    assert tables, "the model pads no table"
    assert {rows for _, rows in tables.values()} == {128}
    assert {rows for _, rows in vocab.padded_names(reference).values()} == {V}
    # The same real weights (the padded tables drew what the unpadded ones drew), zero padding.
    ours, theirs = vocab.unpadded_state_dict(padded), reference.state_dict()
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), name
    full = padded.state_dict()
    for name in tables:
        assert full[name].shape[0] == 128 and not full[name][V:].any(), name
    # The same outputs, with exactly vocab_size columns.
    x = ids()
    got, want = case.run(padded, x), case.run(reference, x)
    for key, value in want.items():
        assert got[key].shape == value.shape, key
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-5, msg=key)
    assert all(v.shape[-1] == V for k, v in got.items() if k not in ("loss", "rtd_logits"))
    assert all(bool(torch.isfinite(v).all()) for v in got.values())  # no -inf padding scores leak out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_padding_rows_get_no_gradient_and_real_rows_the_unpadded_ones(case, monkeypatch):
    padded, reference = pair(case, monkeypatch)
    x = ids(seed=2)
    for model in (padded, reference):
        model.train()
        case.run(model, x)["loss"].backward()
    grads = dict(reference.named_parameters())
    for name, p in padded.named_parameters():
        if p.grad is None:
            continue
        V_, rows = vocab.padded_names(padded).get(name, (None, p.shape[0]))
        if V_ is not None:
            assert not p.grad[V_:].any(), name
        torch.testing.assert_close(p.grad[:grads[name].shape[0]], grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("bert", "gpt-untied", "t5-1.1", "elmo")],
                         ids=lambda c: c.name)
def test_adamw_with_weight_decay_keeps_the_padding_zero_and_trains_as_unpadded(case, monkeypatch):
    padded, reference = pair(case, monkeypatch)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in (padded, reference)]
    for step in range(3):
        x = ids(seed=10 + step)
        for model, optimizer in zip((padded, reference), optimizers):
            model.train()
            optimizer.zero_grad()
            case.run(model, x)["loss"].backward()
            optimizer.step()
    full = padded.state_dict()
    for name, (V_, _) in vocab.padded_names(padded).items():
        assert not full[name][V_:].any(), name
    theirs = reference.state_dict()
    for name, tensor in vocab.unpadded_state_dict(padded).items():
        torch.testing.assert_close(tensor, theirs[name], rtol=1e-4, atol=1e-5, msg=name)


def test_loading_an_unpadded_state_pads_it_and_other_sizes_still_fail(monkeypatch):
    case = CASES[0]
    padded, reference = pair(case, monkeypatch, seed=4)
    fresh = case.build().eval()
    fresh.load_state_dict(reference.state_dict())  # vocab_size rows -> padded with zero rows
    for name, tensor in padded.state_dict().items():
        assert torch.equal(tensor, fresh.state_dict()[name]), name
    wrong = {**reference.state_dict(), "bert.embeddings.word.weight": torch.zeros(V + 1, 32)}
    with pytest.raises(RuntimeError, match="size mismatch"):
        fresh.load_state_dict(wrong)


# --- generation --------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [lambda: GPTLMHeadModel(GPTConfig(**GPT_SIZE)),
                                   lambda: T5ForConditionalGeneration(T5Config(**T5_SIZE))], ids=["gpt", "t5"])
def test_sampling_at_a_high_temperature_never_emits_a_padding_id(build):
    torch.manual_seed(0)
    model = build().eval()
    prompt = ids()[:, :4]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        step_logits = model.generation_step(*model.start_generation(prompt))[0]
    assert step_logits.shape == (B, V)
    # At temperature 1000 every column is almost equally likely: 58 padding columns out of 128
    # would be drawn about half the time if they were there.
    out = model.generate(prompt.repeat(8, 1), do_sample=True, temperature=1000.0, max_new_tokens=10,
                         eos_token_id=None, generator=g)
    new = out[:, 4:] if isinstance(model, GPTLMHeadModel) else out[:, 1:]
    assert new.numel() >= 80 and int(new.max()) < V
    assert len(set(new.flatten().tolist())) > V // 2  # it did sample widely over the real vocabulary


class WideLogits(torch.nn.Module):
    """A stand-in model whose logits still carry padding columns (much the largest)."""

    config = GPTConfig(**GPT_SIZE)

    def start_generation(self, input_ids, attention_mask=None):
        return None, input_ids

    def generation_step(self, state, tokens):
        logits = torch.zeros(tokens.shape[0], 128)
        logits[:, V:] = 50.0
        return logits, state

    def reorder_generation_state(self, state, index):
        return state


@pytest.mark.parametrize("options", [dict(), dict(do_sample=True, temperature=5.0), dict(num_beams=3)],
                         ids=["greedy", "sampling", "beams"])
def test_generate_cuts_logits_to_the_vocabulary_whatever_the_model_returns(options):
    out = generation.generate(WideLogits(), torch.zeros(2, 1, dtype=torch.long), max_new_tokens=6,
                              generator=torch.Generator().manual_seed(0) if options.get("do_sample") else None,
                              **options)
    assert out.shape[1] > 1 and int(out.max()) < V


# --- checkpoints and exports ---------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_checkpoints_hold_vocab_size_rows_and_old_unpadded_ones_load(case, monkeypatch, tmp_path):
    padded, reference = pair(case, monkeypatch, seed=5)
    save_model(padded, tmp_path / "new")
    stored = safetensors.torch.load_file(str(tmp_path / "new" / "model.safetensors"))
    names = vocab.padded_names(padded)
    assert any(name in stored for name in names)
    for name in names:
        if name in stored:  # (a tied or shared name is stored once)
            assert stored[name].shape[0] == V, name
    assert json.loads((tmp_path / "new" / "model_config.json").read_text())["config"]["vocab_size"] == V
    with monkeypatch.context() as m:  # a checkpoint written before the padding
        m.setattr(vocab, "PAD_MULTIPLE", 1)
        save_model(reference, tmp_path / "old")
    x = ids(seed=6)
    want = case.run(padded, x)
    for folder in ("new", "old"):
        again = load_model(tmp_path / folder)
        for name, tensor in padded.state_dict().items():
            assert torch.equal(tensor, again.state_dict()[name]), (folder, name)
        got = case.run(again, x)
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-5, msg=f"{folder} {key}")


HF_CASES = [c for c in CASES if c.name in ("bert", "roberta", "albert", "electra", "distilbert", "gpt",
                                           "gpt-untied", "t5-1.0", "t5-1.1", "xlnet")]


@pytest.mark.parametrize("case", HF_CASES, ids=[c.name for c in HF_CASES])
def test_transformers_exports_hold_vocab_size_rows_and_load_there(case, monkeypatch, tmp_path):
    transformers = pytest.importorskip("transformers")
    from models_lib import hf

    padded, reference = pair(case, monkeypatch, seed=7)
    hf.to_pretrained(padded, tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["vocab_size"] == V
    stored = safetensors.torch.load_file(str(tmp_path / "ours" / "model.safetensors"))
    with monkeypatch.context() as m:  # what the same model wrote before the padding
        m.setattr(vocab, "PAD_MULTIPLE", 1)
        hf.to_pretrained(reference, tmp_path / "before")
    before = safetensors.torch.load_file(str(tmp_path / "before" / "model.safetensors"))
    assert stored.keys() == before.keys()
    for name, tensor in stored.items():
        assert torch.equal(tensor, before[name]), name
    theirs, info = getattr(transformers, config["architectures"][0]).from_pretrained(tmp_path / "ours",
                                                                                   output_loading_info=True)
    assert not info["mismatched_keys"] and not info["missing_keys"]
    assert theirs.config.vocab_size == V and theirs.get_input_embeddings().weight.shape[0] == V
    again = hf.from_pretrained(tmp_path / "ours")
    for name, tensor in padded.state_dict().items():
        if name.startswith("generator."):
            continue  # an ELECTRA export holds the discriminator only
        key = name.removeprefix("discriminator.")
        assert torch.equal(tensor, again.state_dict()[key]), name
