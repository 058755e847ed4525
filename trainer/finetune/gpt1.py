"""GPT-1's fine-tuning (Radford et al. 2018, section 3.3) for classification, regression and
multiple-choice datasets on a GPT checkpoint: the input transformations, a linear head on the extract token's
state (models_lib.families.gpt_tasks.GPTForSequenceClassification) and the auxiliary LM loss.

Input transformations (start, delimiter and extract are new learned tokens):
- one text:                         start text extract
- a pair, classification (entailment): start premise delimiter hypothesis extract
- a pair, regression (similarity):  both orders, start a delimiter b extract and start b delimiter a
                                    extract, whose extract states are summed before the head
- multiple choice (GPTForMultipleChoice): one sequence per choice, start context [question]
                                    delimiter choice extract; a linear layer maps each extract state
                                    to a score, and a softmax over the example's choices picks one
Each row is cut to max_length (the longer text of a pair loses tokens first; for a choice, the
context loses its first tokens, the choice keeping at least half the room).

Loss: the task's (cross-entropy, label smoothing and class weights as for the encoders; MSE for
regression; cross-entropy over the choices for multiple choice) + aux_lm_weight (0.5 in the paper) x the next-token loss on the text tokens of the
same rows. Validation reports both parts and the task's metrics (trainer.finetune.metrics), as
for an encoder's classifier.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from models_lib.heads import tasks as heads
from trainer.errors import ConfigError
from trainer.finetune import baselines as baseline_fns
from trainer.finetune.settings import Setting
from trainer.finetune.tasks import SequenceCollator, SequenceStep, Task
from trainer.objectives.base import Batch, StepOutput

FAMILIES = ("gpt",)
AUX_LM = (Setting("aux_lm_weight", "Language-model loss weight", "GPT-1: the weight of the language-model loss "
                  "kept beside the task's (0.5 in the paper; 0: off).", advanced=True, section="task"),)


@dataclass
class GPT1Batch(Batch):
    """(B, T) rows, or (B, 2, T) for a pair read in both orders; right-padded."""

    labels: torch.Tensor

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class EncodedRows:
    """One GPT-1 example between encode and collate (EncodesAhead): its rows with the start,
    delimiter and extract tokens in place (one; two for a pair read in both orders; one per
    choice). Its length, what length-grouped batches sort by, is its longest row: the batch pads
    every row to the longest of all its examples' rows."""

    rows: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return max(len(r) for r in self.rows)

    @property
    def pad_rows(self) -> tuple[tuple[int, ...]]:
        return (tuple(len(r) for r in self.rows),)


