"""Fine-tuning tasks: what a labelled example becomes for the model, and how a step scores it.

A `Task` is the fine-tuning counterpart of a pre-training Objective (trainer.objectives.base):
it names the labelled-dataset task it reads (trainer.prep.labelled.TASKS), the models_lib head
it trains (models_lib.families.downstream), its collator (examples -> a batch, tokenised on the
fly with dynamic padding) and its Step (the loss; over the validation set, the task's metrics
from trainer.finetune.metrics, through Step.finish_validation).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import torch

from models_lib.core.packing import Packed
from models_lib.heads import tasks as heads
from trainer.errors import ConfigError
from trainer.finetune import baselines as baseline_fns
from trainer.finetune import metrics as metric_fns
from trainer.objectives.base import Step, StepOutput
from trainer.objectives.packing import PackableBatch, PackingCollator, pack_rows

IGNORE_INDEX = -100


# ---------------------------------------------------------------------------- batches
@dataclass(kw_only=True)
class TaskBatch(PackableBatch):
    """A batch of an encoder's task head, which may come packed (trainer.objectives.packing):
    input_ids, attention_mask and token_type_ids (R, L). Everything else stays as the padded
    batch had it (`PACKING_KEEPS`): one label per example, per-token labels in the padded (B, T)
    layout, where the model gives its per-token outputs back (padded_index), so that losses,
    metrics and predictions read the padded batch's positions. Its fields are keyword-only,
    after those of the batch classes below."""

    PACKING_KEEPS: ClassVar[tuple[str, ...]] = ("labels", "words")

    padded_index: torch.Tensor | None = None  # (N,) long: each real token's flat index in the padded (B, T)
    padded_width: int = 0                     # T of the padded layout

    @property
    def packed(self) -> Packed | None:
        """The packing the model takes (`packed=`), with the way back to the padded layout."""
        packed = super().packed
        return None if packed is None else packed._replace(padded_index=self.padded_index,
                                                           padded_width=self.padded_width)

    def with_packed(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """`inputs` plus `packed` for a packed batch."""
        return inputs if self.segments is None else {**inputs, "packed": self.packed}


@dataclass
class SequenceBatch(TaskBatch):
    """One sentence or a pair per row, and one target per row."""

    token_type_ids: torch.Tensor   # (B, T) 0 = first text, 1 = second
    labels: torch.Tensor           # (B,) class ids; (B,) floats for regression; (B, C) 0/1 for multi-label

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return self.with_packed({"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                                 "token_type_ids": self.token_type_ids, "labels": self.labels})


@dataclass
class TokenBatch(TaskBatch):
    """Pre-split words per row; the first sub-token of each word carries its tag."""

    token_type_ids: torch.Tensor
    labels: torch.Tensor           # (B, T) tag ids, -100 on special tokens and later sub-tokens
    words: list[int] | None = None  # words per row (what the tags are scored over)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return self.with_packed({"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                                 "token_type_ids": self.token_type_ids, "labels": self.labels})


# ---------------------------------------------------------------------------- collators
class EncodesAhead:
    """A collator whose batches are collate(examples, encode(examples)).

    The training stream (trainer.finetune.engine.ExampleStream, and mixing.MixedStream) calls
    encode once over the whole train split and collate per batch, so an example is tokenised once
    per run, not once per epoch, and its length is known before batching (length-grouped
    batches). What encode returns per example is the collator's own; `len()` of it is the length
    that batches are grouped by, and it may have `pad_rows` (see padded_tokens) where one
    length does not tell the batch's padding. A subclass that overrides __call__ is tokenised per
    batch (encodes_ahead)."""

    def __call__(self, examples: Sequence[dict]) -> Any:
        return self.collate(examples, self.encode(examples))

    def encode(self, examples: Sequence[dict]) -> list[Any]:
        raise NotImplementedError

    def collate(self, examples: Sequence[dict], encoded: Sequence[Any]) -> Any:
        raise NotImplementedError


def padded_tokens(encoded: Sequence[Any]) -> tuple[int, int]:
    """(real, padded) tokens of one batch of encoded examples. An example's `pad_rows` lists, for
    each tensor that is padded on its own (T5's inputs and its targets), the lengths of the rows it
    adds to it (QA: one per window; GPT-1: one per order or choice); without it, one row of len()."""
    parts: list[list[int]] = []
    for e in encoded:
        rows = getattr(e, "pad_rows", None) or ((len(e),),)
        parts += [[] for _ in range(len(rows) - len(parts))]
        for part, lengths in zip(parts, rows):
            part += lengths
    real = sum(sum(part) for part in parts)
    return real, sum(len(part) * max(part) for part in parts if part)


class _Collator(EncodesAhead):
    """Tokenises with the checkpoint's tokenizer (its post-processor adds [CLS]/[SEP]), cutting
    to max_length, and pads each batch to its longest row; it encodes ahead (EncodesAhead)."""

    def __init__(self, tokenizer: Any, labels: Sequence[str], max_length: int):
        self.tok = tokenizer.tok.__class__.from_str(tokenizer.tok.to_str())  # a copy to set truncation on
        self.tok.no_padding()
        self.tok.enable_truncation(max_length)
        self.pad_id = int(tokenizer.pad_id)
        self.labels = list(labels)
        self.index = {name: i for i, name in enumerate(self.labels)}
        self.seq_len = max_length

    @property
    def needs_word_starts(self) -> bool:
        return False

    @staticmethod
    def _encoded(encodings: Sequence[Any], words: bool = False) -> list["Encoded"]:
        return [Encoded(np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64),
                        tuple(e.word_ids) if words else None) for e in encodings]

    def _pad(self, encoded: Sequence["Encoded"]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        T = max(len(e.ids) for e in encoded)
        ids = np.full((len(encoded), T), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encoded), T), dtype=np.int64)
        types = np.zeros((len(encoded), T), dtype=np.int64)
        for i, e in enumerate(encoded):
            n = len(e.ids)
            ids[i, :n] = e.ids
            mask[i, :n] = 1
            types[i, :n] = e.type_ids
        return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types)

    def label_id(self, value: Any) -> int:
        try:
            return self.index[str(value)]
        except KeyError:
            raise ConfigError(f"The label {value!r} is not one of the dataset's labels "
                              f"({', '.join(self.labels[:10])}).") from None


@dataclass(frozen=True)
class Encoded:
    """One tokenised example, as a collator keeps it between encode and collate."""

    ids: np.ndarray                              # (n,) token ids, [CLS]/[SEP] included, cut to max_length
    type_ids: np.ndarray                         # (n,) 0 = first text, 1 = second
    word_ids: tuple[int | None, ...] | None = None  # per token, its word (token classification)

    def __len__(self) -> int:
        return len(self.ids)


def encodes_ahead(collator: Any) -> bool:
    """Whether `collator`'s batches are collate(examples, encode(examples)), so that the examples
    can be encoded once ahead of batching (a subclass that tokenises its own way in __call__ is
    not)."""
    return isinstance(collator, EncodesAhead) and type(collator).__call__ is EncodesAhead.__call__


class PackingTaskCollator(EncodesAhead, PackingCollator):
    """A task collator (SequenceCollator, TokenCollator, QACollator) whose batches come packed
    (pack_rows; TaskBatch says what stays as it was). Each batch's rows are as wide as its longest
    example, so attention never spans more than in the padded batch, and a batch is packed
    whenever some position is padding: even where no row is saved, the token-wise layers then
    compute the real tokens only. It encodes ahead as the wrapped collator does (EncodesAhead),
    and every other attribute is the wrapped collator's."""

    def encode(self, examples: Sequence[dict]) -> list[Any]:
        return self.inner.encode(examples)

    def collate(self, examples: Sequence[dict], encoded: Sequence[Any]) -> Any:
        batch = self.inner.collate(examples, encoded)
        return pack_rows(batch, seq_len=int(batch.input_ids.shape[1]), pad_id=self.pad_id, unpad=True)


def model_inputs(model: Any, batch: Any) -> dict[str, Any]:
    """The batch's model inputs, without token types for a model that has none (DistilBERT)."""
    inputs = batch.model_inputs()
    if not getattr(getattr(model, "config", None), "type_vocab_size", 2):
        inputs["token_type_ids"] = None
    return inputs


class SequenceCollator(_Collator):
    def __init__(self, tokenizer: Any, labels: Sequence[str], max_length: int, problem: str):
        super().__init__(tokenizer, labels, max_length)
        self.problem = problem

    def encode(self, examples: Sequence[dict]) -> list[Encoded]:
        if not examples:
            return []
        if "text" in examples[0]:
            encodings = self.tok.encode_batch([ex["text"] for ex in examples])
        else:
            encodings = self.tok.encode_batch([(ex["sentence1"], ex["sentence2"]) for ex in examples])
        return self._encoded(encodings)

    def collate(self, examples: Sequence[dict], encoded: Sequence[Encoded]) -> SequenceBatch:
        ids, mask, types = self._pad(encoded)
        if self.problem == heads.REGRESSION:
            labels = torch.tensor([float(ex["label"]) for ex in examples], dtype=torch.float)
        elif self.problem == "multi_label_classification":
            labels = torch.zeros((len(examples), len(self.labels)), dtype=torch.float)
            for i, ex in enumerate(examples):
                for name in ex["label"]:
                    labels[i, self.label_id(name)] = 1.0
        else:
            labels = torch.tensor([self.label_id(ex["label"]) for ex in examples], dtype=torch.long)
        return SequenceBatch(ids, mask, types, labels)


class TokenCollator(_Collator):
    def encode(self, examples: Sequence[dict]) -> list[Encoded]:
        if not examples:
            return []
        encodings = self.tok.encode_batch([list(ex["tokens"]) for ex in examples], is_pretokenized=True)
        return self._encoded(encodings, words=True)

    def collate(self, examples: Sequence[dict], encoded: Sequence[Encoded]) -> TokenBatch:
        ids, mask, types = self._pad(encoded)
        labels = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.long)
        words = []
        for i, (ex, enc) in enumerate(zip(examples, encoded)):
            seen = set()
            for t, w in enumerate(enc.word_ids or ()):
                if w is not None and w not in seen:  # the first sub-token of each word
                    seen.add(w)
                    labels[i, t] = self.label_id(ex["tags"][w])
            words.append(len(ex["tags"]))
        return TokenBatch(ids, mask, types, labels, words)


