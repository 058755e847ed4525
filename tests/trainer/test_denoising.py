"""The encoder-decoder objectives of issue 4 (trainer.objectives.denoising): T5 span corruption at fixed
shapes, the T5 study's and BART's alternatives, the Batch contract, and static/dynamic
corruption with exact resume."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.objectives import resolve
from trainer.objectives.masking import IGNORE_INDEX
from trainer.objectives.base import Batch
from trainer.objectives.examples import Example, ShardIndex, SpecialIds, TextLayout, build_chunk_instances, example_rng
from trainer.objectives import build_collator
from trainer.training.data import DataPosition, ExampleSource, TrainStream, make_source
from trainer.objectives.denoising import (
    DENOISING_OBJECTIVES, SENTINELS_NEEDED, Seq2SeqBatch, SpanCorruptionCollator, TextInfillingCollator, infill,
    span_corruption_lengths,
)
from trainer.errors import ConfigError

VOCAB = 1000  # ordinary ids 5..999; sentinels on top, as train_tokenizer puts them
SENTINELS = tuple(range(VOCAB, VOCAB + 100))
SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=VOCAB + 100, special=(0, 1, 2, 3, 4), sentinels=SENTINELS)
EOS = SPECIAL.eos
OBJECTIVES = [o.name for o in DENOISING_OBJECTIVES]


@pytest.fixture(scope="module")
def sentinel_unigram_dir(tmp_path_factory, tokenizer_dir):
    """A Unigram tokenizer with T5's 100 sentinels, and its shards, on the shared demo corpus."""
    from trainer.prep.shards import encode_corpus
    from tests.tokenizer_store import stored_tokenizer

    out = tmp_path_factory.mktemp("unigram-sentinels") / "tokenizer"
    stored_tokenizer(tokenizer_dir.parent / "corpus", out, algorithm="unigram", vocab_size=2000, lowercase=True,
                    extra_ids=100)
    encode_corpus(tokenizer_dir.parent / "corpus", out)
    return out


def synthetic_index(n_docs=300, seed=0, max_sentences=12, max_len=30) -> ShardIndex:
    rng = np.random.default_rng(seed)
    docs = [[rng.integers(5, VOCAB, rng.integers(3, max_len)).tolist() for _ in range(rng.integers(1, max_sentences))]
            for _ in range(n_docs)]
    return ShardIndex.from_documents(docs)


def source_for(index, collator, *, static=False, seed=0) -> ExampleSource:
    return ExampleSource(index, special=SPECIAL, seq_len=collator.seq_len, static=static, seed=seed,
                         layout=collator.layout)


def all_examples(index, collator, variant=0, limit=None):
    source = source_for(index, collator)
    table = source.instances(0)
    n = len(table) if limit is None else min(limit, len(table))
    return [source.example(table, uid, variant) for uid in range(n)]