def _pad_rows(encoded: Sequence[EncodedRows], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, k, T) ids and mask, right-padded to the longest row (padding: any real id, hidden by the mask)."""
    T = max(len(e) for e in encoded)
    ids = np.zeros((len(encoded), k, T), dtype=np.int64)
    mask = np.zeros((len(encoded), k, T), dtype=np.int64)
    for i, e in enumerate(encoded):
        for j, r in enumerate(e.rows):
            ids[i, j, :len(r)] = r
            mask[i, j, :len(r)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


class GPT1Collator(SequenceCollator):
    """Examples {"text"} or {"sentence1", "sentence2"} with a label -> a GPT1Batch. It encodes
    ahead (EncodesAhead, as SequenceCollator: the train split is tokenised once; EncodedRows)."""

    def __init__(self, tokenizer: Any, labels: Sequence[str], max_length: int, problem: str, vocab_size: int):
        super().__init__(tokenizer, labels, max_length, problem)
        self.tok.no_truncation()
        self.start, self.delimiter, self.extract = vocab_size, vocab_size + 1, vocab_size + 2
        if max_length < 5:
            raise ConfigError("max_length must leave room for the start, delimiter and extract tokens and some text.")

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def pair(self, a: list[int], b: list[int]) -> list[int]:
        a, b = list(a), list(b)
        while len(a) + len(b) > self.seq_len - 3:  # the longer one loses its last token
            (a if len(a) >= len(b) else b).pop()
        return [self.start, *a, self.delimiter, *b, self.extract]

    def encode(self, examples: Sequence[dict]) -> list[EncodedRows]:
        if not examples:
            return []
        if "text" in examples[0]:
            rows = [[[self.start, *ids[: self.seq_len - 2], self.extract]] for ids in self.ids(
                [ex["text"] for ex in examples])]
        else:
            first, second = self.ids([ex["sentence1"] for ex in examples]), self.ids([ex["sentence2"] for ex in examples])
            if self.problem == heads.REGRESSION:  # similarity: no order between the two
                rows = [[self.pair(a, b), self.pair(b, a)] for a, b in zip(first, second)]
            else:
                rows = [[self.pair(a, b)] for a, b in zip(first, second)]
        return [EncodedRows(tuple(np.asarray(r, dtype=np.int32) for r in row)) for row in rows]

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedRows]) -> GPT1Batch:
        ids, mask = _pad_rows(encoded, len(encoded[0].rows))
        if ids.shape[1] == 1:
            ids, mask = ids[:, 0], mask[:, 0]
        return GPT1Batch(ids, mask, self.labels_of(examples))

    def labels_of(self, examples: Sequence[dict]) -> torch.Tensor:
        if self.problem == heads.REGRESSION:
            return torch.tensor([float(ex["label"]) for ex in examples], dtype=torch.float)
        return torch.tensor([self.label_id(ex["label"]) for ex in examples], dtype=torch.long)


class GPT1Step(SequenceStep):
    """The task loss plus aux_lm_weight x the LM loss; validation gathers the task's predictions."""

    @property
    def loss_weights(self) -> dict[str, float]:
        return {"task_loss": 1.0, "lm_loss": float(self.config.aux_lm_weight)}

    def __call__(self, batch: GPT1Batch, *, train: bool) -> StepOutput:
        weighted = {} if self.class_weights is None else {"class_weights": self.class_weights}
        smoothing = self.config.label_smoothing if self.task.smoothing else 0.0
        out = self.model(**batch.model_inputs(), lm_weight=float(self.config.aux_lm_weight),
                         label_smoothing=smoothing, **weighted)
        if not train:
            self.gather(out.logits.detach(), batch)
        losses = {"task_loss": out.task_loss.detach().float()}
        weights: dict[str, Any] = {"task_loss": float(batch.size)}
        if out.lm_loss is not None:
            losses["lm_loss"] = out.lm_loss.detach().float()
            weights["lm_loss"] = float(batch.size)
        return StepOutput(out.loss, losses, weights)


def check_base(base: Any, config: Any, head: str) -> None:
    """What both of GPT-1's task heads need of the model they sit on: a GPT, with the positions
    for the run's max_length."""
    from models_lib.families.gpt import GPTLMHeadModel

    if not isinstance(base, GPTLMHeadModel):
        raise ValueError(f"GPT-1's {head} sits on a GPT model, not a {type(base).__name__}")
    if config is not None and config.max_length > base.max_positions:
        raise ConfigError(f"max_length {config.max_length} is more than this GPT model's {base.max_positions} "
                          f"positions; lower it.")


@dataclass(frozen=True)
class GPT1Task(Task):
    """Classification or regression on a GPT checkpoint (see the module docstring)."""

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.downstream import TaskConfig
        from models_lib.families.gpt_tasks import GPTForSequenceClassification

        check_base(base, config, "task head")
        spec = TaskConfig("sequence_classification", self.num_labels(labels),
                          list(labels) if self.has_classes else None, self.problem)
        return GPTForSequenceClassification.from_lm(base, spec)

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        from models_lib.checkpoint import read_model_config

        vocab_size = int(read_model_config(config.checkpoint)["config"]["vocab_size"])
        return GPT1Collator(tokenizer, labels, max_length, self.problem or "single_label_classification", vocab_size)


GPT_CLASSIFICATION = GPT1Task("classification", "Sequence classification (GPT-1: start/delimiter/extract tokens, "
                              "the auxiliary LM loss)", "sequence_classification", "single_label_classification",
                              GPT1Collator, GPT1Step, "classification", smoothing=True, families=FAMILIES,
                              settings=AUX_LM, explorer_action="classify", balances_classes=True)
GPT_REGRESSION = GPT1Task("regression", "Regression (GPT-1: a pair read in both orders, the auxiliary LM loss)",
                          "sequence_classification", "regression", GPT1Collator, GPT1Step, "regression",
                          families=FAMILIES, settings=AUX_LM, explorer_action="classify")


