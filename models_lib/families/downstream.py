"""Fine-tuning models: an encoder family's backbone with a task head (models_lib.heads.tasks).

    model = build_downstream(config, "sequence_classification", num_labels=3, labels=["neg", "neu", "pos"])
    model = from_pretraining(pretrained, "token_classification", num_labels=9)   # its encoder, a fresh head
    out = model(input_ids, attention_mask, token_type_ids, labels=labels, label_smoothing=0.1)
    out.loss, out.logits                     # ClassifierOutput; QA: SpanOutput(start_logits, end_logits)
    model.layer_groups()                     # [embeddings, layer 0, ..., layer L-1, head]

One model class per task, for every encoder family (bert, roberta, albert, electra, distilbert,
spanbert, unilm). The backbone sits under the family's name, as in transformers, and the head
follows transformers' layout for that family (its TaskHeads, declared by its
models_lib.checkpoint registration), so models_lib.hf moves the
weights both ways with equal logits. The task and its sizes are a TaskConfig, which
models_lib.checkpoint stores beside the encoder config in model_config.json.

Every forward takes `packed` (models_lib.core.packing.Packed): the batch's examples laid end to
end in fewer rows, only their real tokens computed. The sequence classifier then reads each
example's first token (starts); the token classifier and the span head run on the N real tokens
and give their outputs back in the padded (B, T) layout (Packed.to_padded), so that labels,
losses and predictions are those of the padded batch. hidden_states, when asked for, stay in
the packed rows.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from models_lib.core import adapters
from models_lib.core.config import EncoderConfig, positive_int, refuse_unknown_fields
from models_lib.core.encoder import TransformerEncoder
from models_lib.core.registry import FAMILIES
from models_lib.core.packing import Packed
from models_lib.families.electra import ElectraForPreTraining
from models_lib.families.pretraining import EncoderWithHeads
from models_lib.heads.tasks import (
    MODEL_TASKS, MULTIPLE_CHOICE, PROBLEM_TYPES, QUESTION_ANSWERING, REGRESSION, SEQUENCE_CLASSIFICATION,
    SINGLE_LABEL,
    TOKEN_CLASSIFICATION, DenseClassifier, LinearClassifier, SpanHead, classification_predictions,
    sequence_classification_loss, span_loss, token_classification_loss,
)

@dataclass(frozen=True)
class SentenceHead:
    """How a family's sequence classifier reads the encoder (transformers' head for it)."""

    pooled: bool  # classify the pooler's output (dense + tanh on [CLS]) with one linear layer
    activation: str | None = None  # otherwise: dense + this + output layer on the first token
    dropout_first: bool = True  # dropout before the dense layer as well as after it


@dataclass(frozen=True)
class TaskHeads:
    """How an encoder family's task heads sit on its backbone, as transformers lays them out in
    the format the family is written as (declared by its models_lib.checkpoint registration)."""

    backbone_name: str  # the backbone's attribute and state-dict prefix (transformers' base_model_prefix)
    sentence: SentenceHead  # its sequence classifier
    # task -> the head's default dropout where transformers' config for the family sets one;
    # otherwise the config's hidden_dropout, and none in the QA head (it reads the hidden states).
    dropout: dict[str, float] = dataclasses.field(default_factory=dict)


def task_heads(family: str) -> TaskHeads | None:
    """The task heads the registered family `family` declares (None: it has none)."""
    registered = FAMILIES.get(family)
    return registered.task_heads if registered is not None else None


def encoder_families() -> tuple[str, ...]:
    """The registered families with task heads, in registry order."""
    return tuple(name for name, family in FAMILIES.items() if family.task_heads is not None)


@dataclass
class TaskConfig:
    """What a downstream model predicts. Stored in model_config.json under "task".

    task: "sequence_classification" (single sentences or pairs), "token_classification",
    "question_answering" (extractive: num_labels is 2, the start and end logits) or
    "multiple_choice" (GPT-1's head only: num_labels is 1, a score per choice).
    labels: the class names, index = class id (None: unnamed; transformers writes LABEL_i).
    problem_type (sequence classification): "single_label_classification" (softmax,
    cross-entropy), "multi_label_classification" (a sigmoid per label, binary cross-entropy,
    one `threshold` for all) or "regression" (MSE); None picks regression for one label and
    single-label classification otherwise (what transformers infers from integer labels).
    classifier_dropout: the head's dropout; None is the family's default (transformers'):
    config.hidden_dropout, ALBERT 0.1, DistilBERT 0.2 (sequence) / 0.1 (QA), and no dropout in
    the QA head of the other families.
    """

    task: str
    num_labels: int = 2
    labels: list[str] | None = None
    problem_type: str | None = None
    classifier_dropout: float | None = None
    threshold: float = 0.5

    def __post_init__(self) -> None:
        if self.task not in MODEL_TASKS:
            raise ValueError(f"Unknown task {self.task!r}; choose one of {', '.join(MODEL_TASKS)}.")
        positive_int("num_labels", self.num_labels)
        if self.labels is not None:
            self.labels = list(self.labels)
            if len(self.labels) != self.num_labels or len(set(self.labels)) != len(self.labels):
                raise ValueError(f"labels must name each of the {self.num_labels} classes once, got {self.labels}.")
            if not all(isinstance(label, str) and label for label in self.labels):
                raise ValueError(f"labels are non-empty strings, got {self.labels}.")
        if self.task == MULTIPLE_CHOICE and (self.num_labels != 1 or self.labels is not None):
            raise ValueError("Multiple choice scores each choice with one number: num_labels is 1, without labels.")
        if self.task == QUESTION_ANSWERING and self.num_labels != 2:
            raise ValueError(f"Question answering predicts a start and an end per token: num_labels is 2, "
                             f"not {self.num_labels}.")
        if self.task == SEQUENCE_CLASSIFICATION:
            if self.problem_type is None:
                self.problem_type = REGRESSION if self.num_labels == 1 else SINGLE_LABEL
            if self.problem_type not in PROBLEM_TYPES:
                raise ValueError(f"Unknown problem_type {self.problem_type!r}; choose one of "
                                 f"{', '.join(PROBLEM_TYPES)}.")
            if self.problem_type == SINGLE_LABEL and self.num_labels < 2:
                raise ValueError("Single-label classification needs at least 2 labels; use num_labels=2 for a "
                                 "binary task, or problem_type='regression' for one output.")
        elif self.problem_type is not None:
            raise ValueError(f"problem_type is for sequence classification, not {self.task}.")
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(f"classifier_dropout must be between 0 and 1, got {self.classifier_dropout}.")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold is a probability between 0 and 1, got {self.threshold}.")

    @property
    def id2label(self) -> dict[int, str]:
        return {i: label for i, label in enumerate(self.labels or [f"LABEL_{i}" for i in range(self.num_labels)])}

    @property
    def label2id(self) -> dict[str, int]:
        return {label: i for i, label in self.id2label.items()}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskConfig:
        refuse_unknown_fields(cls, d, "task")
        return cls(**d)


def head_dropout(config: EncoderConfig, task: TaskConfig) -> float:
    """The head's dropout rate: task.classifier_dropout, else the family's default (transformers')."""
    if task.classifier_dropout is not None:
        return task.classifier_dropout
    heads = task_heads(config.family)
    if heads is not None and task.task in heads.dropout:
        return heads.dropout[task.task]
    return 0.0 if task.task == QUESTION_ANSWERING else config.hidden_dropout


@dataclass
class ClassifierOutput:
    loss: torch.Tensor | None  # None without labels
    logits: torch.Tensor  # (B, num_labels) for sequences, (B, T, num_labels) for tokens
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 tensors (B, T, H) when asked for


@dataclass
class SpanOutput:
    loss: torch.Tensor | None  # None without start and end positions
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)
    hidden_states: tuple[torch.Tensor, ...] | None = None


class EncoderForDownstream(EncoderWithHeads):
    """An encoder family's backbone + one task head (`head`); built from the family's config
    and a TaskConfig. The backbone has a pooler exactly when the head reads it (sequence
    classification in the families whose classifier sits on BERT's pooler)."""

    task_name: ClassVar[str] = ""

    def __init__(self, config: EncoderConfig, task: TaskConfig):
        if task_heads(getattr(config, "family", None)) is None:
            raise ValueError(f"Downstream heads sit on the encoder families ({', '.join(encoder_families())}), "
                             f"not on {getattr(config, 'family', type(config).__name__)!r}.")
        if not isinstance(task, TaskConfig) or task.task != self.task_name:
            raise ValueError(f"{type(self).__name__} needs a TaskConfig for {self.task_name!r}, got {task!r}.")
        self.task_config = task  # before Module.__init__: build_heads reads it (a plain attribute)
        if config.use_pooler != self.reads_pooler(config.family):
            config = dataclasses.replace(config, use_pooler=self.reads_pooler(config.family))
        super().__init__(config)

    @property
    def families(self) -> tuple[str, ...]:  # type: ignore[override]
        return encoder_families()

    @property
    def backbone_name(self) -> str:  # type: ignore[override]
        return task_heads(self.config.family).backbone_name

    @classmethod
    def reads_pooler(cls, family: str) -> bool:
        return False

    @property
    def head_dropout(self) -> float:
        return head_dropout(self.config, self.task_config)

    @property
    def num_labels(self) -> int:
        return self.task_config.num_labels

    def extra_repr(self) -> str:
        return f"family={self.config.family}, task={self.task_config.task}, num_labels={self.num_labels}"


class EncoderForSequenceClassification(EncoderForDownstream):
    """One label (or value, or set of labels) per input: a sentence or a pair (token_type_ids)."""

    task_name = SEQUENCE_CLASSIFICATION

    @classmethod
    def reads_pooler(cls, family: str) -> bool:
        return task_heads(family).sentence.pooled

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        style, H, C = task_heads(config.family).sentence, config.hidden_size, self.task_config.num_labels
        dropout = head_dropout(config, self.task_config)
        if style.pooled:
            return {"head": LinearClassifier(H, C, dropout)}
        return {"head": DenseClassifier(H, C, dropout, activation=style.activation, dropout_first=style.dropout_first)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, *,
                label_smoothing: float = 0.0, class_weights: torch.Tensor | None = None,
                output_hidden_states: bool = False, packed: Packed | None = None) -> ClassifierOutput:
        """labels: (B,) class ids; (B, C) 0/1 for multi-label; (B,) or (B, C) floats for
        regression. label_smoothing and class_weights (C,) shape the loss (heads.tasks).
        packed: the examples packed in rows; the head reads each one's first token."""
        hidden, pooled, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                                   packed=packed)
        if self.reads_pooler(self.config.family):
            logits = self.head(pooled)  # (B, C)
        else:
            logits = self.head(hidden[:, 0] if packed is None else packed.first_tokens(hidden))  # (B, C)
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(logits, labels, self.task_config.problem_type,
                                                label_smoothing=label_smoothing, class_weights=class_weights)
        return ClassifierOutput(loss, logits, states)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        """Class ids; 0/1 per label for multi-label (sigmoid > task.threshold); values for regression."""
        return classification_predictions(logits, self.task_config.problem_type, self.task_config.threshold)


class EncoderForTokenClassification(EncoderForDownstream):
    """One label per token (tagging, NER); labels -100 take no part in the loss."""

    task_name = TOKEN_CLASSIFICATION

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        return {"head": LinearClassifier(config.hidden_size, self.task_config.num_labels,
                                         head_dropout(config, self.task_config))}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, *,
                label_smoothing: float = 0.0, class_weights: torch.Tensor | None = None,
                output_hidden_states: bool = False, packed: Packed | None = None) -> ClassifierOutput:
        """labels (B, T): class ids, -100 where a token is not labelled (padding, [CLS], pieces).
        packed: the examples packed in rows; labels and logits stay in the padded (B, T) layout
        (the logits 0 on its padding)."""
        hidden, _, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                              packed=packed)
        if packed is None:
            logits = self.head(hidden)  # (B, T, C)
        else:
            logits = packed.to_padded(self.head(packed.real(hidden)))  # (N, C) -> (B, T, C)
        loss = None
        if labels is not None:
            loss = token_classification_loss(logits, labels, label_smoothing=label_smoothing,
                                             class_weights=class_weights)
        return ClassifierOutput(loss, logits, states)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)  # (B, T)