# ---------------------------------------------------------------------------- steps
class TaskStep(Step):
    """The loss of a batch; over the validation set, the task's metrics on every prediction."""

    task: "Task"
    class_weights: torch.Tensor | None = None  # (C,) on the device: the loss's weight per class (techniques)
    sink: Any = None  # the run's MetricsSink (set by the engine): generative tasks log sample outputs to it

    def __init__(self, config: Any, model: Any, device: str, *, task: "Task", labels: Sequence[str]):
        super().__init__(config, model, device)
        self.task, self.labels = task, list(labels)
        self.predictions: list[Any] = []
        self.references: list[Any] = []
        self.scores: list[float | None] = []  # the model's confidence per prediction, where the step gives one

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"task_loss": 1.0}

    def __call__(self, batch: Any, *, train: bool) -> StepOutput:
        weighted = {} if self.class_weights is None else {"class_weights": self.class_weights}
        out = self.model(**model_inputs(self.model, batch), label_smoothing=self.config.label_smoothing
                         if self.task.smoothing else 0.0, **weighted)
        if not train:
            self.gather(out.logits.detach(), batch)
        return StepOutput(out.loss, {"task_loss": out.loss.detach().float()}, {"task_loss": float(batch.size)})

    def start_validation(self) -> None:
        self.predictions, self.references, self.scores = [], [], []

    def finish_validation(self) -> dict[str, float]:
        if not self.references:
            return {}
        return self.task.scores().compute(self.predictions, self.references)

    def gather(self, logits: torch.Tensor, batch: Any) -> None:
        raise NotImplementedError

    # What the test split leaves behind (trainer.finetune.report); a task may override either.
    def prediction_records(self, examples: Sequence[dict]) -> list[dict]:
        """One row per example just scored: input, gold, predicted, score, correct; errors first."""
        from trainer.finetune import report

        return report.prediction_records(examples, self.predictions, self.references, self.scores)

    def test_report(self) -> dict | None:
        """The confusion matrix and per-class table of the examples just scored (None: the task has none)."""
        from trainer.finetune import report

        return report.test_report(self.task.scores(), self.predictions, self.references, self.labels)


