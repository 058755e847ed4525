"""GPT-1's fine-tuning (Radford et al. 2018, section 3.3): a task head on the transformer's state
at a learned extract token, trained with the language-model loss kept as an auxiliary objective.

    model = GPTForSequenceClassification.from_lm(lm, TaskConfig("sequence_classification", 3, labels))
    ids = [model.start_id, *premise, model.delimiter_id, *hypothesis, model.extract_id]
    out = model(input_ids, attention_mask, labels=labels, lm_weight=0.5)
    out.loss                  # classification loss + lm_weight * LM loss on the text tokens
    out.logits                # (B, num_labels)

The three tokens (start, delimiter, extract) are new: they get their own embedding rows
(`special`), addressed by the ids vocab_size, vocab_size + 1 and vocab_size + 2, so the
pre-trained vocabulary, its tokenizer and the LM head stay as they are (the LM head scores only
the real vocabulary; the LM loss skips the new tokens). input_ids may be (B, T), one sequence per
example, or (B, K, T): K sequences per example whose extract states are summed before the
linear layer (GPT-1's similarity: both orders of a pair). Padding is on the right (the extract
token is each row's last real token). The model keeps its LM head, so it still generates.

GPTForMultipleChoice (TaskConfig("multiple_choice", 1)) reads (B, K, T): K choices per example,
each [start] context [delimiter] choice [extract]; the linear layer maps each extract state to one
score, logits are (B, K) and the loss is the cross-entropy of the softmax over an example's
choices (plus lm_weight x the LM loss over all K sequences, as above). Its head is
transformers' GPT2DoubleHeadsModel's multiple-choice head (a dropout and a 1-unit linear layer
on the hidden state at mc_token_ids), which models_lib.hf.gpt2 exports it as.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import adapters, vocab
from models_lib.families.downstream import ClassifierOutput, TaskConfig
from models_lib.families.gpt import GPTConfig, GPTEmbeddings, GPTLMHeadModel, check_positions
from models_lib.heads.tasks import (
    IGNORE_INDEX, MULTIPLE_CHOICE, SEQUENCE_CLASSIFICATION, classification_predictions,
    sequence_classification_loss,
)

SPECIAL_TOKENS = ("start", "delimiter", "extract")


class GPTTaskEmbeddings(GPTEmbeddings):
    """GPT's embeddings plus rows for the start, delimiter and extract tokens (ids V, V+1, V+2)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.vocab_size = config.vocab_size
        self.special = nn.Embedding(len(SPECIAL_TOKENS), config.hidden_size)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, *, below: int | None = None) -> torch.Tensor:
        check_positions(position_ids, self.max_positions, below)
        new = input_ids >= self.vocab_size
        words = self.word(input_ids.masked_fill(new, 0))
        special = self.special((input_ids - self.vocab_size).clamp(0, len(SPECIAL_TOKENS) - 1))
        x = torch.where(new[..., None], special, words)
        return self.dropout(x + self.position(position_ids))  # (B, T, H)


@dataclass
class GPTClassifierOutput(ClassifierOutput):
    task_loss: torch.Tensor | None = None  # the classification (or regression) loss alone
    lm_loss: torch.Tensor | None = None    # the auxiliary LM loss alone


