"""BERT: configuration, named presets, the backbone and the pre-training model (MLM + NSP)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .encoder import TransformerEncoder, init_weights
from .heads import MLMHead, NSPHead
from .layers import ACTIVATIONS

IGNORE_INDEX = -100  # label value for positions that are not predicted


@dataclass
class BertConfig:
    # Size
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int | None = None  # None -> 4 * hidden_size
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segments A/B; 0 = no token-type embeddings

    # Regularisation and numerics
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    hidden_act: str = "gelu"  # exact erf GELU
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    # Tokens
    pad_token_id: int | None = 0  # its embedding row starts at zero and gets no gradient

    # Encoder variants (defaults are BERT; see models_lib/encoder.py)
    embedding_size: int | None = None  # ALBERT factorisation; None = hidden_size
    share_layers: str = "none"  # "none" | "all" | "attention" | "ffn"
    norm_placement: str = "post"  # "post" | "pre"
    position_offset: int = 0  # RoBERTa: 2
    use_pooler: bool = True  # the [CLS] pooler, which the NSP head needs

    def __post_init__(self) -> None:
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}.")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"The hidden size ({self.hidden_size}) must be divisible by the number of "
                             f"attention heads ({self.num_heads}).")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be 0 or more, got {self.type_vocab_size}.")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {self.hidden_act!r}; choose one of {', '.join(sorted(ACTIVATIONS))}.")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ValueError("layer_norm_eps and initializer_range must be positive.")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size}).")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ValueError(f"embedding_size must be positive or None, got {self.embedding_size}.")
        if self.share_layers not in ("none", "all", "attention", "ffn"):
            raise ValueError(f"share_layers must be 'none', 'all', 'attention' or 'ffn', got {self.share_layers!r}.")
        if self.norm_placement not in ("post", "pre"):
            raise ValueError(f"norm_placement must be 'post' or 'pre', got {self.norm_placement!r}.")
        if not 0 <= self.position_offset < self.max_position_embeddings:
            raise ValueError(f"position_offset ({self.position_offset}) must be at least 0 and below "
                             f"max_position_embeddings ({self.max_position_embeddings}).")

    @property
    def max_positions(self) -> int:
        """The longest input (in tokens, [CLS] and [SEP] included) the model accepts."""
        return self.max_position_embeddings - self.position_offset

    # Serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"Unknown BERT config field(s): {', '.join(unknown)}. Known fields: {', '.join(sorted(known))}.")
        return cls(**d)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> BertConfig:
        if name not in BERT_PRESETS:
            raise ValueError(f"Unknown BERT preset {name!r}. Available presets: {', '.join(BERT_PRESETS)}.")
        return cls.from_dict({**BERT_PRESETS[name], **overrides})


# Named sizes (Turc et al. 2019 for the small ones; Devlin et al. 2019 for base/large). FFN = 4H.
BERT_PRESETS: dict[str, dict[str, int]] = {
    "bert-tiny": dict(num_layers=2, hidden_size=128, num_heads=2),
    "bert-mini": dict(num_layers=4, hidden_size=256, num_heads=4),
    "bert-small": dict(num_layers=4, hidden_size=512, num_heads=8),
    "bert-medium": dict(num_layers=8, hidden_size=512, num_heads=8),
    "bert-base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "bert-large": dict(num_layers=24, hidden_size=1024, num_heads=16),
}


class BertModel(TransformerEncoder):
    """The BERT backbone. forward -> EncoderOutput(hidden_states (B, T, H), pooled (B, H) | None);
    encode -> (B, T, H)."""


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None  # mlm_loss + nsp_loss (those present)
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    mlm_logits: torch.Tensor | None  # (N, V) at labelled positions with mlm_labels, else (B, T, V)
    mlm_targets: torch.Tensor | None  # (N,) the labels at those positions
    nsp_logits: torch.Tensor | None  # (B, 2); None when the model has no pooler


class BertForPreTraining(nn.Module):
    """BERT with its two pre-training heads: masked language model and next-sentence prediction."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm_head = MLMHead(config)
        # NSP classifies the pooled [CLS]; a model without a pooler has no NSP head.
        self.nsp_head = NSPHead(config.hidden_size) if config.use_pooler else None
        for head in (self.mlm_head, self.nsp_head):
            if head is not None:
                head.apply(lambda m: init_weights(m, config.initializer_range))

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.bert.encode(input_ids, attention_mask, token_type_ids)  # (B, T, H)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                nsp_labels: torch.Tensor | None = None) -> PreTrainingOutput:
        if nsp_labels is not None and self.nsp_head is None:
            raise ValueError("nsp_labels were given but this model has no NSP head (use_pooler=False).")
        hidden, pooled = self.bert(input_ids, attention_mask, token_type_ids)  # (B, T, H), (B, H)
        decoder_weight = self.bert.embeddings.word.weight  # (V, E): tied input/output embeddings

        mlm_loss = mlm_targets = None
        if mlm_labels is None:
            mlm_logits = self.mlm_head(hidden, decoder_weight)  # (B, T, V)
        else:
            # Project to the vocabulary only where a label exists (~15% of positions): the
            # (.., V) matmul and softmax dominate a small BERT's cost, so this is the big saving.
            selected = mlm_labels != IGNORE_INDEX  # (B, T)
            mlm_targets = mlm_labels[selected]  # (N,)
            mlm_logits = self.mlm_head(hidden[selected], decoder_weight)  # (N, V)
            if mlm_targets.numel():
                mlm_loss = F.cross_entropy(mlm_logits.float(), mlm_targets)
            else:
                # Nothing to predict in this batch: a zero that still belongs to the graph.
                mlm_loss = mlm_logits.sum() * 0.0

        nsp_logits = self.nsp_head(pooled) if self.nsp_head is not None else None  # (B, 2)
        nsp_loss = F.cross_entropy(nsp_logits.float(), nsp_labels) if nsp_labels is not None else None

        losses = [l for l in (mlm_loss, nsp_loss) if l is not None]
        loss = sum(losses[1:], losses[0]) if losses else None
        return PreTrainingOutput(loss, mlm_loss, nsp_loss, mlm_logits, mlm_targets, nsp_logits)