class SequenceStep(TaskStep):
    def gather(self, logits: torch.Tensor, batch: SequenceBatch) -> None:
        predicted = self.model.predict(logits).cpu()
        labels = batch.labels.cpu()
        if self.task.problem == "multi_label_classification":  # the mean confidence of the label decisions
            p = torch.sigmoid(logits.float()).cpu()
            self.scores += torch.maximum(p, 1 - p).mean(-1).tolist()
        elif self.task.problem != heads.REGRESSION:  # the predicted class's probability
            self.scores += torch.softmax(logits.float(), -1).max(-1).values.cpu().tolist()
        else:
            self.scores += [None] * labels.shape[0]
        if self.task.problem == heads.REGRESSION:
            self.predictions += predicted.float().view(-1).tolist()
            self.references += labels.float().view(-1).tolist()
        elif self.task.problem == "multi_label_classification":
            self.predictions += [{self.labels[j] for j in row.nonzero().view(-1).tolist()} for row in predicted]
            self.references += [{self.labels[j] for j in row.nonzero().view(-1).tolist()} for row in labels]
        else:
            self.predictions += [self.labels[i] for i in predicted.tolist()]
            self.references += [self.labels[i] for i in labels.tolist()]


class TokenStep(TaskStep):
    def gather(self, logits: torch.Tensor, batch: TokenBatch) -> None:
        predicted, labels = logits.argmax(-1).cpu(), batch.labels.cpu()
        confidence = torch.softmax(logits.float(), -1).max(-1).values.cpu()
        for row in range(labels.shape[0]):
            scored = labels[row] != IGNORE_INDEX  # one position per word that survived truncation
            # the mean probability of the predicted tags over the sentence's words
            self.scores.append(float(confidence[row][scored].mean()) if bool(scored.any()) else None)
            self.predictions.append([self.labels[i] for i in predicted[row][scored].tolist()])
            self.references.append([self.labels[i] for i in labels[row][scored].tolist()])


