"""Parity with transformers' XLNetLMHeadModel on tiny random weights: import, both streams'
logits (perm_mask + target_mapping), memory, padding and segments, export and a round trip."""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from models_lib import hf  # noqa: E402
from models_lib.checkpoint import load_model, save_model  # noqa: E402
from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel  # noqa: E402
from tests.models_lib.helpers import randomise  # noqa: E402

VOCAB = 120
TOL = dict(atol=1e-4, rtol=0)


def hf_config(**overrides) -> "transformers.XLNetConfig":
    fields = dict(vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4, d_inner=128, mem_len=6,
                  pad_token_id=5, eos_token_id=2, bos_token_id=1)
    return transformers.XLNetConfig(**{**fields, **overrides})


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    theirs = randomise(transformers.XLNetLMHeadModel(hf_config()), seed=11)
    folder = tmp_path_factory.mktemp("hf_xlnet")
    theirs.save_pretrained(folder)
    return hf.from_pretrained(folder), theirs


def permutation_inputs(B: int = 2, T: int = 10, M: int = 3, seed: int = 4):
    """Random ids and segments, a random factorisation order per row, its last M positions as targets."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, VOCAB, (B, T), generator=g)
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:] = 1
    perm_mask = torch.zeros(B, T, T)
    mapping = torch.zeros(B, M, T)
    for b in range(B):
        order = torch.randperm(T, generator=g)
        rank = torch.empty(T, dtype=torch.long)
        rank[order] = torch.arange(T)
        perm_mask[b] = (rank[None, :] >= rank[:, None]).float()  # i sees j only if j comes before i
        for m, pos in enumerate(order[-M:]):
            mapping[b, m, pos] = 1.0
    labels = torch.einsum("bmt,bt->bm", mapping, ids.float()).long()
    return ids, types, perm_mask, mapping, labels


def test_import_reads_every_tensor(pair):
    ours, theirs = pair
    assert isinstance(ours, XLNetLMHeadModel) and ours.missing_keys == [] and ours.unexpected_keys == []
    c = ours.config
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size, c.mem_len) == (64, 2, 4, 128, 6)
    assert c.attn_type == "bi"
    padding = (c.padded_vocab_size - c.vocab_size) * (c.hidden_size + 1)  # our table's and bias's padded rows
    assert sum(p.numel() for p in ours.parameters()) == c.count_params(embeddings=True) == \
        sum(p.numel() for p in theirs.parameters()) + padding


def test_causal_attention_matches(tmp_path):
    """attn_type "uni" (a causal mask, memory included). transformers cannot add a padding or
    permutation mask to its causal one (a broadcasting error), so plain ids only."""
    theirs = randomise(transformers.XLNetLMHeadModel(hf_config(attn_type="uni")), seed=12)
    theirs.save_pretrained(tmp_path)
    ours = hf.from_pretrained(tmp_path)
    ids = torch.randint(6, VOCAB, (2, 7))
    with torch.no_grad():
        a, b = ours(ids, use_mems=True), theirs(ids, use_mems=True)
        torch.testing.assert_close(a.logits, b.logits, **TOL)
        a2 = ours(ids.flip(1), mems=a.mems).logits
        b2 = theirs(ids.flip(1), mems=b.mems, use_mems=False).logits
    torch.testing.assert_close(a2, b2, **TOL)


def test_content_stream_logits_match(pair):
    ours, theirs = pair
    ids, types, *_ = permutation_inputs()
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, token_type_ids=types).logits
        b = theirs(ids, attention_mask=mask, token_type_ids=types, use_mems=False).logits
    torch.testing.assert_close(a, b, **TOL)


def test_query_stream_logits_and_loss_match(pair):
    ours, theirs = pair
    ids, types, perm, mapping, labels = permutation_inputs()
    with torch.no_grad():
        a = ours(ids, token_type_ids=types, perm_mask=perm, target_mapping=mapping, labels=labels)
        b = theirs(ids, token_type_ids=types, perm_mask=perm, target_mapping=mapping, labels=labels, use_mems=False)
    assert a.logits.shape == (2, 3, VOCAB)
    torch.testing.assert_close(a.logits, b.logits, **TOL)
    torch.testing.assert_close(a.loss, b.loss, **TOL)


def test_target_positions_give_the_mappings_logits_and_gradients(pair):
    """The fast path (the targets as positions, M query rows) is the one-hot mapping's computation."""
    ours, _ = pair
    ids, types, perm, mapping, labels = permutation_inputs(seed=8)
    mems = ours(ids.flip(1), use_mems=True).mems
    kwargs = dict(token_type_ids=types, perm_mask=perm, labels=labels, mems=mems)
    a = ours(ids, target_mapping=mapping, **kwargs)
    a.loss.backward()
    grads = {n: p.grad.clone() for n, p in ours.named_parameters()}
    ours.zero_grad()
    b = ours(ids, target_positions=mapping.argmax(-1), **kwargs)
    b.loss.backward()
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=0)
    for n, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-5, rtol=1e-4, msg=n)
    ours.zero_grad()


def test_memory_matches(pair):
    """A second segment read with the first one's memory: the same mems and the same logits."""
    ours, theirs = pair
    ids, types, perm, mapping, _ = permutation_inputs(T=8, seed=9)
    first, second = ids, torch.flip(ids, dims=[1])
    with torch.no_grad():
        mine = ours(first, use_mems=True).mems
        their = theirs(first, use_mems=True).mems
        assert len(mine) == 2 and mine[0].shape == (2, 6, 64)
        for m, t in zip(mine, their):
            torch.testing.assert_close(m, t.transpose(0, 1), **TOL)
        a = ours(second, token_type_ids=types, perm_mask=perm, target_mapping=mapping, mems=mine).logits
        b = theirs(second, token_type_ids=types, perm_mask=perm, target_mapping=mapping, mems=their,
                   use_mems=False).logits
        without = ours(second, token_type_ids=types, perm_mask=perm, target_mapping=mapping).logits
    torch.testing.assert_close(a, b, **TOL)
    assert not torch.allclose(a, without, atol=1e-3)  # the memory is read


def test_export_loads_in_transformers_and_round_trips(pair, tmp_path):
    ours, _ = pair
    ids, types, perm, mapping, _ = permutation_inputs(seed=5)
    hf.to_pretrained(ours, tmp_path / "out")
    back = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "out").eval()
    again = hf.from_pretrained(tmp_path / "out")
    save_model(again, tmp_path / "native")
    native = load_model(tmp_path / "native")
    with torch.no_grad():
        want = ours(ids, token_type_ids=types, perm_mask=perm, target_mapping=mapping).logits
        torch.testing.assert_close(back(ids, token_type_ids=types, perm_mask=perm, target_mapping=mapping,
                                        use_mems=False).logits, want, **TOL)
        for model in (again, native):
            torch.testing.assert_close(model(ids, token_type_ids=types, perm_mask=perm,
                                             target_mapping=mapping).logits, want, atol=0, rtol=0)
    assert native.config == ours.config


def test_untied_output_layer_round_trips(tmp_path):
    ours = randomise(XLNetLMHeadModel(XLNetConfig.from_preset("xlnet-tiny", vocab_size=VOCAB,
                                                              tie_word_embeddings=False)), seed=3)
    hf.to_pretrained(ours, tmp_path)
    theirs = transformers.XLNetLMHeadModel.from_pretrained(tmp_path).eval()
    ids = torch.randint(6, VOCAB, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids, use_mems=False).logits, **TOL)
