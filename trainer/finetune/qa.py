"""Extractive question answering (SQuAD v1.1 and v2.0) as a fine-tuning task, the way BERT did SQuAD.

Features. The question and the context are encoded as a pair by the checkpoint's tokenizer (its
post-processor adds [CLS] and the separators), with the characters of every token. Only the
context is cut: a context longer than a window goes into several overlapping windows, each
repeating the question, consecutive windows sharing `doc_stride` context tokens (0: a third of
max_length; a question so long that the window cannot hold that much context shares half of
what is left, and a question longer than half the window is itself cut there, as BERT cut it at
64 of 384 tokens). Each window is labelled with the answer's first and last token when the
whole answer lies inside it, else with the [CLS] token (position 0) for both, which is also
the label of every window of an unanswerable question (SQuAD 2.0).

Training. The collator turns a batch of examples into their windows, so a batch has at least
as many rows as examples (long contexts give more); the model (EncoderForQuestionAnswering)
takes start_positions and end_positions. The train split is cut into windows once, ahead, and
batched by each example's longest window (EncodedQA).

Prediction. For each example, every window proposes the pairs of its `n_best` highest start
logits and `n_best` highest end logits that lie in the context, end at or after the start and
span at most `max_answer_length` tokens, scored start + end logit; the best over all windows
wins, and its text is cut from the original context by the tokens' character offsets. When
the dataset has unanswerable questions, "no answer" is predicted instead when the null score
(the [CLS] start + end logit, its lowest over the windows) beats that best span by more than
`null_score_threshold`. Scores: trainer.finetune.metrics.extractive_qa_metrics, version_2 for
such datasets ("extractive_qa_v2" in METRICS), else v1.1.

    collator = EXTRACTIVE_QA.build_collator(tokenizer, [], max_length=384, config=config)
    collator.windows(question, context, answers)     # -> [Window(ids, type_ids, offsets, start, end)]
    predict_answer(context, [WindowLogits(start_logits, end_logits, offsets), ...], n_best=20,
                   max_answer_length=30, null_score_threshold=0.0, version_2=True)   # -> Answer
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError
from trainer.finetune import baselines as baseline_fns
from trainer.finetune import metrics as metric_fns
from trainer.finetune.settings import Setting
from trainer.finetune.tasks import EncodesAhead, Task, TaskBatch, TaskStep, model_inputs
from trainer.objectives.base import StepOutput

CLS_POSITION = 0  # where the post-processor puts [CLS] (RoBERTa's <s>): the "no answer" label

Offsets = list[tuple[int, int] | None]  # per token: its characters in the context; None outside the context


def default_doc_stride(max_length: int) -> int:
    """What doc_stride 0 stands for: a third of max_length (128 at 384, the published SQuAD setting)."""
    return max_length // 3


# ---------------------------------------------------------------------------- features
@dataclass
class Window:
    """One row of the model's input: the question and a stretch of the context."""

    ids: list[int]
    type_ids: list[int]
    offsets: Offsets
    start_position: int = CLS_POSITION  # the answer's first token in this window; [CLS] when it is not here
    end_position: int = CLS_POSITION    # its last token

    @property
    def context_tokens(self) -> list[int]:
        return [i for i, o in enumerate(self.offsets) if o is not None]


@dataclass
class QABatch(TaskBatch):
    """The windows of a few examples (every window of each of them, in order). Packed, each
    window is one of the packing's examples (TaskBatch), and the answer positions stay those of
    the padded rows: the model gives its logits back in that layout."""

    PACKING_KEEPS: ClassVar[tuple[str, ...]] = ("start_positions", "end_positions", "row_example", "offsets",
                                                "contexts", "answers")

    token_type_ids: torch.Tensor
    start_positions: torch.Tensor   # (R,) R rows: the windows
    end_positions: torch.Tensor     # (R,)
    row_example: list[int]          # per row: which example (index into contexts) it is a window of
    offsets: list[Offsets]          # per row
    contexts: list[str]             # per example
    answers: list[list[str]]        # per example: its gold answer texts ([] = unanswerable)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return self.with_packed({"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                                 "token_type_ids": self.token_type_ids, "start_positions": self.start_positions,
                                 "end_positions": self.end_positions})

    @property
    def size(self) -> int:
        """Examples, not rows: what "over N examples" counts."""
        return len(self.contexts)

    @property
    def rows(self) -> int:
        """Windows (rows of the padded batch; a packed batch has fewer rows)."""
        return int(self.start_positions.shape[0])