class GPTForSequenceClassification(GPTLMHeadModel):
    """GPT with GPT-1's task head (see the module docstring). task: a TaskConfig for sequence
    classification (single label, multi-label or regression); the classifier's dropout is
    classifier_dropout, else the config's hidden dropout (0.1 in the paper)."""

    TASK = SEQUENCE_CLASSIFICATION

    def __init__(self, config: GPTConfig, task: TaskConfig):
        if not isinstance(task, TaskConfig) or task.task != self.TASK:
            raise ValueError(f"{type(self).__name__} needs a TaskConfig for {self.TASK.replace('_', ' ')}, got "
                             f"{task!r}.")
        super().__init__(config)
        self.task_config = task
        self.embeddings = GPTTaskEmbeddings(config)
        dropout = config.hidden_dropout if task.classifier_dropout is None else task.classifier_dropout
        self.classifier_dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, task.num_labels)
        with torch.no_grad():  # the rest as GPTLMHeadModel initialised it; these are new
            for module in (self.embeddings.word, self.embeddings.position, self.embeddings.special):
                vocab.real_rows(module).normal_(0.0, config.initializer_range)  # the word table's padding stays zero
            self.classifier.weight.normal_(0.0, config.initializer_range)
            self.classifier.bias.zero_()

    @property
    def start_id(self) -> int:
        return self.config.vocab_size

    @property
    def delimiter_id(self) -> int:
        return self.config.vocab_size + 1

    @property
    def extract_id(self) -> int:
        return self.config.vocab_size + 2

    @property
    def num_labels(self) -> int:
        return self.task_config.num_labels

    @classmethod
    @torch.no_grad()
    def from_lm(cls, model: GPTLMHeadModel, task: TaskConfig) -> GPTForSequenceClassification:
        """A copy of `model`'s transformer and LM head (and its special rows, when it has them) with
        a fresh classifier; on `model`'s device, in float32, in its train/eval mode."""
        if not isinstance(model, GPTLMHeadModel):
            raise TypeError(f"GPT-1's task head sits on a GPT model, not on {type(model).__name__}.")
        new = cls(dataclasses.replace(model.config), task)
        adapters.attach_like(model, new)  # a model fine-tuned with adapters keeps them
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.")}
        missing, unexpected = new.load_state_dict(state, strict=False)
        other = [k for k in (*missing, *unexpected) if not k.startswith(("classifier.", "embeddings.special."))]
        if other:
            raise ValueError(f"The GPT weights do not fit the classifier: {', '.join(other[:5])}.")
        return new.to(model.embeddings.word.weight.device).train(model.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, *, lm_weight: float = 0.0, label_smoothing: float = 0.0,
                class_weights: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> GPTClassifierOutput:  # type: ignore[override]
        """input_ids (B, T) or (B, K, T), right-padded with attention_mask of the same shape;
        labels as EncoderForSequenceClassification's. With lm_weight > 0 the loss adds that much of
        the next-token loss over the real vocabulary's tokens (GPT-1: 0.5)."""
        shape = input_ids.shape
        flat_ids, flat_mask, hidden, states, extract = self.extract_states(input_ids, attention_mask,
                                                                           output_hidden_states)  # (B*K, H)
        if input_ids.dim() == 3:
            extract = extract.view(shape[0], shape[1], -1).sum(1)  # (B, H): the orders summed
        logits = self.classifier(self.classifier_dropout(extract))  # (B, C)
        loss = task_loss = lm_loss = None
        if labels is not None:
            task_loss = sequence_classification_loss(logits, labels, self.task_config.problem_type,
                                                     label_smoothing=label_smoothing, class_weights=class_weights)
            loss = task_loss
            if lm_weight:
                lm_loss = self.lm_loss(flat_ids, flat_mask, hidden)
                loss = task_loss + lm_weight * lm_loss
        return GPTClassifierOutput(loss, logits, states, task_loss, lm_loss)

    def extract_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                       output_hidden_states: bool = False):
        """(flat ids (N, T), flat mask, the last layer's states (N, T, H), every layer's or None,
        the extract token's state per row (N, H)) for input_ids (..., T), right-padded."""
        flat_ids = input_ids.reshape(-1, input_ids.shape[-1])
        flat_mask = None if attention_mask is None else attention_mask.reshape(-1, input_ids.shape[-1])
        states = self.encode(flat_ids, flat_mask, output_hidden_states=output_hidden_states)
        hidden = states[-1] if output_hidden_states else states
        last = (flat_mask.long().sum(-1) - 1 if flat_mask is not None
                else torch.full((flat_ids.shape[0],), flat_ids.shape[-1] - 1, device=flat_ids.device))
        extract = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return flat_ids, flat_mask, hidden, states if output_hidden_states else None, extract

    def lm_loss(self, flat_ids: torch.Tensor, flat_mask: torch.Tensor | None, hidden: torch.Tensor) -> torch.Tensor:
        """The mean next-token loss over the rows' real vocabulary tokens (not the start, delimiter
        and extract tokens, not padding)."""
        targets = flat_ids.masked_fill(flat_ids >= self.config.vocab_size, IGNORE_INDEX)
        if flat_mask is not None:
            targets = targets.masked_fill(flat_mask == 0, IGNORE_INDEX)
        targets = F.pad(targets[:, 1:], (0, 1), value=IGNORE_INDEX)  # position t predicts t + 1
        scores, _ = self.loss_logits(hidden)  # (N, T, V_pad), the padding at -inf
        total = F.cross_entropy(scores.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX,
                                reduction="sum")
        return total / targets.ne(IGNORE_INDEX).sum().clamp(min=1)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        return classification_predictions(logits, self.task_config.problem_type, self.task_config.threshold)


class GPTForMultipleChoice(GPTForSequenceClassification):
    """GPT-1's multiple choice (see the module docstring): TaskConfig("multiple_choice", 1)."""

    TASK = MULTIPLE_CHOICE

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, *, lm_weight: float = 0.0, label_smoothing: float = 0.0,
                class_weights: torch.Tensor | None = None,
                output_hidden_states: bool = False) -> GPTClassifierOutput:  # type: ignore[override]
        """input_ids (B, K, T): K choices per example, right-padded, attention_mask of the same
        shape; labels (B,) the index of the right choice. logits (B, K): a score per choice."""
        if input_ids.dim() != 3:
            raise ValueError(f"multiple choice reads (batch, choices, length) ids, got the shape "
                             f"{tuple(input_ids.shape)}.")
        B, K = input_ids.shape[:2]
        flat_ids, flat_mask, hidden, states, extract = self.extract_states(input_ids, attention_mask,
                                                                           output_hidden_states)
        logits = self.classifier(self.classifier_dropout(extract)).view(B, K)
        loss = task_loss = lm_loss = None
        if labels is not None:
            task_loss = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
            loss = task_loss
            if lm_weight:
                lm_loss = self.lm_loss(flat_ids, flat_mask, hidden)
                loss = task_loss + lm_weight * lm_loss
        return GPTClassifierOutput(loss, logits, states, task_loss, lm_loss)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)
