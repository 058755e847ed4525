"""Fine-tuning heads that sit on an encoder backbone, and their losses.

  LinearClassifier   dropout + one linear layer: on the pooled vector (BERT, ALBERT sequence
                     classification) or on every token (token classification, all families)
  DenseClassifier    dense + activation + output layer on the first token's vector: RoBERTa (tanh),
                     ELECTRA (exact GELU) and DistilBERT (ReLU) sequence classification
  SpanHead           extractive question answering: a start and an end logit per token

The layouts follow transformers' heads for each family so that weights move between the two
libraries with equal logits; models_lib.families.downstream picks the head for a family and task.
Losses are computed in float32, whatever the logits' dtype.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SEQUENCE_CLASSIFICATION = "sequence_classification"
TOKEN_CLASSIFICATION = "token_classification"
QUESTION_ANSWERING = "question_answering"
TASKS = (SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION, QUESTION_ANSWERING)
# GPT-1's multiple choice (models_lib.families.gpt_tasks): one score per choice, a softmax over an
# example's choices. A TaskConfig may name it; the encoders' heads (TASKS) do not offer it.
MULTIPLE_CHOICE = "multiple_choice"
MODEL_TASKS = (*TASKS, MULTIPLE_CHOICE)

# Sequence classification problems, by the names transformers' config.json uses for them.
SINGLE_LABEL = "single_label_classification"  # softmax over num_labels classes, cross-entropy
MULTI_LABEL = "multi_label_classification"  # one sigmoid per label, binary cross-entropy
REGRESSION = "regression"  # num_labels real outputs, mean squared error
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)

IGNORE_INDEX = -100  # token labels that take no part in the loss ([CLS], padding, sub-word pieces)

# The activations between a classifier's dense and output layers. Fixed by each family's head,
# not taken from config.hidden_act: ELECTRA's head is exact GELU even for a gelu_new encoder.
HEAD_ACTIVATIONS = {
    "tanh": torch.tanh,
    "gelu": lambda x: F.gelu(x),
    "relu": F.relu,
}


class LinearClassifier(nn.Module):
    """dropout, then H -> num_labels: (..., H) -> (..., num_labels)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(x))


