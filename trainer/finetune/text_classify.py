"""Classification and regression as text to text, for T5 (Raffel et al. 2020, section 2.1 and
appendix D): the labels are words the model writes, so a T5 checkpoint fine-tunes on the same
classification dataset as BERT and is scored by the same metrics, on the same leaderboard.

An example becomes "prefix text </s>" -> "label </s>" (a pair: "prefix sentence1: A sentence2: B",
trainer.finetune.mixing.as_text, as in multi-task mixing); a regression score becomes its value
rounded to the nearest 0.2 with one decimal ("3.8"), T5's STS-B recipe. Training is T5's teacher
forcing (text2text.T5Step). At validation and on the test split each example's output is generated
(greedy, or num_beams) and read back:

- classification: the label whose written form (the label tokenised and decoded again, so a
  lowercasing tokenizer's "positive" is the label "Positive") is the generated text; any other text
  is the prediction INVALID, counted wrong, as T5 did. The metrics are the encoders' (accuracy,
  macro and micro F1, MCC, trainer.finetune.metrics.classification_metrics), F1 averaged over the
  labels seen in the references or the valid predictions, never over INVALID (the encoders' F1
  averages over the labels seen); the test split's confusion matrix and per-class table gain an
  INVALID column where the model wrote one.
- regression: the generated text as a number; a text that is not one scores INVALID_SCORE (T5's
  default for STS-B), scored against the dataset's unrounded values by Pearson, Spearman and MSE.

The test split's predictions file (trainer.finetune.report: input, gold, predicted, score) scores
each output as the model sees it (LabelWordStep.gather_generated): for classification the
probability of the label it wrote, as the whole output "label </s>" renormalised over the labels
(label_probabilities, the probabilities the explorer's classify shows), empty for an output that is
no label; for regression the probability of the whole generated output (the value's text and
</s>, by teacher forcing), how sure the model was of the number it wrote.

The run's config records the labels (label_words) and the prefix, so the explorer can ask the
checkpoint (trainer.inference.downstream.classify).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from models_lib.heads import tasks as heads
from trainer.errors import ConfigError
from trainer.finetune import metrics as metric_fns
from trainer.finetune.tasks import IGNORE_INDEX, Task
from trainer.prep.labelled.tasks import TASKS as DATASET_TASKS
from trainer.finetune.text2text import TEXT_SETTINGS, EncodedText, T5Batch, T5Collator, T5Step, _pad

INVALID = "(invalid)"   # the prediction when the generated text is none of the labels
INVALID_SCORE = -1.0    # a regression output that is not a number (T5's string_to_float default)
FAMILIES = ("t5",)


# ---------------------------------------------------------------------------- reading outputs
def label_forms(labels: Sequence[str], written: Callable[[str], str]) -> dict[str, str]:
    """{what the model writes for a label: the label}; `written(label)` is the label as the
    checkpoint's tokenizer gives it back. ConfigError when two labels are written alike."""
    forms: dict[str, str] = {}
    for label in labels:
        form = written(str(label)).strip()
        if form in forms:
            how = f"written {form!r}" if form else "written as unknown tokens (the vocabulary lacks their characters)"
            raise ConfigError(f"The labels {forms[form]!r} and {label!r} are both {how} by this checkpoint's "
                              f"tokenizer, so a T5 model could not tell them apart; rename one of them, or fine-tune "
                              f"a T5 checkpoint whose tokenizer writes them.")
        forms[form] = str(label)
    if INVALID in forms.values():
        raise ConfigError(f"A label may not be {INVALID!r}: that is what a T5 output that is no label is scored as.")
    return forms


def read_label(text: str, forms: dict[str, str]) -> str:
    """The label a generated text names, or INVALID."""
    return forms.get(text.strip(), INVALID)


def read_score(text: str) -> tuple[float, bool]:
    """(the number a generated text is, True), or (INVALID_SCORE, False) when it is none."""
    try:
        value = float(text.strip())
    except ValueError:
        return INVALID_SCORE, False
    return (value, True) if math.isfinite(value) else (INVALID_SCORE, False)