class QACollator(EncodesAhead):
    """Examples {"question", "context", "answers": [{"text", "answer_start"}, ...]} -> a QABatch
    of their windows, padded to the longest. Training reads the first answer; every answer's text
    is kept for scoring. One collator per thread (it sets the tokenizer's truncation per example).
    It encodes ahead (EncodesAhead: the train split is cut into windows once; EncodedQA)."""

    def __init__(self, tokenizer: Any, max_length: int, *, doc_stride: int = 0):
        source = tokenizer.tok.to_str()
        self.plain = tokenizer.tok.__class__.from_str(source)  # questions alone, uncut
        self.plain.no_truncation()
        self.plain.no_padding()
        self.tok = tokenizer.tok.__class__.from_str(source)  # the pairs, cut into windows
        self.tok.no_padding()
        self.pad_id = int(tokenizer.pad_id)
        self.seq_len = max_length
        self.doc_stride = doc_stride or default_doc_stride(max_length)
        self.room = max_length - self.tok.num_special_tokens_to_add(True)  # question + context tokens
        if self.room < 2:
            raise ConfigError(f"max_length {max_length} leaves no room for a question and its context.")
        if self.doc_stride >= max_length // 2:
            raise ConfigError(f"doc_stride must be less than half of max_length ({max_length // 2}), so that each "
                              "window moves on past the last; 0 picks a third of max_length.")

    @property
    def needs_word_starts(self) -> bool:
        return False

    def _question(self, question: str) -> tuple[str, int]:
        """The question, cut to half the window when longer, and its length in tokens."""
        longest = self.room // 2
        enc = self.plain.encode(question, add_special_tokens=False)
        keep = longest
        while len(enc.ids) > longest and keep > 0:  # re-encoding the cut text may (rarely) merge differently
            question = question[: enc.offsets[keep - 1][1]]
            enc, keep = self.plain.encode(question, add_special_tokens=False), keep - 1
        return question, len(enc.ids)

    def windows(self, question: str, context: str, answers: Sequence[dict] = ()) -> list[Window]:
        """Every window of one example, labelled with the first of `answers` (none: unanswerable)."""
        question, n_question = self._question(question)
        context_room = self.room - n_question
        stride = self.doc_stride if self.doc_stride < context_room else context_room // 2
        self.tok.enable_truncation(self.seq_len, stride=stride, strategy="only_second")
        first = self.tok.encode(question, context)
        out = []
        for enc in (first, *first.overflowing):
            if enc.sequence_ids[CLS_POSITION] is not None:
                raise ConfigError("The checkpoint's tokenizer puts no [CLS] token first, so it cannot mark "
                                  "\"no answer\" for question answering.")
            offsets: Offsets = [tuple(o) if s == 1 else None for o, s in zip(enc.offsets, enc.sequence_ids)]
            window = Window(list(enc.ids), list(enc.type_ids), offsets)
            if answers:
                window.start_position, window.end_position = answer_positions(offsets, answers[0])
            out.append(window)
        return out

    def encode(self, examples: Sequence[dict]) -> list["EncodedQA"]:
        """Every example's windows (EncodesAhead), kept as arrays: a train split of long contexts
        holds many windows."""
        return [EncodedQA.of(self.windows(ex["question"], ex["context"], ex.get("answers") or ())) for ex in examples]

    def collate(self, examples: Sequence[dict], encoded: Sequence["EncodedQA"]) -> QABatch:
        rows: list[Window] = []
        row_example: list[int] = []
        for i, enc in enumerate(encoded):
            windows = enc.windows()
            rows += windows
            row_example += [i] * len(windows)
        T = max(len(w.ids) for w in rows)
        ids = np.full((len(rows), T), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), T), dtype=np.int64)
        types = np.zeros((len(rows), T), dtype=np.int64)
        for r, w in enumerate(rows):
            ids[r, : len(w.ids)] = w.ids
            mask[r, : len(w.ids)] = 1
            types[r, : len(w.ids)] = w.type_ids
        starts = torch.tensor([w.start_position for w in rows], dtype=torch.long)
        ends = torch.tensor([w.end_position for w in rows], dtype=torch.long)
        return QABatch(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types), starts, ends,
                       row_example, [w.offsets for w in rows], [ex["context"] for ex in examples],
                       baseline_fns.answer_references(examples))