class DenseClassifier(nn.Module):
    """[dropout] -> dense H -> H -> activation -> dropout -> H -> num_labels, on a (B, H) vector.

    RoBERTa and ELECTRA drop out before the dense layer too (dropout_first=True); DistilBERT
    (pre_classifier, ReLU) only after it.
    """

    def __init__(self, hidden_size: int, num_labels: int, dropout: float, *, activation: str,
                 dropout_first: bool = True):
        super().__init__()
        if activation not in HEAD_ACTIVATIONS:
            raise ValueError(f"unknown head activation {activation!r}; choose one of {', '.join(HEAD_ACTIVATIONS)}.")
        self.dropout_first = dropout_first
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = HEAD_ACTIVATIONS[activation]
        self.out_proj = nn.Linear(hidden_size, num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout_first:
            x = self.dropout(x)
        x = self.dropout(self.act(self.dense(x)))  # (B, H)
        return self.out_proj(x)  # (B, num_labels)


class SpanHead(nn.Module):
    """Extractive QA: (B, T, H) -> start and end logits, each (B, T). One H -> 2 linear layer
    (transformers' qa_outputs), after a dropout that only DistilBERT has (rate 0 elsewhere)."""

    def __init__(self, hidden_size: int, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(hidden_size, 2)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.out_proj(self.dropout(hidden)).unbind(dim=-1)  # each (B, T)
        return start.contiguous(), end.contiguous()


# --- losses ----------------------------------------------------------------------------------

def _weights(class_weights: torch.Tensor | None, num_labels: int, like: torch.Tensor) -> torch.Tensor | None:
    if class_weights is None:
        return None
    weights = torch.as_tensor(class_weights, dtype=torch.float32, device=like.device)
    if weights.shape != (num_labels,):
        raise ValueError(f"class_weights must hold one weight per label ({num_labels}), got shape "
                         f"{tuple(weights.shape)}.")
    return weights


def _integer_labels(labels: torch.Tensor, what: str) -> None:
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"{what} labels are class indices (a long tensor), got {labels.dtype}.")


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str, *,
                                 label_smoothing: float = 0.0,
                                 class_weights: torch.Tensor | None = None) -> torch.Tensor:
    """logits (B, C). labels: (B,) class ids (single label; -100 skips an example), (B, C) 0/1
    (multi-label) or (B,) / (B, C) targets (regression).

    Single label: torch's cross_entropy with `weight=class_weights` and `label_smoothing`.
    Multi-label: binary cross-entropy on each logit, averaged over B * C; class_weights (C,)
    scale each label's term (binary_cross_entropy_with_logits' `weight`, broadcast over B);
    label smoothing is refused (it is defined for a softmax). Regression: mean squared error;
    both options are refused.
    """
    num_labels = logits.shape[-1]
    if problem_type == SINGLE_LABEL:
        _integer_labels(labels, "single-label")
        return F.cross_entropy(logits.float().view(-1, num_labels), labels.view(-1),
                               weight=_weights(class_weights, num_labels, logits), label_smoothing=label_smoothing)
    if label_smoothing:
        raise ValueError(f"label_smoothing applies to cross-entropy over classes; a {problem_type} head has none.")
    if problem_type == MULTI_LABEL:
        if labels.shape != logits.shape:
            raise ValueError(f"multi-label labels are one 0/1 value per label, shape {tuple(logits.shape)}; got "
                             f"{tuple(labels.shape)}.")
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float(),
                                                  weight=_weights(class_weights, num_labels, logits))
    if problem_type == REGRESSION:
        if class_weights is not None:
            raise ValueError("class_weights apply to classification; a regression head has no classes.")
        if num_labels == 1:  # (B, 1) against (B,) or (B, 1), as transformers squeezes them
            return F.mse_loss(logits.float().view(-1), labels.float().view(-1))
        return F.mse_loss(logits.float(), labels.float())
    raise ValueError(f"unknown problem_type {problem_type!r}; choose one of {', '.join(PROBLEM_TYPES)}.")


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor, *, label_smoothing: float = 0.0,
                              class_weights: torch.Tensor | None = None) -> torch.Tensor:
    """logits (B, T, C), labels (B, T) with -100 where a token is not labelled: the mean
    cross-entropy over the labelled tokens (weighted by class_weights, smoothed by label_smoothing,
    both exactly as torch's cross_entropy applies them)."""
    _integer_labels(labels, "token")
    num_labels = logits.shape[-1]
    return F.cross_entropy(logits.float().view(-1, num_labels), labels.view(-1), ignore_index=IGNORE_INDEX,
                           weight=_weights(class_weights, num_labels, logits), label_smoothing=label_smoothing)


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor,
              end_positions: torch.Tensor, *, label_smoothing: float = 0.0) -> torch.Tensor:
    """(cross-entropy of the start + cross-entropy of the end) / 2, over the T positions.

    As transformers does: positions are clamped to [0, T], and T (an answer outside the input,
    e.g. cut off by the window) is ignored; a negative position is clamped to 0 ([CLS], "no answer").
    """
    T = start_logits.shape[1]
    losses = []
    for logits, positions in ((start_logits, start_positions), (end_logits, end_positions)):
        _integer_labels(positions, "answer position")
        target = positions.reshape(-1).clamp(0, T)  # (B,)
        losses.append(F.cross_entropy(logits.float(), target, ignore_index=T, label_smoothing=label_smoothing))
    return (losses[0] + losses[1]) / 2


def classification_predictions(logits: torch.Tensor, problem_type: str, threshold: float = 0.5) -> torch.Tensor:
    """Single label: the class id (argmax). Multi-label: 0/1 per label, 1 where the sigmoid of the
    logit exceeds the one threshold. Regression: the outputs, (B,) when there is one."""
    if problem_type == SINGLE_LABEL:
        return logits.argmax(dim=-1)
    if problem_type == MULTI_LABEL:
        return (torch.sigmoid(logits.float()) > threshold).long()
    if problem_type == REGRESSION:
        return logits.squeeze(-1) if logits.shape[-1] == 1 else logits
    raise ValueError(f"unknown problem_type {problem_type!r}; choose one of {', '.join(PROBLEM_TYPES)}.")