def classification_scores(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """The encoders' classification metrics with INVALID predictions counted wrong and left out of
    the labels F1 averages over."""
    labels = [x for x in dict.fromkeys([*references, *predictions]) if x != INVALID]
    return metric_fns.classification_metrics(predictions, references, labels=labels)


# ---------------------------------------------------------------------------- batches and the step
@dataclass
class LabelWordBatch(T5Batch):
    gold: list  # each example's label (classification) or unrounded score (regression)


class LabelWordCollator(T5Collator):
    """Classification or regression examples -> "prefix text </s>" and "label </s>" (mixing.as_text)."""

    def __init__(self, tokenizer: Any, max_length: int, config: Any, task: str):
        super().__init__(tokenizer, max_length, config)
        self.task = task
        self.scores = DATASET_TASKS[task].labels == "number"  # its gold is a score, else a label

    def texts(self, examples: Sequence[dict]) -> list[dict]:
        from trainer.finetune.mixing import as_text

        return [as_text(ex, self.task) for ex in examples]

    def encode(self, examples: Sequence[dict]) -> list[EncodedText]:
        return super().encode(self.texts(examples))

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedText]) -> LabelWordBatch:
        batch = super().collate(self.texts(examples), encoded)
        gold = [float(ex["label"]) if self.scores else str(ex["label"]) for ex in examples]
        return LabelWordBatch(**{f.name: getattr(batch, f.name) for f in dataclasses.fields(T5Batch)}, gold=gold)


class LabelWordStep(T5Step):
    """T5's teacher forcing; at validation, each generated text read back as a label or a score."""

    def __init__(self, config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]):
        super().__init__(config, model, device, task=task, labels=labels)
        if config.class_weights != "none":
            raise ConfigError("class_weights: balanced weighs a classifier head's classes; a T5 model writes its "
                              "labels as words and has none (set class_weights: none).")
        self.regression = task.problem == heads.REGRESSION
        self.forms = {} if self.regression else label_forms(labels, self.written)
        self.invalid = 0
        self.targets: list[list[int]] | None = None  # each label's "label </s>" ids, once

    def written(self, label: str) -> str:
        ids = self.tokenizer.tok.encode(label, add_special_tokens=False).ids
        return self.tokenizer.decode(ids)

    def start_validation(self) -> None:
        super().start_validation()
        self.invalid = 0

    def gather(self, generated: list[str], batch: LabelWordBatch) -> None:
        if self.regression:
            read = [read_score(text) for text in generated]
            self.predictions += [value for value, _ in read]
            self.invalid += sum(1 for _, ok in read if not ok)
        else:
            labels = [read_label(text, self.forms) for text in generated]
            self.predictions += labels
            self.invalid += labels.count(INVALID)
        self.references += list(batch.gold)
        self.keep_samples(batch.sources, generated, batch.targets)

    def gather_generated(self, generated: torch.Tensor, batch: LabelWordBatch) -> None:
        """Read the outputs (gather), then score each (the predictions file's score): classification,
        the probability of the label written, as the whole output renormalised over the labels
        (what the explorer's classify shows; none for an output that is no label); regression, the
        probability of the whole generated output, its value."""
        start = len(self.predictions)
        self.gather(self.decode(generated), batch)
        del self.scores[start:]  # gather gives none; a batch's scores line up with its predictions
        eos = int(self.tokenizer.sep_id)
        if self.regression:
            self.scores += generated_probabilities(self.model, batch.input_ids, batch.attention_mask, generated, eos)
            return
        if self.targets is None:
            self.targets = [self.tokenizer.tok.encode(str(label), add_special_tokens=False).ids + [eos]
                            for label in self.labels]
        probs = batch_label_probabilities(self.model, batch.input_ids, batch.attention_mask, self.targets).tolist()
        index = {str(label): i for i, label in enumerate(self.labels)}
        self.scores += [None if label == INVALID else row[index[label]]
                        for label, row in zip(self.predictions[start:], probs)]

    def finish_validation(self) -> dict[str, float]:
        if not self.references:
            return {}
        self.log_samples()
        if self.invalid and self.sink is not None:
            what = "a number" if self.regression else "one of the labels"
            self.sink.log(f"{self.invalid} of {len(self.references)} generated outputs were not {what}; they count "
                          f"as wrong{f' (scored {INVALID_SCORE:g})' if self.regression else ''}.")
        if self.regression:
            return metric_fns.regression_metrics(self.predictions, self.references)
        return classification_scores(self.predictions, self.references)