class EncoderForQuestionAnswering(EncoderForDownstream):
    """Extractive QA: a start and an end logit per token; the input is usually a (question,
    context) pair with token_type_ids."""

    task_name = QUESTION_ANSWERING

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        return {"head": SpanHead(config.hidden_size, head_dropout(config, self.task_config))}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None, *, label_smoothing: float = 0.0,
                output_hidden_states: bool = False, packed: Packed | None = None) -> SpanOutput:
        """start_positions, end_positions (B,): token indices of the answer; positions past the
        input are ignored in the loss (see heads.tasks.span_loss).

        packed: the examples packed in rows; the logits come back in the padded (B, T) layout,
        the lowest float on its padding, so that each row's softmax spans its own tokens. (The
        padded batch's loss also spans its padding, as transformers' does: that part a packed
        batch does not compute, and the two losses differ by it; the logits of the real tokens,
        and so every prediction, are the same.) No label smoothing then: it would spread over
        the padding."""
        if (start_positions is None) != (end_positions is None):
            raise ValueError("Give both start_positions and end_positions, or neither.")
        if packed is not None and label_smoothing and start_positions is not None:
            raise ValueError("A packed batch's span loss takes no label smoothing; pass the batch padded.")
        hidden, _, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                              packed=packed)
        if packed is None:
            start_logits, end_logits = self.head(hidden)  # (B, T) each
        else:
            real = torch.stack(self.head(packed.real(hidden)), dim=-1)  # (N, 2)
            both = packed.to_padded(real, fill=torch.finfo(real.dtype).min)  # (B, T, 2)
            start_logits, end_logits = both[..., 0].contiguous(), both[..., 1].contiguous()
        loss = None
        if start_positions is not None:
            loss = span_loss(start_logits, end_logits, start_positions, end_positions, label_smoothing=label_smoothing)
        return SpanOutput(loss, start_logits, end_logits, states)


