"""Every fine-tuning collator encodes ahead (trainer.finetune.tasks.EncodesAhead): the train split
is tokenised once and batched by length, and a batch collated from the encodings is the batch the
collator made before, when it tokenised each batch on its own (tests/trainer/finetune_legacy.py);
and a resumed run goes on in the order it started with (trainer.finetune.engine.batch_order),
also one that started before its task was grouped, or before grouping existed."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from tests.trainer.batch_helpers import assert_same_batch
from tests.trainer import finetune_legacy as legacy
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import GROUPED, SHUFFLED, ExampleStream, batch_order
from trainer.finetune.tasks import encodes_ahead, padded_tokens

WORDS = ("the value of a file path returns an object with its name and data for each module in this list "
         "when called by default raise error if not found string number class function method").split()


def _text(rng: np.random.Generator, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS, int(rng.integers(lo, hi))))


def _qa_examples(rng, n):
    out = []
    for i in range(n):
        words = _text(rng, 2, 36).split()
        first = int(rng.integers(len(words)))
        last = min(first + int(rng.integers(3)), len(words) - 1)
        answers = [] if i % 5 == 0 else [{"text": " ".join(words[first:last + 1]),
                                          "answer_start": len(" ".join(words[:first])) + (first > 0)}]
        out.append({"question": _text(rng, 2, 7), "context": " ".join(words), "answers": answers})
    return out


def _text2text_examples(rng, n):
    out = [{"input": _text(rng, 1, 40), "target": _text(rng, 1, 12)} for _ in range(n)]
    for ex in out[::3]:  # as a multi-task run has them: each behind its own task's prefix
        ex.update(prefix="classify: ", task="classify")
    return out


def _sft_examples(rng, n):
    out = []
    for i in range(n):
        if i % 2:
            out.append({"prompt": _text(rng, 1, 20), "response": _text(rng, 1, 15)})
        else:
            out.append({"messages": [{"role": "system", "content": _text(rng, 1, 5)},
                                     {"role": "user", "content": _text(rng, 1, 10)},
                                     {"role": "assistant", "content": _text(rng, 1, 8)},
                                     {"role": "user", "content": _text(rng, 1, 10)},
                                     {"role": "assistant", "content": _text(rng, 1, 8)}]})
    return out


def _cases(tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir):
    """name -> (make a collator, the old batch of it, examples)."""
    from trainer.finetune.gpt1 import GPT1ChoiceCollator, GPT1Collator
    from trainer.finetune.qa import QACollator
    from trainer.finetune.sft import SFTCollator
    from trainer.finetune.text2text import T5Collator, UniLMSeq2SeqCollator
    from trainer.finetune.text_classify import LabelWordCollator
    from trainer.prep.tokenization import load_tokenizer

    wordpiece, t5, bpe = (load_tokenizer(d) for d in (tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir))
    rng = np.random.default_rng(0)
    n = 64
    t5_config = FinetuneConfig(checkpoint="x", dataset="y", family="t5", source_prefix="summarize: ",
                               max_target_length=8)
    unilm_config = FinetuneConfig(checkpoint="x", dataset="y", family="unilm", max_target_length=8, seed=3)
    sft_config = FinetuneConfig(checkpoint="x", dataset="y", family="gpt", chat_template="<{role}> {content}\n")
    vocab = bpe.tok.get_vocab_size()
    texts = [{"text": _text(rng, 1, 30), "label": str(rng.choice(["a", "b"]))} for _ in range(n)]
    pairs = [{"sentence1": _text(rng, 1, 10), "sentence2": _text(rng, 1, 10), "label": str(rng.choice(["a", "b"]))}
             for _ in range(n)]
    scored = [{**ex, "label": float(rng.integers(0, 50)) / 10} for ex in pairs]
    choices = [{"context": _text(rng, 1, 25), **({"question": _text(rng, 1, 5)} if i % 2 else {}),
                "choices": [_text(rng, 1, 8) for _ in range(3)], "label": int(rng.integers(3))} for i in range(n)]
    return {
        "qa": (lambda: QACollator(wordpiece, 32, doc_stride=8), legacy.qa, _qa_examples(rng, n)),
        "t5": (lambda: T5Collator(t5, 24, t5_config), legacy.t5, _text2text_examples(rng, n)),
        "t5_classification": (lambda: LabelWordCollator(t5, 24, t5_config, "classification"), legacy.label_words,
                              texts),
        "t5_regression": (lambda: LabelWordCollator(t5, 24, t5_config, "regression"), legacy.label_words, scored),
        "unilm": (lambda: UniLMSeq2SeqCollator(wordpiece, 32, unilm_config), legacy.unilm,
                  _text2text_examples(rng, n)),
        "sft": (lambda: SFTCollator(bpe, 64, sft_config, eos_id=bpe.sep_id), legacy.sft, _sft_examples(rng, n)),
        "gpt1_text": (lambda: GPT1Collator(bpe, ["a", "b"], 32, "single_label_classification", vocab), legacy.gpt1,
                      texts),
        "gpt1_pair": (lambda: GPT1Collator(bpe, ["a", "b"], 32, "single_label_classification", vocab), legacy.gpt1,
                      pairs),
        "gpt1_similarity": (lambda: GPT1Collator(bpe, [], 32, "regression", vocab), legacy.gpt1, scored),
        "gpt1_choice": (lambda: GPT1ChoiceCollator(bpe, 20, vocab), legacy.gpt1_choice, choices),
    }


CASES = ("qa", "t5", "t5_classification", "t5_regression", "unilm", "sft", "gpt1_text", "gpt1_pair",
         "gpt1_similarity", "gpt1_choice")


@pytest.fixture(scope="module")
def cases(tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir):
    return _cases(tokenizer_dir, sentinel_tokenizer_dir, bpe_tokenizer_dir)


@pytest.mark.parametrize("name", CASES)
def test_batches_from_the_encodings_are_the_batches_of_the_old_per_batch_path(cases, name):
    make, old_batch, examples = cases[name]
    new, old = make(), make()  # two alike (UniLM's masking generator moves on with every batch)
    assert encodes_ahead(new)
    stream = ExampleStream(examples, new, batch_size=8, seed=1, group_by_length=True)
    assert stream.grouped
    for _ in range(10):  # more than an epoch, in grouped batches
        picked = [examples[i] for i in stream.next_indices()]
        assert_same_batch(new.collate(picked, new.encode(picked)), old_batch(old, picked))
    # and what the stream itself hands the loop, from the encodings made once ahead
    stream = ExampleStream(examples, make(), batch_size=8, seed=1, group_by_length=True)
    old = make()
    for _ in range(10):
        position = stream.position
        batch = stream.next_batch()
        again = ExampleStream(examples, make(), batch_size=8, seed=1, group_by_length=True, position=position)
        assert_same_batch(batch, old_batch(old, [examples[i] for i in again.next_indices()]))


@pytest.mark.parametrize("name", CASES)
def test_grouped_batches_pad_less_than_a_plain_shuffle(cases, name):
    make, _, examples = cases[name]
    stream = ExampleStream(examples, make(), batch_size=8, seed=1, group_by_length=True)
    plain = np.random.default_rng([1, 0]).permutation(len(examples))
    assert stream.padding_share() < stream.padding_share(plain)
    assert stream.describe_grouping().startswith("Batches grouped by length")


def test_multi_task_mixing_encodes_each_task_once_and_draws_the_same_batches(cases):
    from trainer.finetune.mixing import MixedStream

    make, old_batch, examples = cases["t5"]
    tasks = [examples[:40], examples[40:]]
    collator, old = make(), make()
    stream = MixedStream(tasks, [0.7, 0.3], collator, batch_size=8, seed=2)
    assert stream.encoded is not None and [len(e) for e in stream.encoded] == [40, 24]
    per_batch = MixedStream(tasks, [0.7, 0.3], lambda batch: old_batch(old, batch), batch_size=8, seed=2)
    assert per_batch.encoded is None
    for _ in range(12):  # past both tasks' first epochs
        assert_same_batch(stream.next_batch(), per_batch.next_batch())


def test_t5_inputs_and_targets_are_padded_apart():
    from trainer.finetune.text2text import EncodedText

    long_input = EncodedText(np.ones(10, dtype=np.int32), np.ones(2, dtype=np.int32))
    long_target = EncodedText(np.ones(2, dtype=np.int32), np.ones(10, dtype=np.int32))
    assert len(long_input) == len(long_target) == 12  # grouped alike: their total work is the same
    # ... but the batch pads the encoder's inputs to 10 and the decoder's targets to 10
    assert padded_tokens([long_input, long_target]) == (24, 40)
    unilm = [dataclasses.replace(e, one_row=True) for e in (long_input, long_target)]
    assert padded_tokens(unilm) == (24, 24)  # one row each


def test_qa_examples_are_grouped_by_their_longest_window(cases):
    from trainer.finetune.qa import EncodedQA

    make, _, examples = cases["qa"]
    encoded = make().encode(examples)
    several = [e for e in encoded if len(e.ids) > 1]
    assert several and all(len(e) == 32 for e in several)  # every window but the last is full
    assert all(isinstance(e, EncodedQA) and len(e) == max(len(w) for w in e.ids) for e in encoded)
    assert padded_tokens(several[:1]) == (sum(len(w) for w in several[0].ids), 32 * len(several[0].ids))


# ---------------------------------------------------------------------------- resuming in the run's own order
def _state(folder, config: dict):
    from trainer.training.checkpoints import STATE_NAME

    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATE_NAME).write_text(json.dumps({"step": 3, "config": config}), encoding="utf-8")
    return folder


def test_a_resumed_run_keeps_the_order_its_checkpoint_records_or_the_one_it_had_before(tokenizer_dir, tmp_path):
    from trainer.finetune.gpt1 import GPT1Collator
    from trainer.finetune.qa import QACollator
    from trainer.finetune.sft import SFTCollator
    from trainer.finetune.tasks import SequenceCollator, TokenCollator
    from trainer.finetune.text2text import T5Collator
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    config = FinetuneConfig(checkpoint="x", dataset="y")
    encoders = [SequenceCollator(tok, ["a", "b"], 32, "single_label_classification"), TokenCollator(tok, ["O"], 32)]
    newly = [QACollator(tok, 32), T5Collator(tok, 32, config), SFTCollator(tok, 32, config, eos_id=tok.sep_id),
             GPT1Collator(tok, ["a", "b"], 32, "single_label_classification", 100)]
    for collator in encoders + newly:
        name = type(collator).__name__
        assert batch_order(config, collator, None) == GROUPED, name  # a new run: group_by_length's default
        assert batch_order(config.replace(group_by_length=False), collator, None) == SHUFFLED, name
        # recorded: the run's own order, whatever the config says now
        assert batch_order(config, collator, _state(tmp_path / "a", {"batch_order": "shuffled"})) == SHUFFLED, name
        recorded = _state(tmp_path / "b", {"group_by_length": False, "batch_order": "length_grouped"})
        assert batch_order(config, collator, recorded) == GROUPED, name
        # a run from before grouping existed: no group_by_length in its config, a plain shuffle
        assert batch_order(config, collator, _state(tmp_path / "c", {"task": "x"})) == SHUFFLED, name
        # a run from before the order was recorded: grouped if its collator grouped then
        before = _state(tmp_path / "d", {"group_by_length": True})
        assert batch_order(config, collator, before) == (GROUPED if collator in encoders else SHUFFLED), name
        off = _state(tmp_path / "e", {"group_by_length": False})
        assert batch_order(config, collator, off) == SHUFFLED, name


def _tune(checkpoint, dataset, out_dir, *, stop_at=0, started=None, edit=None, **changes):
    """A short CPU run; stopped after `stop_at` steps and resumed to the end. `started`: what the
    stopped part ran with instead; `edit`: called with its checkpoint's saved config (as an older
    version wrote it) before the resume."""
    from trainer.finetune.engine import finetune
    from trainer.training.checkpoints import STATE_NAME, latest_resumable
    from trainer.training.sinks import ListSink

    settings = dict(max_steps=6, checkpoint_every=3, eval_every=6, log_every=3, batch_size=8, max_length=32,
                    lr=2e-3, warmup_ratio=0.0, device="cpu", num_threads=1)
    settings.update(changes)
    config = FinetuneConfig(checkpoint=str(checkpoint), dataset=str(dataset), **settings)
    if not stop_at:
        return finetune(config, out_dir=out_dir, sink=ListSink()), None
    asked = {"n": 0}

    def stop():
        asked["n"] += 1
        return asked["n"] > stop_at

    first = config.replace(**(started or {}))
    assert finetune(first, out_dir=out_dir, sink=ListSink(), should_stop=stop).status == "cancelled"
    if edit is not None:
        path = latest_resumable(out_dir) / STATE_NAME
        state = json.loads(path.read_text(encoding="utf-8"))
        edit(state["config"])
        path.write_text(json.dumps(state), encoding="utf-8")
    sink = ListSink()
    return finetune(config, out_dir=out_dir, sink=sink, resume=True), sink


def _weights(result):
    import safetensors.torch

    return safetensors.torch.load_file(str(result.last_checkpoint / "model.safetensors"))


def _same_weights(a, b) -> bool:
    a, b = _weights(a), _weights(b)
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def _saved_order(result) -> str:
    from trainer.training.checkpoints import read_state

    return read_state(result.last_checkpoint)["config"]["batch_order"]


def _before_grouping(config: dict) -> None:
    """A saved config from before group_by_length existed."""
    config.pop("group_by_length"), config.pop("batch_order")


def _before_recording(config: dict) -> None:
    """A saved config from before the order was recorded, with group_by_length's default."""
    config.pop("batch_order")
    config["group_by_length"] = True


