"""Extractive QA fine-tuning (trainer/finetune/qa.py): long contexts become overlapping windows
labelled with the answer's tokens (or [CLS]), the labels map back to the answer's exact
characters, the n-best decoding picks the best allowed span (or "no answer" past the null
threshold), and a run on the extractive_qa demo dataset reports SQuAD 2.0's scores."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.qa import (CLS_POSITION, EXTRACTIVE_QA, QACollator, QAStep, WindowLogits, answer_positions,
                                 best_span, has_unanswerable, predict_answer)

CONTEXT = " ".join(f"w{i}" for i in range(30))  # one token per word: window contents are easy to predict
QUESTION = "q0 q1"


@pytest.fixture(scope="module")
def words():
    """A word-level tokenizer with BERT's pair template: every 'wN' and 'qN' is one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from trainer.prep.tokenization import TokenizerBundle

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                        + [f"w{i}" for i in range(60)] + [f"q{i}" for i in range(60)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return TokenizerBundle(tok=tok, meta={}, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


def answer(first: int, last: int) -> dict:
    """The answer covering words first..last of CONTEXT."""
    return {"text": " ".join(f"w{i}" for i in range(first, last + 1)),
            "answer_start": sum(len(f"w{i}") + 1 for i in range(first))}


def context_words(window) -> list[str]:
    return [f"w{int(CONTEXT[o[0] + 1:o[1]])}" for o in window.offsets if o is not None]


def labelled_text(window, context: str = CONTEXT) -> str:
    return context[window.offsets[window.start_position][0]:window.offsets[window.end_position][1]]


# ---------------------------------------------------------------------------- windows
def test_a_long_context_becomes_overlapping_windows_sharing_doc_stride_tokens(words):
    collator = QACollator(words, 16, doc_stride=4)  # 16 - 3 specials - 2 question tokens: 11 context tokens
    windows = collator.windows(QUESTION, CONTEXT)
    assert [context_words(w) for w in windows] == [[f"w{i}" for i in range(a, min(a + 11, 30))]
                                                   for a in (0, 7, 14, 21)]
    for w in windows:
        tokens = [words.tok.id_to_token(i) for i in w.ids]
        assert tokens[:4] == ["[CLS]", "q0", "q1", "[SEP]"] and tokens[-1] == "[SEP]" and len(w.ids) <= 16
        assert w.type_ids == [0] * 4 + [1] * (len(w.ids) - 4)
        assert w.offsets[:4] == [None] * 4 and w.offsets[-1] is None
        assert (w.start_position, w.end_position) == (CLS_POSITION, CLS_POSITION)  # no answers given
    # doc_stride 0 is a third of max_length; a short context is one window
    assert QACollator(words, 384).doc_stride == 128
    assert len(QACollator(words, 64).windows(QUESTION, CONTEXT)) == 1


def test_an_answer_across_a_window_boundary_is_labelled_only_in_the_window_that_holds_all_of_it(words):
    windows = QACollator(words, 16, doc_stride=4).windows(QUESTION, CONTEXT, [answer(9, 11)])
    # window 0 holds w0..w10 (w9, w10 but not w11); window 1 holds w7..w17
    assert [(w.start_position, w.end_position) for w in windows] == [(0, 0), (6, 8), (0, 0), (0, 0)]
    assert labelled_text(windows[1]) == "w9 w10 w11"


def test_an_answer_in_the_second_window_only(words):
    windows = QACollator(words, 16, doc_stride=4).windows(QUESTION, CONTEXT, [answer(12, 12)])
    assert [(w.start_position, w.end_position) for w in windows] == [(0, 0), (9, 9), (0, 0), (0, 0)]
    assert labelled_text(windows[1]) == "w12"
    last = QACollator(words, 16, doc_stride=4).windows(QUESTION, CONTEXT, [answer(28, 29)])
    assert labelled_text(last[-1]) == "w28 w29" and all(w.start_position == 0 for w in last[:-1])


def test_an_unanswerable_question_points_every_window_at_cls(words):
    collator = QACollator(words, 16, doc_stride=4)
    assert {(w.start_position, w.end_position) for w in collator.windows(QUESTION, CONTEXT, [])} == {(0, 0)}
    batch = collator([{"question": QUESTION, "context": CONTEXT, "answers": []}])
    assert batch.start_positions.tolist() == batch.end_positions.tolist() == [0, 0, 0, 0]


def test_the_collator_gives_each_example_its_windows_as_rows(words):
    examples = [{"question": QUESTION, "context": CONTEXT, "answers": [answer(9, 11)]},
                {"question": "q5", "context": "w1 w2 w3", "answers": [{"text": "w2", "answer_start": 3}]},
                {"question": QUESTION, "context": "w4 w5", "answers": []}]
    batch = QACollator(words, 16, doc_stride=4)(examples)
    assert batch.rows == 6 and batch.size == 3 and batch.row_example == [0, 0, 0, 0, 1, 2]
    assert batch.start_positions.tolist() == [0, 6, 0, 0, 4, 0] and batch.end_positions.tolist() == [0, 8, 0, 0, 4, 0]
    assert batch.input_ids.shape == (6, 16) and batch.attention_mask[4].tolist() == [1] * 7 + [0] * 9
    assert batch.answers == [["w9 w10 w11"], ["w2"], []] and batch.contexts[1] == "w1 w2 w3"
    assert set(batch.model_inputs()) == {"input_ids", "attention_mask", "token_type_ids", "start_positions",
                                         "end_positions"}


def test_a_question_longer_than_half_the_window_is_cut_and_a_too_wide_stride_narrowed(words):
    question = " ".join(f"q{i}" for i in range(40))
    collator = QACollator(words, 16, doc_stride=7)  # 13 tokens of room: the question keeps 6, the context 7
    windows = collator.windows(question, CONTEXT, [answer(20, 21)])
    assert all([words.tok.id_to_token(i) for i in w.ids[1:7]] == [f"q{i}" for i in range(6)] for w in windows)
    starts = [context_words(w)[0] for w in windows]
    assert starts[:3] == ["w0", "w4", "w8"]  # a stride of 7 would not move on: 7 // 2 = 3 tokens shared
    assert context_words(windows[-1])[-1] == "w29" and {labelled_text(w) for w in windows if w.start_position} == {"w20 w21"}


def test_labels_map_back_to_the_exact_answer_text_on_the_demo_dataset(tokenizer_dir, tmp_path):
    from trainer.prep.labelled import DEMOS, ingest, iter_examples, sniff, write_demo_dataset
    from trainer.prep.tokenization import load_tokenizer

    source = write_demo_dataset("extractive_qa", tmp_path / DEMOS["extractive_qa"].filename)
    preview = sniff(source, source.name)
    ingest(source, tmp_path / "qa", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    collator = QACollator(load_tokenizer(tokenizer_dir), 128, doc_stride=32)
    answerable = 0
    for ex in iter_examples(tmp_path / "qa", "train"):
        windows = collator.windows(ex["question"], ex["context"], ex["answers"])
        assert all(len(w.ids) <= 128 for w in windows)
        labelled = [w for w in windows if w.start_position != CLS_POSITION]
        if ex["answers"]:
            answerable += 1
            assert labelled, ex["id"]
            assert {labelled_text(w, ex["context"]) for w in labelled} == {ex["answers"][0]["text"]}, ex["id"]
        else:
            assert not labelled
    assert answerable > 300
    assert has_unanswerable(tmp_path / "qa") and not has_unanswerable(tmp_path / "nothing here")


def test_answer_positions_need_the_whole_answer_inside():
    offsets = [None, (0, 3), (4, 9), (10, 12), None]  # "the quick ox" cut after "ox"
    assert answer_positions(offsets, {"text": "quick", "answer_start": 4}) == (2, 2)
    assert answer_positions(offsets, {"text": "ick o", "answer_start": 6}) == (2, 3)  # tokens holding the characters
    assert answer_positions(offsets, {"text": "ox en", "answer_start": 10}) == (0, 0)
    assert answer_positions([None, None], {"text": "a", "answer_start": 0}) == (0, 0)


def test_settings_have_bounds_and_sentences():
    config = FinetuneConfig(checkpoint="x", dataset="y")
    assert (config.doc_stride, config.max_answer_length, config.n_best, config.null_score_threshold) == (0, 30, 20, 0.0)
    with pytest.raises(ConfigError, match=r"doc_stride must be less than half of max_length \(64\)"):
        FinetuneConfig(checkpoint="x", dataset="y", doc_stride=64)
    assert FinetuneConfig(checkpoint="x", dataset="y", max_length=384, doc_stride=128).doc_stride == 128
    for name, value in (("n_best", 0), ("max_answer_length", 0), ("null_score_threshold", 1e6), ("doc_stride", -1)):
        with pytest.raises(ConfigError, match=f"{name} must be between"):
            FinetuneConfig(checkpoint="x", dataset="y", **{name: value})
    with pytest.raises(ConfigError, match="doc_stride must be less than half"):
        QACollator(SimpleNamespace(tok=_FakeTok(), pad_id=0), 16, doc_stride=8)


class _FakeTok:
    """Just enough of a tokenizers.Tokenizer for QACollator's constructor."""

    def to_str(self):
        return ""

    @classmethod
    def from_str(cls, _):
        return cls()

    def no_truncation(self):
        pass

    def no_padding(self):
        pass

    def num_special_tokens_to_add(self, is_pair):
        return 3


# ---------------------------------------------------------------------------- decoding
# A window: [CLS] q q [SEP] then context tokens 4..8 (characters below), [SEP], padding.
OFFSETS = [None, None, None, None, (0, 2), (3, 5), (6, 8), (9, 11), (12, 14), None]
WINDOW_CONTEXT = "w0 w1 w2 w3 w4"


def logits(peaks: dict[int, float], n: int = 11) -> list[float]:
    return [peaks.get(i, -10.0) for i in range(n)]


def test_best_span_pairs_the_n_best_starts_and_ends_inside_the_context():
    start = logits({5: 3.0, 2: 9.0})          # the highest start is a question token: not allowed
    end = logits({7: 4.0, 4: 8.0, 9: 7.0})    # ends before the start or on [SEP]: not allowed
    assert best_span(start, end, OFFSETS) == (7.0, 5, 7)
    # the top-2 starts are 2 and 5, the top-2 ends 4 and 9: no pair qualifies; the third end does
    assert best_span(start, end, OFFSETS, n_best=2) is None
    assert best_span(start, end, OFFSETS, n_best=3) == (7.0, 5, 7)


def test_best_span_respects_max_answer_length():
    start, end = logits({4: 5.0, 6: 1.0}), logits({8: 5.0, 7: 0.5})
    assert best_span(start, end, OFFSETS, max_answer_length=5) == (10.0, 4, 8)
    assert best_span(start, end, OFFSETS, max_answer_length=4) == (6.0, 6, 8)  # 4..8 is 5 tokens
    assert best_span(start, end, OFFSETS, max_answer_length=2) == (1.5, 6, 7)


def test_predict_answer_takes_the_best_window_and_cuts_the_context_by_offsets():
    context = "xx " + WINDOW_CONTEXT
    shifted = [None if o is None else (o[0] + 3, o[1] + 3) for o in OFFSETS]
    windows = [WindowLogits(logits({5: 2.0}), logits({5: 2.0}), shifted),           # "w1", score 4
               WindowLogits(logits({6: 3.0}), logits({7: 2.5}), shifted)]           # "w2 w3", score 5.5
    got = predict_answer(context, windows)
    assert (got.text, got.score, got.null_score) == ("w2 w3", 5.5, -20.0) and context[got.start:got.end] == "w2 w3"
    spaced = [(0, 3), (3, 6)]  # byte-level BPE keeps the leading space in a token's characters
    got = predict_answer(" ab cd", [WindowLogits([0, 1, 0, 0], [0, 0, 1, 0], [None, *spaced, None])])
    assert got.text == "ab cd" and (got.start, got.end) == (1, 6)


def test_the_null_threshold_decides_no_answer_in_squad_2():
    start, end = logits({0: 3.0, 5: 2.0}), logits({0: 3.0, 6: 2.0})  # null 6, best span 4
    windows = [WindowLogits(start, end, OFFSETS)]
    assert predict_answer(WINDOW_CONTEXT, windows, version_2=True).text == ""
    assert predict_answer(WINDOW_CONTEXT, windows, version_2=True, null_score_threshold=1.9).text == ""
    assert predict_answer(WINDOW_CONTEXT, windows, version_2=True, null_score_threshold=2.0).text == "w1 w2"
    assert predict_answer(WINDOW_CONTEXT, windows, version_2=False).text == "w1 w2"  # v1.1 always answers
    # the null score is the lowest over the windows
    other = WindowLogits(logits({0: -1.0, 5: 1.0}), logits({0: -1.0, 5: 1.0}), OFFSETS)
    got = predict_answer(WINDOW_CONTEXT, [*windows, other], version_2=True)
    assert got.null_score == -2.0 and got.text == "w1 w2"


def test_the_step_gathers_one_answer_per_example_and_scores_squad_2(words):
    examples = [{"question": QUESTION, "context": CONTEXT, "answers": [answer(9, 11)]},
                {"question": QUESTION, "context": "w4 w5", "answers": [{"text": "w5", "answer_start": 3}]},
                {"question": QUESTION, "context": "w4 w5", "answers": []}]
    batch = QACollator(words, 16, doc_stride=4)(examples)
    assert batch.row_example == [0, 0, 0, 0, 1, 2]
    scores = torch.zeros(batch.rows, batch.input_ids.shape[1], 2)
    scores[1, 6, 0] = scores[1, 8, 1] = 5.0   # example 0, window 1: w9 .. w11
    scores[4, 5, :] = 5.0                     # example 1: w5
    scores[5, 0, :] = 5.0                     # example 2: [CLS] wins
    config = SimpleNamespace(n_best=20, max_answer_length=30, null_score_threshold=0.0, dataset="")
    step = QAStep(config, None, "cpu", task=EXTRACTIVE_QA, labels=[])
    assert not step.version_2  # no dataset to say so
    step.version_2 = True
    step.start_validation()
    step.gather(scores, batch)
    assert step.predictions == ["w9 w10 w11", "w5", ""] and step.references == [["w9 w10 w11"], ["w5"], []]
    values = step.finish_validation()
    assert values["exact_match"] == values["f1"] == 1.0 and values["no_ans_f1"] == 1.0


# ---------------------------------------------------------------------------- end to end
def test_fine_tuning_on_the_demo_dataset_reports_squad_scores_for_validation_and_test(trained_run, tmp_path,
                                                                                     monkeypatch):
    from models_lib.checkpoint import load_model

    from trainer.finetune import qa

    from trainer.finetune.engine import finetune
    from trainer.prep.labelled import DEMOS, ingest, read_meta, sniff, write_demo_dataset
    from trainer.training.sinks import ListSink

    source = write_demo_dataset("extractive_qa", tmp_path / DEMOS["extractive_qa"].filename)
    preview = sniff(source, source.name)
    ingest(source, tmp_path / "qa", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    assert sum(read_meta(tmp_path / "qa")["unanswerable"].values()) > 0  # SQuAD 2.0-like
    built, real = [], qa.QACollator
    monkeypatch.setattr(qa, "QACollator", lambda *args, **kw: built.append(kw) or real(*args, **kw))
    sink = ListSink()
    config = FinetuneConfig(checkpoint=str(trained_run[0].last_checkpoint), dataset=str(tmp_path / "qa"),
                            max_length=64, doc_stride=16, max_steps=30, batch_size=16, lr=2e-3, eval_every=15,
                            checkpoint_every=30, log_every=10, device="cpu")
    result = finetune(config, out_dir=tmp_path / "run", sink=sink)
    assert result.status == "succeeded" and result.final_step == 30
    assert built == [{"doc_stride": 16}]  # the engine hands the task its settings
    valid = [v for _, split, v in sink.events if split == "valid"]
    (_, _, test), = [e for e in sink.events if e[1] == "test"]
    assert len(valid) == 2
    for values in (valid[-1], test):
        for key in ("exact_match", "f1", "has_ans_exact_match", "has_ans_f1", "no_ans_exact_match", "no_ans_f1"):
            assert 0.0 <= values[key] <= 1.0, (key, values)
        assert math.isfinite(values["loss"])
    assert json.loads((tmp_path / "run" / "test_metrics.json").read_text()) == pytest.approx(test)
    assert any(line.startswith("Test split: f1") and line.endswith("over 73 examples.") for line in sink.lines)
    model = load_model(result.last_checkpoint)
    assert type(model).__name__ == "EncoderForQuestionAnswering"