TASK_CLASSES: dict[str, type[EncoderForDownstream]] = {
    SEQUENCE_CLASSIFICATION: EncoderForSequenceClassification,
    TOKEN_CLASSIFICATION: EncoderForTokenClassification,
    QUESTION_ANSWERING: EncoderForQuestionAnswering,
}
DOWNSTREAM_CLASSES = tuple(TASK_CLASSES.values())


def build_downstream(config: EncoderConfig, task: str, num_labels: int | None = None, *,
                     labels: list[str] | None = None, problem_type: str | None = None,
                     classifier_dropout: float | None = None, threshold: float = 0.5) -> EncoderForDownstream:
    """A freshly initialised model for `task` on the family of `config` (any encoder family).
    num_labels defaults to len(labels), else 2 (QA is always 2). See TaskConfig for the rest."""
    if task not in TASK_CLASSES:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_CLASSES)}.")
    if num_labels is None:
        num_labels = len(labels) if labels is not None else 2
    spec = TaskConfig(task, num_labels, labels, problem_type, classifier_dropout, threshold)
    return TASK_CLASSES[task](config, spec)


@torch.no_grad()
def from_pretraining(model: nn.Module, task: str, num_labels: int | None = None, **options: Any) -> EncoderForDownstream:
    """A downstream model whose encoder is a copy of `model`'s, with a fresh head.

    `model` is a pre-training model of an encoder family (BertForPreTraining, ...; ELECTRA's
    ElectraForPreTraining gives its discriminator), a bare TransformerEncoder, or another
    downstream model (a new head on its encoder). Every backbone weight is copied; the pooler
    is kept where the new head reads it, dropped where it does not, and freshly initialised
    where the head needs one that `model` lacks (SpanBERT, UniLM, a BERT trained without NSP).
    Options as build_downstream's. The result is on `model`'s device, in float32, in `model`'s
    train/eval mode.
    """
    source = model.discriminator if isinstance(model, ElectraForPreTraining) else model
    if isinstance(source, EncoderWithHeads):
        backbone = source.backbone
    elif isinstance(source, TransformerEncoder):
        backbone = source
    else:
        raise TypeError(f"from_pretraining takes an encoder model of models_lib, not {type(model).__name__}.")
    if task_heads(backbone.config.family) is None:
        raise ValueError(f"{backbone.config.label} has no downstream heads.")
    new = build_downstream(dataclasses.replace(backbone.config), task, num_labels, **options)  # its own config
    adapters.attach_like(backbone, new.backbone)  # a model fine-tuned with adapters keeps them
    missing, unexpected = new.backbone.load_state_dict(backbone.state_dict(), strict=False)
    other = [k for k in (*missing, *unexpected) if not k.startswith("pooler.")]
    if other:  # cannot happen for one config; a guard against a backbone subclass with extra parts
        raise ValueError(f"The encoder weights do not fit the downstream model: {', '.join(other[:5])}.")
    return new.to(backbone.embeddings.word.weight.device).train(model.training)
