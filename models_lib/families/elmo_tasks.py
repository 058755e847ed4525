"""ELMo as features (Peters et al. 2018, section 3.3): the pre-trained biLM frozen, its layers
mixed by a learned ScalarMix (gamma * sum_j softmax(s)_j h_j), and a small task model on top.

    model = ElmoForTask.from_lm(elmo, TaskConfig("sequence_classification", 5, labels))
    out = model(input_ids, attention_mask, labels=labels)   # ClassifierOutput(loss, logits)

Each layer is normalised before the mix (ScalarMix's do_layer_norm, the paper's option for layers
of different scales): the token layer of a biLM is far smaller than its LSTM layers, and without it
the mix all but loses the tokens' identity. The task model is a one-layer bidirectional LSTM (task_hidden cells each way) over the mixed
representation (dropout 0.5 before it, the paper's setting for the ELMo vector) and a linear
layer: on each token for token classification, on the masked mean of the tokens for sequence
classification. The loss adds mix_l2 (0.001, the paper's lambda) x ||s||^2, the L2 penalty on
the mixing weights that keeps them near an average of the layers. The biLM stays in eval mode
and takes no gradient; its weights are stored with the model, so a checkpoint is whole.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from models_lib.families.downstream import ClassifierOutput, TaskConfig
from models_lib.families.elmo import ElmoConfig, ElmoLanguageModel, ScalarMix
from models_lib.heads.tasks import (
    SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION, classification_predictions, sequence_classification_loss,
    token_classification_loss,
)

TASK_HIDDEN = 64
FEATURE_DROPOUT = 0.5
MIX_L2 = 0.001


class ElmoForTask(nn.Module):
    """A frozen ELMo biLM (`elmo`), a ScalarMix (`mix`) and a task model (`encoder`, `classifier`)."""

    def __init__(self, config: ElmoConfig, task: TaskConfig):
        super().__init__()
        if not isinstance(task, TaskConfig) or task.task not in (SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION):
            raise ValueError(f"ELMo's features feed sequence or token classification, not {task!r}.")
        self.config, self.task_config = config, task
        self.elmo = ElmoLanguageModel(config)
        self.elmo.requires_grad_(False)
        self.mix = ScalarMix(config.num_layers + 1, do_layer_norm=True)
        self.feature_dropout = nn.Dropout(FEATURE_DROPOUT)
        self.encoder = nn.LSTM(2 * config.embedding_dim, TASK_HIDDEN, batch_first=True, bidirectional=True)
        dropout = 0.1 if task.classifier_dropout is None else task.classifier_dropout
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * TASK_HIDDEN, task.num_labels)
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    @classmethod
    @torch.no_grad()
    def from_lm(cls, model: nn.Module, task: TaskConfig) -> ElmoForTask:
        """A task model on a copy of `model`'s biLM (an ElmoLanguageModel, or another ElmoForTask's)."""
        lm = model.elmo if isinstance(model, ElmoForTask) else model
        if not isinstance(lm, ElmoLanguageModel):
            raise TypeError(f"ELMo's features come from an ELMo language model, not {type(model).__name__}.")
        new = cls(dataclasses.replace(lm.config), task)
        new.elmo.load_state_dict(lm.state_dict())
        return new.to(next(lm.parameters()).device)

    @property
    def max_positions(self) -> int:
        return self.elmo.max_positions

    @property
    def num_labels(self) -> int:
        return self.task_config.num_labels

    def train(self, mode: bool = True) -> ElmoForTask:
        super().train(mode)
        self.elmo.eval()  # frozen: its dropout stays off
        return self

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The biLM's layers (ElmoLanguageModel.embed), unchanged by fine-tuning: what the explorer reads."""
        return self.elmo.embed(input_ids, attention_mask)

    def lm_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        return self.elmo.lm_logits(input_ids, attention_mask)

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """[the biLM, the mix and the task model]: the techniques see one frozen bottom group."""
        bottom = list(self.elmo.parameters())
        seen = {id(p) for p in bottom}
        return [bottom, [p for p in self.parameters() if id(p) not in seen]]

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, T, 2 * TASK_HIDDEN): the task LSTM over the mixed biLM layers."""
        with torch.no_grad():
            layers = self.elmo.embed(input_ids, attention_mask)
        mixed = self.feature_dropout(self.mix(layers, attention_mask))
        if attention_mask is not None:
            lengths = attention_mask.long().sum(1).clamp(min=1).cpu()
            packed = nn.utils.rnn.pack_padded_sequence(mixed, lengths, batch_first=True, enforce_sorted=False)
            out, _ = self.encoder(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mixed.shape[1])
            return out
        return self.encoder(mixed)[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None, *,
                label_smoothing: float = 0.0, class_weights: torch.Tensor | None = None, **_: Any) -> ClassifierOutput:
        """As the encoders' classifiers (token_type_ids are read by none of ELMo's parts)."""
        hidden = self.features(input_ids, attention_mask)
        if self.task_config.task == TOKEN_CLASSIFICATION:
            logits = self.classifier(self.dropout(hidden))  # (B, T, C)
        else:
            if attention_mask is None:
                pooled = hidden.mean(1)
            else:
                keep = attention_mask[:, :, None].to(hidden.dtype)
                pooled = (hidden * keep).sum(1) / keep.sum(1).clamp(min=1)
            logits = self.classifier(self.dropout(pooled))  # (B, C)
        loss = None
        if labels is not None:
            if self.task_config.task == TOKEN_CLASSIFICATION:
                loss = token_classification_loss(logits, labels, label_smoothing=label_smoothing,
                                                 class_weights=class_weights)
            else:
                loss = sequence_classification_loss(logits, labels, self.task_config.problem_type,
                                                    label_smoothing=label_smoothing, class_weights=class_weights)
            loss = loss + MIX_L2 * self.mix.scalar_parameters.pow(2).sum()
        return ClassifierOutput(loss, logits)

    def predict(self, logits: torch.Tensor) -> torch.Tensor:
        if self.task_config.task == TOKEN_CLASSIFICATION:
            return logits.argmax(-1)
        return classification_predictions(logits, self.task_config.problem_type, self.task_config.threshold)
