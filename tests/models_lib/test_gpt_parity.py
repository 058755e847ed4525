"""Parity with transformers' GPT-2 on tiny random weights: import, logits, greedy generation, export."""
from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402
from models_lib.core import vocab  # noqa: E402
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel  # noqa: E402

VOCAB, PAD, EOS = 100, 0, 2
TOL = dict(atol=1e-4, rtol=0)


def hf_config(**overrides) -> "transformers.GPT2Config":
    fields = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=EOS,
                  eos_token_id=EOS, pad_token_id=PAD)
    return transformers.GPT2Config(**{**fields, **overrides})


def randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Non-trivial values everywhere (LayerNorm weights away from 1, biases away from 0); eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.2 * noise if ".ln_" in name and name.endswith("weight") else 0.1 * noise)
    vocab.zero_padding(model)  # our models' vocabulary padding rows stay zero (models_lib.core.vocab)
    return model.eval()


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def pair(request, tmp_path_factory):
    theirs = randomise(transformers.GPT2LMHeadModel(hf_config(tie_word_embeddings=request.param)), seed=7)
    folder = tmp_path_factory.mktemp("hf_gpt2")
    theirs.save_pretrained(folder)
    ours = hf.from_pretrained(folder)
    return ours, theirs


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, the second left-padded by 4."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, VOCAB, (2, 10), generator=g)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, :4] = 0
    ids[mask == 0] = PAD
    return ids, mask


def test_import_reads_every_tensor(pair):
    ours, theirs = pair
    assert isinstance(ours, GPTLMHeadModel) and ours.missing_keys == [] and ours.unexpected_keys == []
    c = ours.config
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size, c.max_position_embeddings) == (64, 2, 4,
                                                                                                        256, 64)
    assert c.norm_placement == "pre" and c.eos_token_id == EOS and c.pad_token_id == PAD
    assert c.tie_word_embeddings == theirs.config.tie_word_embeddings


def test_logits_match(pair):
    ours, theirs = pair
    ids, mask = prompts()
    with torch.no_grad():
        full = ours(ids[:1]).logits
        torch.testing.assert_close(full, theirs(ids[:1]).logits, **TOL)
        # Left padding: transformers takes the positions it is given; ours counts them from the mask.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        a = ours(ids, attention_mask=mask).logits
        b = theirs(ids, attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real], **TOL)
    assert (a - full.mean()).abs().max() > 1e-2  # the logits are not trivially flat


def test_greedy_generation_matches_token_for_token(pair):
    ours, theirs = pair
    ids, mask = prompts()
    options = dict(max_new_tokens=8, do_sample=False, num_beams=1, eos_token_id=EOS, pad_token_id=PAD)
    expected = theirs.generate(ids, attention_mask=mask, **options)
    got = ours.generate(ids, attention_mask=mask, **options)
    assert got.tolist() == expected.tolist()
    assert len(set(got[:, 10:].flatten().tolist())) > 2  # a real continuation, not one repeated token


def test_export_loads_in_transformers_with_the_same_logits(pair, tmp_path):
    ours, theirs = pair
    hf.to_pretrained(ours, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt2"
    back, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids, _ = prompts()
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids).logits, theirs(ids).logits, rtol=0, atol=1e-5)
    again = hf.from_pretrained(tmp_path)  # and back into ours: the same model
    assert again.config == ours.config
    for key, value in ours.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


def test_bare_gpt2_model_folder_imports(tmp_path):
    theirs = randomise(transformers.GPT2Model(hf_config()), seed=11)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    assert ours.missing_keys == []  # tied: the output layer is the word embeddings
    ids, _ = prompts()
    with torch.no_grad():
        torch.testing.assert_close(ours.encode(ids[:1]), theirs(ids[:1]).last_hidden_state, **TOL)


def test_gpt1_style_model_cannot_be_exported(tmp_path):
    model = GPTLMHeadModel(GPTConfig.from_preset("gpt-tiny", vocab_size=VOCAB, hidden_size=32, norm_placement="post"))
    with pytest.raises(ValueError, match="GPT-2 format is pre-norm"):
        hf.to_pretrained(model, tmp_path)


def test_unsupported_gpt2_variants_are_refused(tmp_path):
    transformers.GPT2LMHeadModel(hf_config(scale_attn_by_inverse_layer_idx=True)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="inverse layer index"):
        hf.from_pretrained(tmp_path)


def test_multiple_choice_exports_as_double_heads_with_the_same_choice_logits(pair, tmp_path):
    """GPT-1's multiple choice (GPTForMultipleChoice) is GPT2DoubleHeadsModel: the start, delimiter and
    extract rows appended to wte, the head as multiple_choice_head.summary, mc_token_ids = the extract
    token's position."""
    from models_lib.families.downstream import TaskConfig
    from models_lib.families.gpt_tasks import GPTForMultipleChoice

    ours_lm, _ = pair
    ours = GPTForMultipleChoice.from_lm(ours_lm, TaskConfig("multiple_choice", 1))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (ours.embeddings.special.weight, ours.classifier.weight, ours.classifier.bias):
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    ours.eval()
    hf.to_pretrained(ours, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["GPT2DoubleHeadsModel"] and config["vocab_size"] == VOCAB + 3
    theirs, info = transformers.GPT2DoubleHeadsModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    theirs.eval()
    S, D, E = ours.start_id, ours.delimiter_id, ours.extract_id
    rows = [[[S, 5, 6, 7, D, 8, E], [S, 5, 6, 7, D, 9, 10, 11, E], [S, 5, 6, 7, D, 12, E]],
            [[S, 20, D, 21, 22, E], [S, 20, D, 23, E], [S, 20, D, 24, 25, 26, 27, E]]]
    ids = torch.full((2, 3, 9), PAD, dtype=torch.long)  # right-padded: the extract state never sees padding
    mask = torch.zeros_like(ids)
    for b, example in enumerate(rows):
        for k, row in enumerate(example):
            ids[b, k, :len(row)], mask[b, k, :len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        mine = ours(ids, mask).logits
        out = theirs(input_ids=ids, mc_token_ids=mask.sum(-1) - 1)
    torch.testing.assert_close(out.mc_logits, mine, **TOL)
    assert mine.std() > 1e-2  # the choices' scores differ
    with torch.no_grad():  # the LM head agrees on the real vocabulary
        lm = ours.logits(ours.encode(ids.view(6, 9)))
    real = mask.view(6, 9).bool()
    torch.testing.assert_close(out.logits.view(6, 9, -1)[..., :VOCAB][real], lm[real], **TOL)