# ---------------------------------------------------------------------------- label scores
def output_log_probs(model: Any, encoder_states: torch.Tensor, attention_mask: torch.Tensor,
                     labels: torch.Tensor) -> torch.Tensor:
    """The summed log-probability (N,) of each row of labels (N, L) ("output </s>" ids, -100 after
    it) as the whole output for the input whose encoder states (N, S, d) and mask (N, S) share its
    row, by teacher forcing."""
    from models_lib.families.t5 import shift_right

    c = model.config
    decoder_input_ids = shift_right(labels, c.decoder_start_token_id, c.pad_token_id)
    logits = model(None, attention_mask, decoder_input_ids=decoder_input_ids,
                   encoder_hidden_states=encoder_states).logits
    logp = torch.log_softmax(logits.float(), -1)
    taken = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * (labels != IGNORE_INDEX)
    return taken.sum(-1)


def batch_label_probabilities(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              targets: Sequence[Sequence[int]]) -> torch.Tensor:
    """(B, K): for each of B inputs (B, S), the probability of each of the K targets ("label </s>"
    ids) as the whole output, renormalised over the targets: exp of each target's summed
    log-probability by teacher forcing (the encoder run once per input), then a softmax over them."""
    k, b = len(targets), input_ids.shape[0]
    labels = _pad(targets, IGNORE_INDEX)[0].to(input_ids.device).repeat(b, 1)  # input 0's K targets, then input 1's ...
    states = model.encode(input_ids, attention_mask).repeat_interleave(k, 0)
    logp = output_log_probs(model, states, attention_mask.repeat_interleave(k, 0), labels)
    return torch.softmax(logp.view(b, k), -1)


def label_probabilities(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        targets: Sequence[Sequence[int]]) -> list[float]:
    """The probability of each target ("label </s>" ids) as the whole output for one input
    (1, S), renormalised over the targets (batch_label_probabilities)."""
    return batch_label_probabilities(model, input_ids, attention_mask, targets)[0].tolist()


def generated_probabilities(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            generated: torch.Tensor, eos_id: int) -> list[float]:
    """The probability of each generated output (B, n) ids, the decoder start token left out, as
    the whole output for its input: its tokens up to and including the first eos (all of them
    when it has none), by teacher forcing."""
    after_eos = (generated == eos_id).long().cumsum(-1) - (generated == eos_id).long() > 0
    labels = generated.masked_fill(after_eos, IGNORE_INDEX)
    states = model.encode(input_ids, attention_mask)
    return output_log_probs(model, states, attention_mask, labels).double().exp().tolist()


# ---------------------------------------------------------------------------- the tasks
@dataclass(frozen=True)
class LabelWordTask(Task):
    """A classification or regression dataset on T5, as text to text (the module docstring)."""

    @property
    def writes_labels(self) -> bool:
        return True

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.t5 import T5ForConditionalGeneration

        if isinstance(base, T5ForConditionalGeneration):
            return base.float()
        raise ValueError(f"{self.name} as text to text trains a T5 model, not a {type(base).__name__}")

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        return LabelWordCollator(tokenizer, max_length, config, self.name)


T5_CLASSIFICATION = LabelWordTask("classification", "Classification as text to text (T5 writes the label as a word)",
                                  "text_to_text", "single_label_classification", LabelWordCollator, LabelWordStep,
                                  "classification", families=FAMILIES,
                                  settings=TEXT_SETTINGS, explorer_action="classify", balances_classes=True)
T5_REGRESSION = LabelWordTask("regression", "Regression as text to text (T5 writes the score rounded to 0.2)",
                              "text_to_text", "regression", LabelWordCollator, LabelWordStep, "regression",
                              families=FAMILIES, settings=TEXT_SETTINGS, explorer_action="classify")
