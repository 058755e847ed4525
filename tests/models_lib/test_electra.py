"""ELECTRA's joint pre-training: shared embeddings, sampled replacements, RTD labels and loss."""
from __future__ import annotations

import pytest
import torch

from models_lib.families import presets
from models_lib.families.electra import ElectraForPreTraining
from tests.models_lib.helpers import padded_batch

V, MASK = 101, 4


def electra(**fields) -> ElectraForPreTraining:
    torch.manual_seed(0)
    config = presets.get("electra-tiny", **{"vocab_size": V, "hidden_size": 64, "num_heads": 4,
                                            "max_position_embeddings": 40, "embedding_size": 32, **fields})
    return ElectraForPreTraining(config).eval()


def masked_batch():
    """Padded batch with a few positions masked: input [MASK], label = the original token."""
    ids, mask, types = padded_batch(V)
    labels = torch.full_like(ids, -100)
    for b, t in [(0, 1), (0, 6), (1, 2), (1, 7), (2, 3)]:
        labels[b, t] = ids[b, t]
        ids[b, t] = MASK
    return ids, mask, types, labels


def test_generator_and_discriminator_share_one_embeddings_module():
    model = electra()
    d, g = model.discriminator.backbone, model.generator.backbone
    assert g.embeddings is d.embeddings
    for name in ("word", "position", "token_type", "norm"):
        assert all(a is b for a, b in zip(getattr(g.embeddings, name).parameters(),
                                          getattr(d.embeddings, name).parameters()))
    # The projection to each model's width is its own: E=32 -> 64 (D) and 32 -> 16 (G, 1/4 of D).
    assert d.embeddings_project.weight.shape == (64, 32) and g.embeddings_project.weight.shape == (16, 32)
    # Parameters are counted once: the generator adds no second embedding table.
    shared = sum(p.numel() for p in d.embeddings.parameters())
    total = sum(p.numel() for p in model.parameters())
    assert total == (sum(p.numel() for p in model.discriminator.parameters())
                     + sum(p.numel() for p in model.generator.parameters()) - shared)


def test_a_sample_equal_to_the_original_counts_as_original():
    model = electra()
    ids, mask, types, labels = masked_batch()
    original = torch.where(labels != -100, labels, ids)
    # Make the generator always say the token of position (0, 1): a correct guess there, a
    # replacement wherever the original differs.
    favourite = int(labels[0, 1])
    with torch.no_grad():
        model.generator.mlm_head.bias[favourite] = 1e4
    out = model(ids, mask, types, labels, generator_sampling=False)
    assert out.sampled_ids.tolist() == [favourite] * 5
    assert torch.equal(out.corrupted_ids[labels == -100], ids[labels == -100])  # unmasked inputs unchanged
    expected = ((out.corrupted_ids != original) & mask.bool()).long()
    assert torch.equal(out.rtd_labels, expected)
    assert out.rtd_labels[0, 1] == 0  # sampled == original
    assert int(out.rtd_positives) == int((labels[labels != -100] != favourite).sum())


def test_loss_is_mlm_plus_fifty_times_rtd_and_counts_add_up():
    model = electra()
    ids, mask, types, labels = masked_batch()
    out = model(ids, mask, types, labels, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out.loss, out.mlm_loss + 50.0 * out.rtd_loss)
    again = model(ids, mask, types, labels, rtd_weight=1.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(again.loss, again.mlm_loss + again.rtd_loss)
    # RTD loss: mean BCE over the non-pad tokens only.
    real = mask.bool()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.rtd_logits[real], out.rtd_labels[real].float())
    torch.testing.assert_close(out.rtd_loss, expected)
    predicted = (out.rtd_logits > 0) & real
    assert int(out.rtd_tokens) == int(real.sum())
    assert int(out.rtd_predicted_positives) == int(predicted.sum())
    assert int(out.rtd_true_positives) == int((predicted & out.rtd_labels.bool()).sum())
    assert int(out.rtd_correct) == int(((predicted == out.rtd_labels.bool()) & real).sum())
    assert out.mlm_logits.shape == (5, V) and out.rtd_logits.shape == ids.shape


def test_sampling_is_reproducible_with_a_generator():
    model = electra()
    ids, mask, types, labels = masked_batch()
    a = model(ids, mask, types, labels, generator=torch.Generator().manual_seed(3)).sampled_ids
    b = model(ids, mask, types, labels, generator=torch.Generator().manual_seed(3)).sampled_ids
    assert torch.equal(a, b)


def test_the_rtd_loss_does_not_reach_the_generator_but_reaches_the_shared_embeddings():
    model = electra(hidden_dropout=0.0).train()
    ids, mask, types, labels = masked_batch()
    model(ids, mask, types, labels).rtd_loss.backward()
    generator_layers = [p.grad for p in model.generator.backbone.encoder.parameters()]
    assert all(g is None or not g.any() for g in generator_layers)
    assert model.discriminator.backbone.embeddings.word.weight.grad.abs().sum() > 0


def test_mlm_labels_are_required():
    with pytest.raises(ValueError, match="needs mlm_labels"):
        electra()(torch.randint(5, V, (1, 5)))


def test_a_sample_is_the_token_whose_share_of_the_cdf_holds_the_uniform():
    """Inverse-CDF sampling: with probabilities (0.1, 0.6, 0, 0.3), u in [0, 0.1) picks token 0,
    [0.1, 0.7) token 1, [0.7, 1) token 3; the token of probability 0 never, not even at its
    boundary. Without uniforms, a seeded generator draws them (reproducible, as before)."""
    from models_lib.families.electra import sample_tokens

    logits = torch.tensor([0.1, 0.6, 0.0, 0.3]).log().expand(7, 4)
    uniforms = torch.tensor([0.0, 0.09, 0.1001, 0.69, 0.7001, 0.9999, 0.5])
    assert sample_tokens(logits, uniforms=uniforms).tolist() == [0, 0, 1, 1, 3, 3, 1]
    assert sample_tokens(logits, False, uniforms=uniforms).tolist() == [1] * 7  # argmax
    drawn = torch.rand(7, generator=torch.Generator().manual_seed(5))
    assert torch.equal(sample_tokens(logits, generator=torch.Generator().manual_seed(5)),
                       sample_tokens(logits, uniforms=drawn))
    many = sample_tokens(logits[:1].expand(20_000, 4), generator=torch.Generator().manual_seed(0))
    shares = torch.bincount(many, minlength=4).float() / many.numel()
    torch.testing.assert_close(shares, torch.tensor([0.1, 0.6, 0.0, 0.3]), atol=0.02, rtol=0)


def test_labelled_positions_and_uniforms_given_make_the_same_step_as_the_masks():
    """What a training step gives the model (the labelled positions' flat indices, uniforms drawn
    from its sampler) computes what the padded path computes from the masks and the generator."""
    model = electra()
    ids, mask, types, labels = masked_batch()
    positions = (labels != -100).flatten().nonzero().squeeze(1)
    uniforms = torch.rand(positions.numel(), generator=torch.Generator().manual_seed(3))
    given = model(ids, mask, types, labels, uniforms=uniforms, mlm_positions=positions)
    masks = model(ids, mask, types, labels, generator=torch.Generator().manual_seed(3))
    for name in ("sampled_ids", "corrupted_ids", "rtd_labels", "mlm_targets", "rtd_true_positives", "rtd_tokens"):
        assert torch.equal(getattr(given, name), getattr(masks, name)), name
    for name in ("loss", "mlm_loss", "rtd_loss", "rtd_logits", "mlm_logits"):
        torch.testing.assert_close(getattr(given, name), getattr(masks, name), msg=name)
