"""Parity with transformers where the LayerNorm epsilon shows.

The other parity tests use weights of std ~0.1, so every LayerNorm input has a variance near
1e-2 or more and an eps of 1e-12 and one of 1e-5 give the same numbers to 1e-4. Here the
embeddings, biases and LayerNorm weights are ~1e-3, so every LayerNorm (embedding, attention,
feed-forward, MLM transform; GPT-2's ln_1, ln_2, ln_f) sees a variance of ~1e-6, where
x / sqrt(var + eps) depends on eps at the 1e-5 level by a factor of ~2. Each test also checks
that transformers itself, on the same weights with another eps, gives clearly other numbers:
the inputs really do make eps visible.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402

VOCAB, T = 97, 12


def shrink(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weight matrices of std 0.1; embeddings, biases and LayerNorm weights of size ~1e-3 (BERT's
    output bias ~1e-6)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            is_norm = "LayerNorm" in name or ".ln_" in name
            if name == "cls.predictions.bias":  # small, so that the MLM logits show the transform's norm
                p.copy_(1e-6 * noise)
            elif is_norm and name.endswith("weight"):
                p.copy_(1e-3 * (1.0 + 0.2 * noise))
            elif name.endswith("bias") or "embeddings" in name or name.startswith(("wte", "wpe")) \
                    or ".wte." in name or ".wpe." in name:
                p.copy_(1e-3 * noise)
            else:
                p.copy_(0.1 * noise)
    return model.eval()


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


def variances_seen(model: torch.nn.Module, run) -> list[float]:
    """The mean input variance of every nn.LayerNorm of `model` while `run()` executes."""
    seen: list[float] = []
    hooks = [m.register_forward_pre_hook(lambda _m, args: seen.append(float(args[0].float().var(-1).mean())))
             for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def inputs():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (3, T), generator=g)
    token_type_ids = torch.zeros(3, T, dtype=torch.long)
    token_type_ids[:, T // 2:] = 1
    return input_ids, torch.ones(3, T, dtype=torch.long), token_type_ids


# ---------------------------------------------------------------------------- BERT
def bert_config(eps: float) -> "transformers.BertConfig":
    return transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=128, max_position_embeddings=32, type_vocab_size=2,
                                   layer_norm_eps=eps)


# 1e-12 is BERT's own; 1e-7 checks the value is read from the folder, not assumed.
@pytest.mark.parametrize("eps", [1e-12, 1e-7])
def test_bert_parity_sees_the_layernorm_eps(tmp_path, eps):
    theirs = shrink(transformers.BertForPreTraining(bert_config(eps)), seed=2)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert ours.config.layer_norm_eps == eps
    input_ids, attention_mask, token_type_ids = inputs()

    def run(model):
        return model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     output_hidden_states=True)

    assert max(variances_seen(theirs, lambda: run(theirs))) < 1e-5  # every LayerNorm input is tiny
    assert len(variances_seen(ours, lambda: ours(input_ids, attention_mask, token_type_ids))) == 2 * 2 + 2
    with torch.no_grad():
        ref = run(theirs)
        states = ours.encode(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
        out = ours(input_ids, attention_mask, token_type_ids)
    assert len(states) == len(ref.hidden_states) == 3
    for i, (got, expected) in enumerate(zip(states, ref.hidden_states)):
        assert relative_error(got, expected) < 1e-4, i
    assert relative_error(out.mlm_logits, ref.prediction_logits) < 1e-4
    assert relative_error(out.nsp_logits, ref.seq_relationship_logits) < 1e-4

    # The same weights with eps 1e-5 (RoBERTa's, GPT-2's) give other hidden states.
    other = transformers.BertForPreTraining(bert_config(1e-5))
    other.load_state_dict(theirs.state_dict())
    with torch.no_grad():
        changed = run(other.eval())
    assert relative_error(changed.hidden_states[-1], ref.hidden_states[-1]) > 0.1


# ---------------------------------------------------------------------------- GPT-2
def gpt2_config(eps: float) -> "transformers.GPT2Config":
    return transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=32,
                                   layer_norm_epsilon=eps, bos_token_id=2, eos_token_id=2, pad_token_id=0)


# 1e-5 is GPT-2's own; 1e-3 checks the value is read from the folder.
@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_gpt2_parity_sees_the_layernorm_eps(tmp_path, eps):
    theirs = shrink(transformers.GPT2LMHeadModel(gpt2_config(eps)), seed=4)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert ours.config.layer_norm_eps == eps
    input_ids = inputs()[0]
    assert max(variances_seen(theirs, lambda: theirs(input_ids))) < 3e-5  # the residual stream grows a little
    with torch.no_grad():
        ref = theirs(input_ids, output_hidden_states=True)
        states = ours.encode(input_ids, output_hidden_states=True)
        logits = ours(input_ids).logits
    assert len(states) == len(ref.hidden_states) == 3
    for i, (got, expected) in enumerate(zip(states, ref.hidden_states)):
        assert relative_error(got, expected) < 1e-4, i
    assert relative_error(logits, ref.logits) < 1e-4

    other = transformers.GPT2LMHeadModel(gpt2_config(eps * 10 if eps < 1e-4 else eps / 100))
    other.load_state_dict(theirs.state_dict())
    with torch.no_grad():
        changed = other.eval()(input_ids, output_hidden_states=True)
    assert relative_error(changed.hidden_states[-1], ref.hidden_states[-1]) > 0.1