# ---------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """One fine-tuning task (see the module docstring)."""

    name: str            # the labelled dataset's task (trainer.prep.labelled.TASKS)
    label: str
    head: str            # models_lib.families.downstream task
    problem: str | None  # models_lib problem_type (sequence classification)
    collator: type
    step: type[TaskStep]
    metrics: str         # trainer.finetune.metrics.METRICS key
    smoothing: bool = False  # label smoothing applies (softmax over classes)
    families: tuple[str, ...] = ()  # the model families it fine-tunes; () = the encoders, through a task head
    # What the web app reads to offer, chart and explore it (docs/internals.md, "How to add a task"):
    settings: tuple = ()          # its own trainer.finetune.settings.Setting rows (QA's doc_stride, T5's prefix)
    generates: bool = False       # it writes text at validation (the run page's Samples panel)
    explorer_action: str = ""     # the explorer's tool for its checkpoints ("classify", "tag", ...; "": by family)
    balances_classes: bool = False  # class_weights "balanced" applies (trainer.finetune.techniques)
    scoring: Any = None           # its own trainer.finetune.metrics.TaskMetrics; None: METRICS[metrics]
    charts: tuple = ()            # its own trainer.charts.ChartSpec rows, beside FINETUNE_CHARTS
    dataset: Any = None           # its own trainer.prep.labelled.TaskSpec; None: TASKS[name]
    packs: bool = False           # its collator's batches are TaskBatches and its step passes them packed
                                  # (trainer.finetune.engine.packing): an encoder's head computes real tokens only
    chats: bool = False           # it learns the run's chat_template: its checkpoints write chat prompts in it
    baselines: tuple = ()         # trainer.finetune.baselines.Baseline rows its datasets are scored with
    references: Callable[[Sequence[dict]], list] | None = None  # examples -> the gold answers its metric
                                  # scores the baselines against (None: it has no baselines)
    no_baseline: str = ""         # why it has none, when it has none (the dataset page says so)
                                  # (trainer.inference.generate.chat_template)

    def scores(self, dataset: Any = "") -> Any:
        """The TaskMetrics it is scored, charted and ranked with on the stored dataset `dataset`
        (a task may score some datasets another way: extractive QA with unanswerable questions)."""
        return self.scoring if self.scoring is not None else metric_fns.METRICS[self.metrics]

    @property
    def dataset_spec(self) -> Any:
        """The labelled-dataset task it reads (its roles, title and labels), or None."""
        from trainer.prep.labelled.tasks import TASKS

        return self.dataset if self.dataset is not None else TASKS.get(self.name)

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        """The model to train from the loaded checkpoint `base`: its encoder with a fresh head
        (models_lib.families.downstream.from_pretraining). Generative tasks train `base` itself.
        TypeError or ValueError when `base` cannot take the head."""
        from models_lib.families.downstream import from_pretraining

        return from_pretraining(base, self.head, self.num_labels(labels), labels=labels if self.has_classes else None,
                                problem_type=self.problem)

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        """`config` (the FinetuneConfig) is for tasks with settings of their own (QA's doc_stride)."""
        if self.collator is SequenceCollator:
            return SequenceCollator(tokenizer, labels, max_length, self.problem or "single_label_classification")
        return self.collator(tokenizer, labels, max_length)

    def num_labels(self, labels: Sequence[str]) -> int:
        return 1 if self.problem == heads.REGRESSION else len(labels)

    @property
    def writes_labels(self) -> bool:
        """Its checkpoints answer a classification by writing the label (or the score) as text (T5's
        text-to-text classification and regression, trainer.finetune.text_classify)."""
        return False

    @property
    def has_classes(self) -> bool:
        """Whether the dataset's labels are the model's classes (regression's scores and QA's spans are not)."""
        return self.problem != heads.REGRESSION