@dataclass(frozen=True)
class EncodedQA:
    """One example's windows between encode and collate: per window its ids, type ids, offsets
    ((n, 2), -1 outside the context) and answer positions.

    Its length, what length-grouped batches sort by, is its longest window: a batch is padded to
    the longest window of its examples, so that is what decides its padding. An example whose
    context takes several windows has every window but the last at max_length, and so sorts with
    the other long contexts. (Its total tokens would sort examples by how many windows they have,
    which evens out the rows per batch, not the padding within them.)"""

    ids: tuple[np.ndarray, ...]
    type_ids: tuple[np.ndarray, ...]
    offsets: tuple[np.ndarray, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def of(cls, windows: Sequence[Window]) -> "EncodedQA":
        return cls(tuple(np.asarray(w.ids, dtype=np.int32) for w in windows),
                   tuple(np.asarray(w.type_ids, dtype=np.int8) for w in windows),
                   tuple(np.array([o if o is not None else (-1, -1) for o in w.offsets], dtype=np.int32).reshape(-1, 2)
                         for w in windows),
                   tuple(w.start_position for w in windows), tuple(w.end_position for w in windows))

    def windows(self) -> list[Window]:
        return [Window(ids.tolist(), types.tolist(), [None if a < 0 else (a, b) for a, b in offsets.tolist()], s, e)
                for ids, types, offsets, s, e in zip(self.ids, self.type_ids, self.offsets, self.starts, self.ends)]

    def __len__(self) -> int:
        return max(len(ids) for ids in self.ids)

    @property
    def pad_rows(self) -> tuple[tuple[int, ...]]:
        return (tuple(len(ids) for ids in self.ids),)


def answer_positions(offsets: Offsets, answer: dict) -> tuple[int, int]:
    """The first and last token of `answer` ({"text", "answer_start"}) in a window whose tokens
    cover `offsets` of the context; (CLS_POSITION, CLS_POSITION) unless all of it is inside."""
    begin = answer["answer_start"]
    end = begin + len(answer["text"])
    inside = [i for i, o in enumerate(offsets) if o is not None]
    if not inside or offsets[inside[0]][0] > begin or offsets[inside[-1]][1] < end:
        return CLS_POSITION, CLS_POSITION
    first = max(i for i in inside if offsets[i][0] <= begin)  # the token holding the answer's first character
    last = min(i for i in inside if i >= first and offsets[i][1] >= end)  # ... and its last
    return first, last


# ---------------------------------------------------------------------------- prediction
class WindowLogits(NamedTuple):
    """The model's output for one window: start and end logits (padding may follow) and its offsets."""

    start_logits: Sequence[float]
    end_logits: Sequence[float]
    offsets: Offsets


@dataclass(frozen=True)
class Answer:
    text: str          # "" = no answer
    start: int         # its characters in the context: context[start:end] == text (-1, -1: no answer)
    end: int
    score: float       # the best span's start + end logit (-inf: no span was possible)
    null_score: float  # the lowest [CLS] start + end logit over the windows


def best_span(start_logits: Sequence[float], end_logits: Sequence[float], offsets: Offsets, *,
              n_best: int = 20, max_answer_length: int = 30) -> tuple[float, int, int] | None:
    """(score, first token, last token) of the best span of one window: among its n_best highest
    start and n_best highest end logits, the pairs inside the context with first <= last and
    at most max_answer_length tokens, scored start + end logit. None when no pair qualifies."""
    n = len(offsets)
    starts = np.asarray(start_logits, dtype=np.float64)[:n]
    ends = np.asarray(end_logits, dtype=np.float64)[:n]
    in_context = np.array([o is not None for o in offsets], dtype=bool)
    first = np.argsort(-starts, kind="stable")[:n_best]  # highest first
    last = np.argsort(-ends, kind="stable")[:n_best]
    first, last = first[in_context[first]], last[in_context[last]]
    length = last[None, :] - first[:, None] + 1  # (starts, ends)
    allowed = (length >= 1) & (length <= max_answer_length)
    if not allowed.any():
        return None
    scores = np.where(allowed, starts[first][:, None] + ends[last][None, :], -np.inf)
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)  # ties: the higher start logit, then end
    return float(scores[i, j]), int(first[i]), int(last[j])


def predict_answer(context: str, windows: Sequence[WindowLogits], *, n_best: int = 20, max_answer_length: int = 30,
                   null_score_threshold: float = 0.0, version_2: bool = False) -> Answer:
    """One example's answer from all its windows (see the module docstring)."""
    best: tuple[float, int, int] | None = None  # score, first and last character
    null = math.inf
    for w in windows:
        null = min(null, float(w.start_logits[CLS_POSITION]) + float(w.end_logits[CLS_POSITION]))
        span = best_span(w.start_logits, w.end_logits, w.offsets, n_best=n_best, max_answer_length=max_answer_length)
        if span is not None and (best is None or span[0] > best[0]):
            best = (span[0], w.offsets[span[1]][0], w.offsets[span[2]][1])
    if best is None or (version_2 and null - best[0] > null_score_threshold):
        return Answer("", -1, -1, -math.inf if best is None else best[0], null)
    score, begin, end = best
    while begin < end and context[begin].isspace():  # byte-level BPE and Unigram tokens carry their leading space
        begin += 1
    while end > begin and context[end - 1].isspace():
        end -= 1
    return Answer(context[begin:end], begin, end, score, null)