# ---------------------------------------------------------------------------- multiple choice
class GPT1ChoiceCollator(GPT1Collator):
    """Examples {"context" and/or "question", "choices", "label": index} -> a GPT1Batch of (B, K, T)
    ids, one sequence per choice: start context question delimiter choice extract."""

    def __init__(self, tokenizer: Any, max_length: int, vocab_size: int):
        super().__init__(tokenizer, [], max_length, "multiple_choice", vocab_size)

    def choice_row(self, first: list[int], choice: list[int]) -> list[int]:
        room = self.seq_len - 3
        choice = choice[: max(room // 2, room - len(first))]  # a long choice keeps half the room
        first = first[max(len(first) - (room - len(choice)), 0):]  # the context loses its first tokens
        return [self.start, *first, self.delimiter, *choice, self.extract]

    def encode(self, examples: Sequence[dict]) -> list[EncodedRows]:
        if not examples:
            return []
        firsts = self.ids([" ".join(ex[key] for key in ("context", "question") if key in ex) for ex in examples])
        choices = iter(self.ids([c for ex in examples for c in ex["choices"]]))
        return [EncodedRows(tuple(np.asarray(self.choice_row(first, next(choices)), dtype=np.int32)
                                  for _ in ex["choices"])) for ex, first in zip(examples, firsts)]

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedRows]) -> GPT1Batch:
        k = len(encoded[0].rows)
        if any(len(e.rows) != k for e in encoded):
            raise ConfigError("Every example of a multiple-choice batch needs as many choices; ingest the dataset "
                              "again.")
        ids, mask = _pad_rows(encoded, k)
        labels = torch.tensor([int(ex["label"]) for ex in examples], dtype=torch.long)
        if bool(((labels < 0) | (labels >= k)).any()):
            raise ConfigError(f"A multiple-choice label is outside its {k} choices; ingest the dataset again.")
        return GPT1Batch(ids, mask, labels)


class GPT1ChoiceStep(GPT1Step):
    """GPT1Step's loss; validation keeps the picked choice's index and its probability."""

    def gather(self, logits: torch.Tensor, batch: GPT1Batch) -> None:
        probs = torch.softmax(logits.float(), -1).cpu()
        self.predictions += probs.argmax(-1).tolist()
        self.references += batch.labels.cpu().tolist()
        self.scores += probs.max(-1).values.tolist()

    def prediction_records(self, examples: Sequence[dict]) -> list[dict]:
        """The test rows with the choices' texts as gold and predicted, the input "context ||| question"."""
        from trainer.finetune import report

        rows = report.prediction_records(
            [{"text": " ||| ".join(ex[k] for k in ("context", "question") if k in ex)} for ex in examples],
            [ex["choices"][p] for ex, p in zip(examples, self.predictions)],
            [ex["choices"][r] for ex, r in zip(examples, self.references)], self.scores)
        return rows


@dataclass(frozen=True)
class GPT1ChoiceTask(GPT1Task):
    """Multiple choice on a GPT checkpoint (see the module docstring)."""

    @property
    def has_classes(self) -> bool:
        return False  # a score per choice; the dataset has no label set

    def num_labels(self, labels: Sequence[str]) -> int:
        return 1

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.downstream import TaskConfig
        from models_lib.families.gpt_tasks import GPTForMultipleChoice

        check_base(base, config, "multiple-choice head")
        return GPTForMultipleChoice.from_lm(base, TaskConfig("multiple_choice", 1))

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        from models_lib.checkpoint import read_model_config

        vocab_size = int(read_model_config(config.checkpoint)["config"]["vocab_size"])
        return GPT1ChoiceCollator(tokenizer, max_length, vocab_size)


GPT_MULTIPLE_CHOICE = GPT1ChoiceTask("multiple_choice", "Multiple choice (GPT-1: one pass per choice, a softmax over "
                                     "the choices' scores, the auxiliary LM loss)", "multiple_choice", None,
                                     GPT1ChoiceCollator, GPT1ChoiceStep, "multiple_choice", smoothing=True,
                                     families=FAMILIES, settings=AUX_LM, explorer_action="choose",
                                     baselines=baseline_fns.MULTIPLE_CHOICE, references=baseline_fns.choice_references)
