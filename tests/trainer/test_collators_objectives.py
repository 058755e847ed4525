"""The issue-3 objectives as collators: SOP, SpanBERT (+SBO), UniLM modes, RoBERTa packing,
masking-unit options on real shards, the objective table, and exact resume with options."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from trainer.objectives import combinations, resolve
from trainer.objectives.masking import IGNORE_INDEX
from trainer.objectives.encoder import MLMCollator, NSPCollator, SOPCollator, SpanBatch, SpanBERTCollator, UniLMCollator
from trainer.objectives.examples import ShardIndex, SpecialIds, build_packed_instances, build_sop_instances, example_rng
from trainer.objectives import build_collator
from trainer.training.data import DataPosition, ExampleSource, TrainStream
from trainer.errors import ConfigError
from trainer.objectives.masking import LEFT_TO_RIGHT, RIGHT_TO_LEFT, SEQ2SEQ, UNILM_MODE_PROBS, UNILM_MODES

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=1000, special=(0, 1, 2, 3, 4))


def synthetic_index(n_docs=400, seed=0, max_sentences=12, max_len=30) -> ShardIndex:
    rng = np.random.default_rng(seed)
    docs = [[rng.integers(5, 1000, rng.integers(3, max_len)).tolist() for _ in range(rng.integers(1, max_sentences))]
            for _ in range(n_docs)]
    flags = [[(rng.random(len(s)) < 0.75).astype(int).tolist() for s in d] for d in docs]
    return ShardIndex.from_documents(docs, flags)


def doc_of(index: ShardIndex, offsets):
    return np.searchsorted(index.doc_token_starts, offsets, side="right") - 1


def expected_unilm_mask(mode: str, n: int, T: int, source: int) -> torch.Tensor:
    """The four UniLM masks by their definitions, one entry at a time (an independent oracle)."""
    def allowed(i: int, j: int) -> bool:
        if i >= n:
            return i == j  # a padding query sees only itself
        if j >= n:
            return False
        return {"bidirectional": True, "left_to_right": j <= i, "right_to_left": j >= i,
                "seq2seq": j < source or source <= j <= i}[mode]

    return torch.tensor([[allowed(i, j) for j in range(T)] for i in range(T)])


def source_for(index, collator, objectives, seed=0, static=False, packing="full-sentences"):
    return ExampleSource(index, special=SPECIAL, seq_len=collator.seq_len, static=static, seed=seed,
                         pairs=resolve(objectives).pairs, packing=packing,
                         word_starts=collator.needs_word_starts)


# ---------------------------------------------------------------------------- SOP
def test_sop_swaps_half_of_the_pairs_and_a_swapped_pair_is_the_original_exchanged():
    index = synthetic_index()
    tables = [build_sop_instances(index, max_tokens=61, rng=np.random.default_rng([2, 0, v])) for v in range(10)]
    table = np.concatenate(tables)
    assert len(table) > 5000
    assert abs(table[:, 4].mean() - 0.5) < 0.02
    kept, swapped = table[table[:, 4] == 0], table[table[:, 4] == 1]
    assert (kept[:, 1] == kept[:, 2]).all()        # A then B, consecutive
    assert (swapped[:, 3] == swapped[:, 0]).all()  # B then A in the document
    assert (doc_of(index, table[:, 0]) == doc_of(index, table[:, 3] - 1)).all()  # one document
    assert (doc_of(index, table[:, 2]) == doc_of(index, table[:, 1] - 1)).all()
    starts = set(index.sentences.tolist())
    assert all(int(t) in starts for t in table[:, :4].ravel())  # whole sentences
    # The same draws with swapping off: the swapped rows are exactly the unswapped ones exchanged.
    unswapped = build_sop_instances(index, max_tokens=61, rng=np.random.default_rng([2, 0, 0]), swap_prob=0.0)
    t0 = tables[0]
    assert (unswapped[:, 4] == 0).all() and len(unswapped) == len(t0)
    s = t0[:, 4] == 1
    assert (t0[s][:, [2, 3, 0, 1]] == unswapped[s][:, :4]).all() and (t0[~s][:, :4] == unswapped[~s][:, :4]).all()


def test_sop_batches_carry_sop_labels_and_bert_pair_layout():
    index = synthetic_index()
    collator = build_collator(["mlm", "sop"], special=SPECIAL, seq_len=48)
    assert isinstance(collator, SOPCollator)
    source = source_for(index, collator, ["mlm", "sop"])
    table = source.instances(0)
    examples = [source.example(table, uid, 0) for uid in range(200)]
    batch = collator(examples)
    assert not hasattr(batch, "nsp_labels") and batch.sop_labels.dtype == torch.long
    assert batch.sop_labels.tolist() == [int(r) for r in table[:200, 4]]
    assert set(batch.model_inputs()) >= {"input_ids", "attention_mask", "token_type_ids", "mlm_labels", "sop_labels"}
    for i in range(len(examples)):
        n = int(batch.attention_mask[i].sum())
        ids = batch.input_ids[i, :n]
        assert ids[0] == SPECIAL.cls and ids[-1] == SPECIAL.sep and (ids == SPECIAL.sep).sum() == 2
        assert n <= 48


def test_sop_needs_documents_of_two_sentences():
    single = ShardIndex.from_documents([[[5, 6, 7]], [[8, 9]]])
    with pytest.raises(ConfigError, match="at least two sentences"):
        build_sop_instances(single, max_tokens=20, rng=np.random.default_rng(0))


# ---------------------------------------------------------------------------- SpanBERT
def test_spanbert_batches_have_span_boundary_pairs():
    index = synthetic_index()
    collator = build_collator(["mlm", "sbo"], special=SPECIAL, seq_len=128)
    assert isinstance(collator, SpanBERTCollator) and collator.masking_unit == "span"
    source = source_for(index, collator, ["mlm", "sbo"])
    table = source.instances(0)
    batch = collator([source.example(table, uid, 0) for uid in range(64)])
    assert type(batch) is SpanBatch and (batch.token_type_ids == 0).all()  # no pair labels
    inputs = batch.model_inputs()
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids", "mlm_labels", "mlm_positions", "sbo_pairs",
                           "sbo_labels"}
    assert torch.equal(inputs["mlm_positions"], (batch.mlm_labels != IGNORE_INDEX).flatten().nonzero().squeeze(1))
    p, y, labels = batch.sbo_pairs, batch.sbo_labels, batch.mlm_labels
    assert p.dtype == torch.long and p.shape[1] == 5 and y.shape == (p.shape[0],)
    b, left, right, pos, rel = p.unbind(1)
    assert torch.equal(y, labels[b, pos]) and (y != IGNORE_INDEX).all()
    assert (left < pos).all() and (pos < right).all() and torch.equal(rel, pos - left - 1)
    assert (labels[b, left] == IGNORE_INDEX).all() and (labels[b, right] == IGNORE_INDEX).all()  # visible
    assert (batch.attention_mask[b, right] == 1).all()
    assert int(rel.max()) < collator.sbo_max_position
    # every masked token of a span gets a pair unless it lies past the position table
    spans = batch.span_ids
    for row in range(batch.size):
        for k in range(int(spans[row].max()) + 1):
            where = (spans[row] == k).nonzero().flatten()
            expect = where[:collator.sbo_max_position].tolist()
            assert pos[b == row][(left[b == row] == where[0] - 1)].tolist() == expect
    assert torch.equal(spans >= 0, labels != IGNORE_INDEX)  # span_ids cover exactly the masked tokens
    # row-major order, like the MLM head's positions
    order = b * labels.shape[1] + pos
    assert (order[1:] > order[:-1]).all()
    wide = build_collator(["mlm", "sbo"], special=SPECIAL, seq_len=128, sbo_max_position=512)
    batch = wide([source.example(table, uid, 0) for uid in range(64)])
    assert torch.equal(batch.sbo_labels, batch.mlm_labels[batch.mlm_labels != IGNORE_INDEX])


def test_span_boundary_objective_refuses_other_masking_units():
    with pytest.raises(ConfigError, match="takes span"):
        build_collator(["mlm", "sbo"], special=SPECIAL, seq_len=64, masking_unit="word")
    with pytest.raises(ConfigError, match="needs span masking"):
        SpanBERTCollator(special=SPECIAL, seq_len=64, masking_unit="token")


# ---------------------------------------------------------------------------- UniLM
def test_unilm_modes_have_the_published_mixture_and_matching_masks():
    index = synthetic_index(n_docs=600)
    collator = build_collator(["mlm", "unilm"], special=SPECIAL, seq_len=48)
    assert isinstance(collator, UniLMCollator)
    source = source_for(index, collator, ["mlm", "unilm"])
    table = source.instances(0)
    assert (table[:, 4] == 0).all() and (table[:, 1] == table[:, 2]).all()  # consecutive, in order
    batch = collator([source.example(table, uid, 0) for uid in range(512)])
    B, T = batch.input_ids.shape
    assert batch.self_attention_mask.shape == (B, T, T) and batch.self_attention_mask.dtype == torch.bool
    assert batch.model_inputs()["attention_mask"] is batch.self_attention_mask
    assert set(batch.lm_mode.tolist()) == {0, 1, 2, 3}
    for i in range(0, B, 2):
        mode, n = int(batch.lm_mode[i]), int(batch.attention_mask[i].sum())
        src = int((batch.token_type_ids[i, :n] == 0).sum())  # [CLS] A [SEP]
        assert torch.equal(batch.self_attention_mask[i], expected_unilm_mask(UNILM_MODES[mode], n, T, src))
        if mode == SEQ2SEQ:  # masks only in the target segment
            assert (batch.mlm_labels[i, :src] == IGNORE_INDEX).all()
        assert (batch.mlm_labels[i, :n] != IGNORE_INDEX).any()
    # The mixture, over 12k examples: the mode is the first draw of each example's generator.
    ex = source.example(table, 0, 0)
    modes = [collator.encode(ex, example_rng(collator.seed, variant, uid)).mode
             for variant in range(4) for uid in range(3000)]
    assert modes[:B] == batch.lm_mode.tolist()  # the same draws as in the batch above
    share = np.bincount(modes, minlength=4) / len(modes)
    assert len(modes) == 12_000
    assert np.abs(share - np.asarray(UNILM_MODE_PROBS)).max() < 0.02, share


def test_unilm_batch_runs_through_the_bert_model():
    from models_lib.families.bert import BertConfig, BertForPreTraining

    index = synthetic_index(n_docs=40)
    collator = build_collator(["unilm"], special=SPECIAL, seq_len=32)
    source = source_for(index, collator, ["unilm"])
    batch = collator([source.example(source.instances(0), uid, 0) for uid in range(24)])
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("bert-tiny", vocab_size=1000, hidden_size=32, num_heads=2,
                                                      num_layers=1)).eval()
    out = model(**batch.model_inputs())
    assert torch.isfinite(out.loss)
    # Under the left-to-right mask the first token's state cannot depend on later tokens.
    assert set(batch.lm_mode.tolist()) == {0, 1, 2, 3}
    # Changing tokens a direction must not see leaves the other tokens' states unchanged.
    for mode in (LEFT_TO_RIGHT, RIGHT_TO_LEFT):
        i = batch.lm_mode.tolist().index(mode)
        n = int(batch.attention_mask[i].sum())
        changed, kept = (slice(3, n), slice(0, 3)) if mode == LEFT_TO_RIGHT else (slice(0, 3), slice(3, n))
        x, m = batch.input_ids[i:i + 1].clone(), batch.self_attention_mask[i:i + 1]
        before = model.encode(x, m, batch.token_type_ids[i:i + 1])
        x[0, changed] = 7
        after = model.encode(x, m, batch.token_type_ids[i:i + 1])
        assert torch.allclose(before[0, kept], after[0, kept], atol=1e-5)
        assert not torch.allclose(before[0, :n], after[0, :n], atol=1e-5)


# ---------------------------------------------------------------------------- RoBERTa packing
def test_doc_sentences_never_cross_a_document_and_full_sentences_do():
    index = synthetic_index()
    full = build_packed_instances(index, max_tokens=126)
    doc = build_packed_instances(index, max_tokens=126, cross_documents=False)
    crosses = lambda t: doc_of(index, t[:, 0]) != doc_of(index, t[:, 1] - 1)  # noqa: E731
    assert not crosses(doc).any() and crosses(full).any()
    for table in (full, doc):  # every token once, in order, whole sentences
        assert table[0, 0] == 0 and (table[1:, 0] == table[:-1, 1]).all() and table[-1, 1] == index.n_tokens
    assert len(doc) > len(full)  # shorter sequences at document ends
    src = ExampleSource(index, special=SPECIAL, seq_len=128, static=False, seed=0, packing="doc-sentences")
    t = src.instances(0)
    assert np.array_equal(t, doc)
    assert all((src.example(t, uid, 0).a != SPECIAL.sep).all() for uid in range(len(t)))  # no separator inside
    with pytest.raises(ConfigError, match="packing"):
        ExampleSource(index, special=SPECIAL, seq_len=128, static=False, seed=0, packing="segment-pair")


# ---------------------------------------------------------------------------- real shards
def test_whole_word_masking_on_real_shards_never_splits_a_word(tokenizer_dir):
    from trainer.training.data import open_split
    from trainer.prep.tokenization import load_tokenizer

    bundle = load_tokenizer(tokenizer_dir)
    special = SpecialIds.from_tokenizer(bundle)
    index = open_split(tokenizer_dir, "train")
    continuation = np.array([(bundle.id_to_token(i) or "").startswith("##") for i in range(bundle.vocab_size)])
    stored = np.asarray(index.word_starts[: index.n_tokens], dtype=bool)
    tokens = np.asarray(index.tokens[: index.n_tokens], dtype=np.int64)
    assert (stored == ~continuation[tokens]).mean() > 0.999  # the shards' flags are WordPiece's words
    for unit in ("word", "ngram", "span", "phrase"):
        collator = build_collator(["mlm", "nsp"], special=special, seq_len=128, masking_unit=unit)
        source = source_for(index, collator, ["mlm", "nsp"])
        table = source.instances(0)
        batch = collator([source.example(table, uid, 0) for uid in range(min(400, len(table)))])
        ids, labels = batch.input_ids.numpy(), batch.mlm_labels.numpy()
        original = np.where(labels >= 0, labels, ids)
        chosen = labels != IGNORE_INDEX
        assert not (chosen & special.is_special(original)).any()
        cont = continuation[original] & ~special.is_special(original)
        # a ## piece is chosen exactly when the piece before it is (unless truncation cut the word)
        inner = cont[:, 1:] & ~special.is_special(original[:, :-1])
        assert (chosen[:, 1:][inner] == chosen[:, :-1][inner]).all(), unit
        ratio = chosen.sum() / (~special.is_special(original) & (batch.attention_mask.numpy() == 1)).sum()
        assert 0.13 < ratio < 0.16, (unit, ratio)


# ---------------------------------------------------------------------------- table, streams
def test_every_objective_set_builds_its_collator():
    expected = {("mlm",): MLMCollator, ("mlm", "nsp"): NSPCollator, ("mlm", "sop"): SOPCollator,
                ("mlm", "sbo"): SpanBERTCollator, ("mlm", "unilm"): UniLMCollator, ("unilm",): UniLMCollator,
                ("mlm", "rtd"): MLMCollator, ("rtd",): MLMCollator, ("mlm", "distill"): MLMCollator}
    # issue 4's encoder-decoder and decoder-only objectives (tested in test_denoising / test_lm_collators)
    issue4 = {"span_corruption", "prefix_lm", "t5_mlm", "deshuffle", "drop_tokens", "text_infilling",
              "sentence_permutation", "clm", "bilm"}
    assert {frozenset(k) for k in expected} | {frozenset({o}) for o in issue4} <= {frozenset(c) for c in combinations()}
    for objectives, cls in expected.items():
        assert resolve(objectives).collator is cls
    with_sentinels = dataclasses.replace(SPECIAL, sentinels=tuple(range(SPECIAL.vocab_size - 20, SPECIAL.vocab_size)))
    for objectives in combinations():  # every set the registry trains, with every unit it takes
        for unit in resolve(objectives).units:
            c = build_collator(list(objectives), special=with_sentinels, seq_len=64, masking_unit=unit)
            assert type(c) is resolve(objectives).collator and c.masking_unit == unit
    with pytest.raises(ConfigError, match="No collator"):
        build_collator(["nsp", "sop"], special=SPECIAL, seq_len=64)
    with pytest.raises(ConfigError, match="Unknown masking unit"):
        MLMCollator(special=SPECIAL, seq_len=64, masking_unit="sentence")


@pytest.mark.parametrize("objectives,unit,packing", [
    (["mlm"], "word", "doc-sentences"), (["mlm", "sop"], "ngram", "full-sentences"),
    (["mlm", "sbo"], "span", "full-sentences"), (["mlm", "unilm"], "phrase", "full-sentences"),
    (["mlm", "nsp"], "word", "full-sentences"),
])
def test_streams_with_options_resume_exactly(objectives, unit, packing):
    index = synthetic_index(n_docs=60)

    def make(pos=None):
        collator = build_collator(objectives, special=SPECIAL, seq_len=64, masking_unit=unit, seed=5)
        return TrainStream(source_for(index, collator, objectives, seed=5, packing=packing), collator,
                           batch_size=16, seed=5, position=pos)

    stream = make()
    batches = [stream.next_batch() for _ in range(30)]
    assert stream.position.epoch >= 1
    resumed = make()
    for _ in range(13):
        resumed.next_batch()
    resumed = make(DataPosition(**resumed.position.to_dict()))
    for b in batches[13:]:
        r = resumed.next_batch()
        for name, value in vars(b).items():
            other = getattr(r, name)
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, other), name
            else:
                assert value == other, name  # None, or a flag (`full`)


def test_static_word_masks_repeat_every_ten_epochs():
    index = synthetic_index(n_docs=50)
    collator = build_collator(["mlm"], special=SPECIAL, seq_len=64, masking_unit="span", seed=3)
    source = source_for(index, collator, ["mlm"], seed=3, static=True)
    table = source.instances(0)
    masks = [collator([source.example(table, 5, source.mask_variant(e))]).mlm_labels for e in range(11)]
    assert torch.equal(masks[0], masks[10]) and len({tuple(m.flatten().tolist()) for m in masks[:10]}) > 5


def test_word_units_need_word_starts():
    bare = ShardIndex.from_documents([[[5, 6, 7], [8, 9]], [[10, 11, 12]]])
    with pytest.raises(ConfigError, match="word boundaries"):
        ExampleSource(bare, special=SPECIAL, seq_len=32, static=False, seed=0, word_starts=True)


def test_batches_move_and_pin_every_field():
    index = synthetic_index(n_docs=30)
    collator = build_collator(["mlm", "sbo"], special=SPECIAL, seq_len=64)
    source = source_for(index, collator, ["mlm", "sbo"])
    batch = collator([source.example(source.instances(0), uid, 0) for uid in range(4)])
    moved = batch.to("cpu")
    assert torch.equal(moved.sbo_pairs, batch.sbo_pairs) and type(moved) is SpanBatch


@pytest.mark.parametrize("objectives,preset,loss", [
    (["mlm", "sop"], "albert-tiny", "sop_loss"), (["mlm", "sbo"], "spanbert-tiny", "sbo_loss"),
    (["unilm"], "unilm-tiny", "mlm_loss"), (["mlm"], "roberta-tiny", "mlm_loss"),
])
def test_batches_feed_the_models_lib_family_as_they_are(objectives, preset, loss):
    from models_lib.families import presets
    from models_lib.checkpoint import FAMILIES

    index = synthetic_index(n_docs=40)
    unit = None if "sbo" in objectives else "word"
    collator = build_collator(objectives, special=SPECIAL, seq_len=32, masking_unit=unit)
    source = source_for(index, collator, objectives)
    batch = collator([source.example(source.instances(0), uid, 0) for uid in range(8)])
    cfg = presets.get(preset, vocab_size=1000, pad_token_id=SPECIAL.pad, hidden_size=32, num_heads=2, num_layers=1)
    torch.manual_seed(0)
    model = FAMILIES[cfg.family].model_classes[0](cfg)
    out = model(**batch.model_inputs())
    assert torch.isfinite(out.loss) and getattr(out, loss) is not None
