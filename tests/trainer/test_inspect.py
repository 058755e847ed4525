"""The masking inspector: real collated batches of a run's data, each token with its role."""
from __future__ import annotations

import pytest

from trainer.errors import InferenceError
from trainer.inference.inspection import sample_batch


def test_a_batch_shows_each_token_with_its_role_segment_and_pair_label(tokenizer_dir, make_config):
    config = make_config(objectives=["mlm", "nsp"]).to_dict()
    examples = sample_batch(config, tokenizer_dir, n_examples=4, seed=0)
    assert len(examples) == 4
    for ex in examples:
        tokens = ex["tokens"]
        assert tokens[0]["token"] == "[CLS]" and tokens[0]["role"] == "special" and tokens[-1]["token"] == "[SEP]"
        segments = [t["segment"] for t in tokens]
        assert segments == sorted(segments) and set(segments) == {0, 1}  # A then B
        assert ex["pair"]["task"] == "nsp" and ex["pair"]["meaning"] in ("IsNext", "NotNext")
        assert ex["electra"] is None and sum(ex["counts"].values()) == len(tokens)
        for t in tokens:
            if t["role"] == "masked":
                assert t["token"] == "[MASK]" and t["original"] != "[MASK]"
            elif t["role"] == "random":
                assert t["token"] != t["original"]
            elif t["role"] in ("kept", "none", "special"):
                assert t["token"] == t["original"]
    assert sample_batch(config, tokenizer_dir, n_examples=4, seed=0) == examples  # same seed, same batch
    assert sample_batch(config, tokenizer_dir, n_examples=4, seed=1) != examples


def test_the_80_10_10_roles_all_appear_over_a_few_batches(tokenizer_dir, make_config):
    config = make_config(objectives=["mlm"]).to_dict()
    counts: dict[str, int] = {}
    for seed in range(3):
        for ex in sample_batch(config, tokenizer_dir, n_examples=8, seed=seed):
            assert ex["pair"] is None and {t["segment"] for t in ex["tokens"]} == {0}
            for role, n in ex["counts"].items():
                counts[role] = counts.get(role, 0) + n
    selected = counts["masked"] + counts["random"] + counts["kept"]
    assert counts["masked"] / selected == pytest.approx(0.8, abs=0.08)
    assert counts["random"] > 0 and counts["kept"] > 0
    assert selected / (selected + counts["none"]) == pytest.approx(0.15, abs=0.02)


def test_adjacent_selected_tokens_share_a_span_id(tokenizer_dir, make_config):
    examples = sample_batch(make_config(objectives=["mlm"], mask_prob=0.5).to_dict(), tokenizer_dir, n_examples=2)
    spans = [t for ex in examples for t in ex["tokens"] if t["span"] is not None]
    assert spans and all(t["role"] in ("masked", "random", "kept") for t in spans)


def test_what_cannot_be_shown_says_why(tokenizer_dir, make_config, monkeypatch):
    config = make_config().to_dict()
    with pytest.raises(InferenceError, match="between 1 and 16 examples"):
        sample_batch(config, tokenizer_dir, n_examples=0)
    with pytest.raises(InferenceError, match="seed must be"):
        sample_batch(config, tokenizer_dir, seed=-1)

    def not_yet(*args, **kwargs):  # a collator factory without a collator for this objective
        raise NotImplementedError

    import trainer.training.data

    monkeypatch.setattr(trainer.training.data, "build_train_stream", not_yet)
    with pytest.raises(InferenceError, match="cannot show MLM \\+ NSP batches yet"):
        sample_batch(config, tokenizer_dir)


def test_spans_come_from_the_collator_when_its_batch_has_them():
    import torch

    from trainer.inference.inspection import _collator_spans

    class SpanBatch:  # SpanBERT's span boundary targets: row, left, right, position, index in span
        input_ids = torch.zeros(2, 8, dtype=torch.long)
        sbo_pairs = torch.tensor([[0, 1, 4, 2, 0], [0, 1, 4, 3, 1], [1, 4, 7, 5, 0], [1, 4, 7, 6, 1],
                                    [1, 0, 2, 1, 0]])

    assert _collator_spans(SpanBatch()) == [{2: 0, 3: 0}, {5: 0, 6: 0, 1: 1}]


def test_for_electra_it_shows_the_generators_samples_and_the_discriminators_verdicts(
        tokenizer_dir, make_family_config, tmp_path):
    from models_lib.checkpoint import save_model
    from trainer.training.steps import build
    from trainer.prep.tokenization import load_tokenizer

    config = make_family_config("electra")
    bundle = load_tokenizer(tokenizer_dir)
    model, _ = build(config, vocab_size=bundle.vocab_size, pad_id=bundle.pad_id, device="cpu")
    save_model(model, tmp_path / "ckpt")

    examples = sample_batch(config.to_dict(), tokenizer_dir, n_examples=3, seed=0, checkpoint_dir=tmp_path / "ckpt")
    for ex in examples:
        view = ex["electra"]
        selected = [t for t, tok in enumerate(ex["tokens"]) if tok["role"] in ("masked", "random", "kept")]
        # One generator sample per selected token, at its position, of the token it replaced.
        assert [g["position"] for g in view["generator"]] == selected
        assert [g["original"] for g in view["generator"]] == [ex["tokens"][t]["original"] for t in selected]
        assert all(g["replaced"] == (g["sampled"] != g["original"]) for g in view["generator"])
        # A verdict for every real token, as a probability.
        assert [d["position"] for d in view["discriminator"]] == list(range(len(ex["tokens"])))
        assert all(0.0 <= d["p_replaced"] <= 1.0 for d in view["discriminator"])
        assert all(d["replaced"] == (d["token"] != t["original"]) for d, t in zip(view["discriminator"], ex["tokens"]))
        assert "generator replaced" in view["message"]
    same = sample_batch(config.to_dict(), tokenizer_dir, n_examples=3, seed=0, checkpoint_dir=tmp_path / "ckpt")
    assert same == examples  # the generator's sampling is seeded too