# ---------------------------------------------------------------------------- step and task
class QAStep(TaskStep):
    """The span loss of a batch; over the validation set, one answer per example and SQuAD's scores."""

    def __init__(self, config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]):
        super().__init__(config, model, device, task=task, labels=labels)
        self.n_best, self.max_answer_length = int(config.n_best), int(config.max_answer_length)
        self.null_score_threshold = float(config.null_score_threshold)
        self.version_2 = has_unanswerable(getattr(config, "dataset", ""))

    def __call__(self, batch: QABatch, *, train: bool) -> StepOutput:
        out = self.model(**model_inputs(self.model, batch))
        if not train:
            self.gather(torch.stack((out.start_logits, out.end_logits), dim=-1).detach(), batch)
        return StepOutput(out.loss, {"task_loss": out.loss.detach().float()}, {"task_loss": float(batch.rows)})

    def gather(self, logits: torch.Tensor, batch: QABatch) -> None:
        """logits (R, T, 2): start and end per row. Each batch holds every window of its examples."""
        logits = logits.float().cpu().numpy()
        windows: dict[int, list[WindowLogits]] = defaultdict(list)
        for row, example in enumerate(batch.row_example):
            windows[example].append(WindowLogits(logits[row, :, 0], logits[row, :, 1], batch.offsets[row]))
        for example, context in enumerate(batch.contexts):
            answer = predict_answer(context, windows[example], n_best=self.n_best,
                                    max_answer_length=self.max_answer_length,
                                    null_score_threshold=self.null_score_threshold, version_2=self.version_2)
            self.predictions.append(answer.text)
            self.references.append(list(batch.answers[example]))
            self.scores.append(answer.score if math.isfinite(answer.score) else None)  # start + end logit

    def finish_validation(self) -> dict[str, float]:
        if not self.references:
            return {}
        version_2 = self.version_2 or any(not golds for golds in self.references)
        return metric_fns.METRICS["extractive_qa_v2" if version_2 else "extractive_qa"].compute(
            self.predictions, self.references)


def has_unanswerable(dataset: str | Path) -> bool:
    """Whether a stored dataset (trainer.prep.labelled) has a question without an answer in any split."""
    from trainer import finetune

    return finetune.has_unanswerable(dataset)


@dataclass(frozen=True)
class QATask(Task):
    """Extractive QA: no classes; the collator reads doc_stride from the FinetuneConfig."""

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        return QACollator(tokenizer, max_length, doc_stride=int(getattr(config, "doc_stride", 0) or 0))

    def num_labels(self, labels: Sequence[str]) -> int:
        return 2  # a start and an end logit per token

    def scores(self, dataset: Any = "") -> Any:
        """SQuAD 2.0's metrics (answerable and unanswerable apart) on a dataset with unanswerable questions."""
        return metric_fns.METRICS["extractive_qa_v2" if dataset and has_unanswerable(dataset) else "extractive_qa"]

    @property
    def has_classes(self) -> bool:
        return False


# QA does not pack (packs=False), though its batches, collator and model can: a padded batch's span
# loss spans each window's padding too (as transformers' does, which bench/finetune.py's parity
# checks step for step), and a packed batch computes no padding, so its loss leaves those terms out
# (EncoderForQuestionAnswering). Predictions and scores are the same either way; packs=True trades
# the loss's padding terms (and parity with transformers' loss) for computing real tokens only.
EXTRACTIVE_QA = QATask("extractive_qa", "Extractive question answering (SQuAD v1.1/v2.0: an answer span of the "
                       "context, or none)", "question_answering", None, QACollator, QAStep, "extractive_qa",
                       explorer_action="answer", baselines=baseline_fns.EXTRACTIVE_QA,
                       references=baseline_fns.answer_references, settings=(
                           Setting("doc_stride", "Window overlap (tokens)", "Context tokens that consecutive windows "
                                   "of a long context share (0: a third of the maximum length).", advanced=True,
                                   section="task"),
                           Setting("max_answer_length", "Longest answer (tokens)", "The longest answer prediction "
                                   "considers.", advanced=True, section="task"),
                           Setting("n_best", "Candidates per window", "How many of the highest start and end logits "
                                   "of each window are paired into candidate answers.", advanced=True, section="task"),
                           Setting("null_score_threshold", "No-answer threshold", "SQuAD 2.0: predict “no answer” "
                                   "when its score beats the best answer's by more than this.", advanced=True,
                                   section="task"),
                       ))