def test_a_run_from_before_grouping_resumes_in_its_plain_shuffle(trained_run, tmp_path):
    from tests.trainer.finetune_helpers import ingested_demo

    base, dataset = trained_run[0].last_checkpoint, ingested_demo("classification", tmp_path)
    plain, _ = _tune(base, dataset, tmp_path / "plain", group_by_length=False)
    grouped, _ = _tune(base, dataset, tmp_path / "grouped")
    assert _saved_order(plain) == SHUFFLED and _saved_order(grouped) == GROUPED
    assert not _same_weights(plain, grouped)  # the order tells
    old, sink = _tune(base, dataset, tmp_path / "old", stop_at=3, started=dict(group_by_length=False),
                      edit=_before_grouping)
    assert _same_weights(old, plain) and _saved_order(old) == SHUFFLED
    assert any("started with its training examples in a plain shuffle" in line for line in sink.lines)
    # a run that recorded nothing but was grouped (the encoders' collators grouped before) stays grouped
    recorded_nothing, _ = _tune(base, dataset, tmp_path / "unrecorded", stop_at=3, edit=_before_recording)
    assert _same_weights(recorded_nothing, grouped)


def test_a_qa_run_resumes_grouped_and_one_from_before_qa_was_grouped_in_its_plain_shuffle(trained_run, tmp_path):
    from tests.trainer.finetune_helpers import ingested_demo

    base, dataset = trained_run[0].last_checkpoint, ingested_demo("extractive_qa", tmp_path)
    settings = dict(max_length=48, doc_stride=12)
    plain, _ = _tune(base, dataset, tmp_path / "plain", group_by_length=False, **settings)
    grouped, _ = _tune(base, dataset, tmp_path / "grouped", **settings)
    assert _saved_order(grouped) == GROUPED and not _same_weights(plain, grouped)
    resumed, _ = _tune(base, dataset, tmp_path / "resumed", stop_at=3, **settings)
    assert _same_weights(resumed, grouped)  # exact resume in the grouped order
    # started before QA encoded ahead: group_by_length true in its config, but a plain shuffle
    old, sink = _tune(base, dataset, tmp_path / "old", stop_at=3, started=dict(group_by_length=False),
                      edit=_before_recording, **settings)
    assert _same_weights(old, plain) and _saved_order(old) == SHUFFLED
    assert any("in a plain shuffle" in line for line in sink.lines)