CLASSIFICATION = Task("classification", "Sequence classification (one sentence or a pair)", "sequence_classification",
                      "single_label_classification", SequenceCollator, SequenceStep, "classification", smoothing=True,
                      explorer_action="classify", balances_classes=True, packs=True,
                      baselines=baseline_fns.CLASSIFICATION, references=baseline_fns.class_references)
REGRESSION = Task("regression", "Regression (one score per sentence or pair, MSE)", "sequence_classification",
                  "regression", SequenceCollator, SequenceStep, "regression", explorer_action="classify", packs=True,
                  baselines=baseline_fns.REGRESSION, references=baseline_fns.score_references)
MULTILABEL = Task("multilabel", "Multi-label classification (a sigmoid per label)", "sequence_classification",
                  "multi_label_classification", SequenceCollator, SequenceStep, "multilabel_classification",
                  explorer_action="classify", packs=True, baselines=baseline_fns.MULTILABEL,
                  references=baseline_fns.label_set_references)
TOKEN_CLASSIFICATION = Task("token_classification", "Token classification (BIO tags; the first sub-token of "
                            "each word carries its tag)", "token_classification", None, TokenCollator, TokenStep,
                            "token_classification", smoothing=True, explorer_action="tag", balances_classes=True,
                            packs=True, baselines=baseline_fns.TOKEN_CLASSIFICATION,
                            references=baseline_fns.tag_references)