def real(row: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    return row[mask.bool()].numpy()


def split_pairs(batch: Batch):
    """(input, target) id arrays of each row, EOS removed (asserted to be last)."""
    out = []
    for i in range(batch.size):
        inp = real(batch.input_ids[i], batch.attention_mask[i])
        tgt = real(batch.labels[i], batch.decoder_attention_mask[i])
        assert inp[-1] == EOS and tgt[-1] == EOS and EOS not in inp[:-1] and EOS not in tgt[:-1]
        out.append((inp[:-1], tgt[:-1]))
    return out


# ---------------------------------------------------------------------------- span corruption
def corrupted_shape(n: int) -> tuple[int, int]:
    """(input, target) lengths of n text tokens by the rules: round(15%) noise, clipped to 1..n-1,
    in round(noise / 3) spans (>= 1); input = kept + a sentinel per span + EOS, target = a
    sentinel per span + noise + the final sentinel + EOS."""
    noise = min(max(math.floor(n * 0.15 + 0.5), 1), n - 1)
    spans = max(1, min(math.floor(noise / 3 + 0.5), noise, n - noise))
    return n - noise + spans + 1, noise + spans + 2


def test_span_corruption_lengths_follow_t5():
    assert span_corruption_lengths(512) == (568, 115)  # T5: 568 raw tokens at inputs_length 512
    assert span_corruption_lengths(128) == (141, 30)
    for seq_len in (3, 8, 64, 128, 200, 512, 1024):
        raw, target = span_corruption_lengths(seq_len)
        assert corrupted_shape(raw)[0] <= seq_len < corrupted_shape(raw + 1)[0]  # the largest that fits
        assert target == corrupted_shape(raw)[1]
    with pytest.raises(ConfigError, match="at least 3"):
        span_corruption_lengths(2)


def reconstruct(inp: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Fill each sentinel of the input with the tokens after it in the target."""
    spans, current = {}, None
    for t in tgt.tolist():
        if t in SENTINELS:
            current = t
            spans[current] = []
        else:
            spans[current].append(t)
    out = []
    for t in inp.tolist():
        out.extend(spans[t] if t in SENTINELS else [t])
    return np.asarray(out, dtype=np.int64)


def test_span_corruption_statistics_over_100k_tokens():
    index = synthetic_index(n_docs=1100)
    collator = build_collator(["span_corruption"], special=SPECIAL, seq_len=128, seed=1)
    assert isinstance(collator, SpanCorruptionCollator)
    raw_len, target_len = span_corruption_lengths(128)
    assert collator.layout == TextLayout("chunks", raw_len) and collator.target_len == target_len
    examples = all_examples(index, collator)
    assert sum(len(ex.a) for ex in examples) >= 100_000
    n_noise = n_spans = n_tokens = 0
    for i in range(0, len(examples), 64):
        chunk = examples[i:i + 64]
        batch = collator(chunk)
        B = len(chunk)
        assert batch.input_ids.shape == (B, 128) and batch.labels.shape == (B, target_len)  # fixed shapes
        assert batch.decoder_input_ids.shape == (B, target_len) and batch.attention_mask.shape == (B, 128)
        for ex, (inp, tgt) in zip(chunk, split_pairs(batch)):
            in_sent = [t for t in inp.tolist() if t in SENTINELS]
            out_sent = [t for t in tgt.tolist() if t in SENTINELS]
            k = len(in_sent)
            assert k >= 1 and in_sent == list(SENTINELS[:k])       # in order, each once
            assert out_sent == list(SENTINELS[:k + 1])             # ... and the final sentinel
            assert tgt[0] == SENTINELS[0] and tgt[-1] == SENTINELS[k]
            assert np.array_equal(reconstruct(inp, tgt), ex.a)     # input + target = the text
            n_noise += len(tgt) - (k + 1)
            n_spans += k
            n_tokens += len(ex.a)
    assert abs(n_noise / n_tokens - 0.15) < 0.01
    assert abs(n_noise / n_spans - 3.0) < 0.3


def test_span_corruption_pads_short_texts_to_the_same_shapes():
    collator = SpanCorruptionCollator(special=SPECIAL, seq_len=64)
    raw_len = collator.layout.length
    rng = np.random.default_rng(0)
    examples = [Example(uid=uid, variant=0, a=rng.integers(5, VOCAB, n))
                for uid, n in enumerate([raw_len, 2, 5, 17, raw_len - 3])]
    batch = collator(examples)
    assert batch.input_ids.shape == (5, 64) and batch.labels.shape == (5, collator.target_len)
    assert int(batch.attention_mask[0].sum()) >= 62  # a full text nearly fills the input
    for ex, (inp, tgt) in zip(examples, split_pairs(batch)):
        assert np.array_equal(reconstruct(inp, tgt), ex.a)


def test_span_corruption_needs_sentinels():
    plain = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=VOCAB, special=(0, 1, 2, 3, 4))
    with pytest.raises(ConfigError) as err:
        build_collator(["span_corruption"], special=plain, seq_len=128)
    assert str(err.value) == SENTINELS_NEEDED
    few = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=VOCAB + 5, sentinels=tuple(range(VOCAB, VOCAB + 5)))
    with pytest.raises(ConfigError, match="needs 29 sentinel tokens; the tokenizer has 5"):
        build_collator(["span_corruption"], special=few, seq_len=512)
    build_collator(["span_corruption"], special=few, seq_len=16)  # 16 needs only 2


def test_span_corruption_on_real_shards_decodes_back_to_the_text(sentinel_unigram_dir):
    from trainer.training.data import open_split
    from trainer.prep.tokenization import load_tokenizer

    bundle = load_tokenizer(sentinel_unigram_dir)
    special = SpecialIds.from_tokenizer(bundle)
    assert special.eos == bundle.sep_id and special.sentinels == tuple(bundle.sentinel_ids)
    collator = build_collator(["span_corruption"], special=special, seq_len=96, seed=0)
    source = ExampleSource(open_split(sentinel_unigram_dir, "train"), special=special, seq_len=96, static=False,
                           seed=0, layout=collator.layout)
    table = source.instances(0)
    examples = [source.example(table, uid, 0) for uid in range(0, len(table), max(1, len(table) // 40))]
    batch = collator(examples)
    names = [f"<extra_id_{i}>" for i in range(100)]
    for i, ex in enumerate(examples):
        inp = real(batch.input_ids[i], batch.attention_mask[i])[:-1]
        tgt = real(batch.labels[i], batch.decoder_attention_mask[i])[:-1]
        text_in = bundle.decode(inp, skip_special_tokens=False)
        text_out = bundle.decode(tgt, skip_special_tokens=False)
        assert names[0] in text_in and text_out.lstrip().startswith(names[0])
        # fill each sentinel of the input text with its span from the target text
        filled = text_in
        for k in range(sum(name in text_in for name in names)):
            after = text_out.split(names[k], 1)[1]
            span = after.split(names[k + 1], 1)[0]
            filled = filled.replace(names[k], span, 1)
        assert " ".join(filled.split()) == " ".join(bundle.decode(ex.a).split())


# ---------------------------------------------------------------------------- the other objectives
def batches_of(objective, index=None, seq_len=64, n=600, seed=0, variant=0):
    index = index or synthetic_index()
    collator = build_collator([objective], special=SPECIAL, seq_len=seq_len, seed=seed)
    examples = all_examples(index, collator, variant=variant, limit=n)
    return collator, examples, [collator(examples[i:i + 50]) for i in range(0, len(examples), 50)]


def test_every_objective_gives_the_batch_contract():
    for objective in OBJECTIVES:
        assert resolve([objective]).collator is next(o.collator for o in DENOISING_OBJECTIVES if o.name == objective)
        collator, examples, batches = batches_of(objective, n=100)
        for batch in batches:
            B, T = batch.input_ids.shape
            L = batch.labels.shape[1]
            assert T <= 64 and L <= (collator.target_len if objective == "span_corruption" else 64)
            assert type(batch) is Seq2SeqBatch  # its own batch type: no MLM fields
            real_target = batch.labels != IGNORE_INDEX
            assert torch.equal(batch.decoder_attention_mask, real_target.long())
            # decoder inputs: the decoder start id (= pad), then the labels shifted right, pad for -100
            assert (batch.decoder_input_ids[:, 0] == SPECIAL.pad).all()
            shifted = torch.where(real_target[:, :-1], batch.labels[:, :-1], torch.tensor(SPECIAL.pad))
            assert torch.equal(batch.decoder_input_ids[:, 1:], shifted)
            assert batch.n_tokens == int(batch.attention_mask.sum()) + int(real_target.sum())
            assert (batch.input_ids[batch.attention_mask == 0] == SPECIAL.pad).all()
            assert batch.model_inputs().keys() == {"input_ids", "attention_mask", "decoder_input_ids",
                                                   "decoder_attention_mask", "labels"}
            split_pairs(batch)  # both sides end with EOS, and only there


def test_prefix_lm_input_and_target_make_the_text():
    _, examples, batches = batches_of("prefix_lm")
    pairs = [p for b in batches for p in split_pairs(b)]
    fractions = []
    for ex, (inp, tgt) in zip(examples, pairs):
        assert np.array_equal(np.concatenate([inp, tgt]), ex.a) and len(inp) >= 1 and len(tgt) >= 1
        fractions.append(len(inp) / len(ex.a))
    assert abs(np.mean(fractions) - 0.5) < 0.03  # a uniform split point
    assert np.std(fractions) > 0.2


def test_t5_mlm_corrupts_15_percent_90_mask_10_random():
    _, examples, batches = batches_of("t5_mlm", index=synthetic_index(n_docs=1200), n=None)
    masked = random = total = 0
    for ex, (inp, tgt) in zip(examples, [p for b in batches for p in split_pairs(b)]):
        assert np.array_equal(tgt, ex.a)  # the target is the whole original text
        assert len(inp) == len(ex.a)
        masked += int((inp == SPECIAL.mask).sum())
        changed = (inp != ex.a) & (inp != SPECIAL.mask)
        assert not SPECIAL.is_special(inp[changed]).any()  # random tokens are ordinary tokens
        random += int(changed.sum())
        total += len(ex.a)
    assert total > 100_000
    assert abs((masked + random) / total - 0.15) < 0.01  # round(0.15 * 63) = 9 per full text: 14.3%
    assert abs(masked / (masked + random) - 0.9) < 0.01


def test_deshuffle_input_is_a_permutation_of_the_target():
    _, examples, batches = batches_of("deshuffle")
    moved = 0
    for ex, (inp, tgt) in zip(examples, [p for b in batches for p in split_pairs(b)]):
        assert np.array_equal(tgt, ex.a)
        assert np.array_equal(np.sort(inp), np.sort(tgt))
        moved += not np.array_equal(inp, tgt)
    assert moved == len(examples)


def interleaves(a: list, b: list, text: list) -> bool:
    """Whether text is a merge of a and b, each kept in order (dynamic programming)."""
    ok = [[False] * (len(b) + 1) for _ in range(len(a) + 1)]
    ok[0][0] = True
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            if i and ok[i - 1][j] and a[i - 1] == text[i + j - 1]:
                ok[i][j] = True
            if j and ok[i][j - 1] and b[j - 1] == text[i + j - 1]:
                ok[i][j] = True
    return len(a) + len(b) == len(text) and ok[len(a)][len(b)]


def test_drop_tokens_input_and_targets_merge_back_to_the_original():
    _, examples, batches = batches_of("drop_tokens", index=synthetic_index(n_docs=1200), n=None)
    dropped = total = 0
    pairs = [p for b in batches for p in split_pairs(b)]
    for ex, (inp, tgt) in zip(examples, pairs):
        if len(ex.a) <= 70:
            assert interleaves(inp.tolist(), tgt.tolist(), ex.a.tolist())
        dropped += len(tgt)
        total += len(ex.a)
    assert not interleaves([1, 2], [3], [1, 3, 3])  # the oracle can say no
    assert abs(dropped / total - 0.15) < 0.005


def test_text_infilling_masks_30_percent_in_poisson_spans_one_mask_each():
    collator, examples, batches = batches_of("text_infilling", index=synthetic_index(n_docs=1200), n=None, seed=4)
    assert isinstance(collator, TextInfillingCollator)
    covered = total = 0
    drawn_lengths = []
    for ex, (inp, tgt) in zip(examples, [p for b in batches for p in split_pairs(b)]):
        assert np.array_equal(tgt, ex.a)
        starts, lengths, drawn = collator.spans(len(ex.a), example_rng(4, ex.variant, ex.uid))
        assert np.array_equal(inp, infill(ex.a, starts, lengths, SPECIAL.mask))  # what the batch holds
        assert (inp == SPECIAL.mask).sum() == len(starts)  # one mask per span, 0-length ones included
        ends = starts + lengths
        assert (starts[1:] > ends[:-1]).all()  # spans never touch: each mask is one span
        covered += int(lengths.sum())
        total += len(ex.a)
        assert (lengths <= drawn).all() and (lengths < drawn).sum() <= 1  # only the last draw is cut
        drawn_lengths.extend(drawn.tolist())
    assert abs(covered / total - 0.3) < 0.01
    # Pooled over texts, the draws are Poisson(3) (Wald's identity: stopping at the budget
    # does not bias the pooled mean of everything drawn).
    assert abs(np.mean(drawn_lengths) - 3.0) < 0.1
    assert abs(np.mean(np.asarray(drawn_lengths) == 0) - math.exp(-3)) < 0.015
    assert abs(np.mean(np.asarray(drawn_lengths) == 3) - 4.5 * math.exp(-3)) < 0.02


def test_text_infilling_keeps_the_input_within_seq_len():
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n = int(rng.integers(2, 12))  # a text that fills seq_len - 1 = n: no room for growth
        collator = TextInfillingCollator(special=SPECIAL, seq_len=n + 1, poisson=0.5)  # many 0-length spans
        starts, lengths, _ = collator.spans(n, rng)
        assert n - int(lengths.sum()) + len(starts) <= n
        assert abs(int(lengths.sum()) - math.floor(0.3 * n + 0.5)) == 0


def test_sentence_permutation_shuffles_whole_sentences_of_one_document():
    index = synthetic_index()
    collator, examples, batches = batches_of("sentence_permutation", index=index)
    sentence_starts = set(index.sentences.tolist())
    permuted = multi = 0
    for ex, (inp, tgt) in zip(examples, [p for b in batches for p in split_pairs(b)]):
        assert np.array_equal(tgt, ex.a)
        bounds = list(ex.sentence_starts) + [len(ex.a)]
        sentences = [tuple(ex.a[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        # the input is the same sentences in another order
        pos, order = 0, []
        for _ in sentences:
            match = [k for k, s in enumerate(sentences) if k not in order and tuple(inp[pos:pos + len(s)]) == s]
            assert match
            order.append(match[0])
            pos += len(sentences[match[0]])
        assert pos == len(inp)
        if len(sentences) > 1:
            multi += 1
            permuted += order != list(range(len(sentences))) or len(set(sentences)) < len(sentences)
    assert multi > 100 and permuted == multi
    # whole sentences of one document
    table = source_for(index, collator).instances(0)
    assert all(int(s) in sentence_starts for s in table[:, 0])
    doc = np.searchsorted(index.doc_token_starts, table, side="right") - 1
    doc_end = np.searchsorted(index.doc_token_starts, table[:, 1] - 1, side="right") - 1
    assert (doc[:, 0] == doc_end).all()


# ---------------------------------------------------------------------------- data wiring
def test_chunks_cover_the_stream_in_order():
    index = ShardIndex.from_documents([[[5, 6, 7], [8]], [[9, 10]], [[11] * 5]])
    table = build_chunk_instances(index, length=4)
    assert table.tolist() == [[0, 4], [4, 8], [8, 11]]
    assert [index.stream(a, b).tolist() for a, b in table] == [[5, 6, 7, 8], [9, 10, 11, 11], [11, 11, 11]]
    sep = build_chunk_instances(index, length=4, doc_sep=True)
    assert np.concatenate([index.stream(a, b, sep=3) for a, b in sep]).tolist() == \
        [5, 6, 7, 8, 3, 9, 10, 3, 11, 11, 11, 11, 11, 3]


def test_static_corruption_repeats_and_dynamic_changes_each_epoch():
    index = synthetic_index(n_docs=60)
    for objective in OBJECTIVES:
        collator = build_collator([objective], special=SPECIAL, seq_len=64, seed=3)
        for static in (True, False):
            source = source_for(index, collator, static=static, seed=3)
            table = source.instances(source.variant(0))
            uid = 7 if objective != "sentence_permutation" else int(np.argmax(
                [len(source.example(table, u, 0).sentence_starts) for u in range(len(table))]))
            inputs = [collator([source.example(table, uid, source.mask_variant(e))]).input_ids for e in range(11)]
            again = collator([source.example(table, uid, source.mask_variant(0))]).input_ids
            assert torch.equal(inputs[0], again), objective  # same (uid, variant): same corruption
            if static:
                assert torch.equal(inputs[0], inputs[10]), objective
            else:
                assert not torch.equal(inputs[0], inputs[1]), objective


@pytest.mark.parametrize("objective", ["span_corruption", "text_infilling", "sentence_permutation"])
def test_streams_resume_exactly(objective):
    index = synthetic_index(n_docs=60)

    def make(pos=None):
        collator = build_collator([objective], special=SPECIAL, seq_len=64, seed=5)
        return TrainStream(source_for(index, collator, seed=5), collator, batch_size=16, seed=5, position=pos)

    stream = make()
    batches = [stream.next_batch() for _ in range(25)]
    assert stream.position.epoch >= 1
    resumed = make()
    for _ in range(12):
        resumed.next_batch()
    again = make(DataPosition(**resumed.position.to_dict()))
    for b in batches[12:]:
        c = again.next_batch()
        assert torch.equal(b.input_ids, c.input_ids) and torch.equal(b.labels, c.labels)


def test_make_source_reads_the_collators_layout():
    index = synthetic_index(n_docs=40)
    collator = build_collator(["span_corruption"], special=SPECIAL, seq_len=64)
    config = SimpleNamespace(seq_len=64, seed=0, objectives=["span_corruption"])
    source = make_source(config, index, SPECIAL, collator, static=False)
    assert source.layout == collator.layout and source.pairs is None
    table = source.instances(0)
    assert (np.diff(table, axis=1)[:-1] == collator.layout.length).all()
