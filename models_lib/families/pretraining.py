"""What every encoder pre-training model shares: a backbone, heads, and the masked-LM step.

`EncoderWithHeads` holds the backbone under the family's name (`bert`, `roberta`, `albert`,
`electra`, `distilbert`: the state-dict prefix, as in transformers) and builds the heads a
subclass lists in `build_heads`. `EncoderForPreTraining` adds the MLM head and a forward that
computes it; the families' models add one head each on top (NSP, SOP, SBO) or none.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core.config import EncoderConfig, encoder_family
from models_lib.core.encoder import Embeddings, TransformerEncoder, init_weights
from models_lib.core.packing import Packed
from models_lib.heads.pretraining import MLMHead

IGNORE_INDEX = -100  # label value for positions that are not predicted


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None  # the sum of the losses present
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    mlm_logits: torch.Tensor | None  # (N, V) at labelled positions with mlm_labels, else (B, T, V)
    mlm_targets: torch.Tensor | None  # (N,) the labels at those positions
    nsp_logits: torch.Tensor | None  # (B, 2); None when the model has no NSP head
    # Heads of other families (None where absent)
    sop_loss: torch.Tensor | None = None  # ALBERT
    sop_logits: torch.Tensor | None = None  # (B, 2): 0 = in order, 1 = swapped
    sbo_loss: torch.Tensor | None = None  # SpanBERT
    sbo_logits: torch.Tensor | None = None  # (N, V), one row per sbo pair
    sbo_targets: torch.Tensor | None = None  # (N,)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 tensors (B, T, H) when asked for
    projected_states: tuple[torch.Tensor, ...] | None = None  # TinyBERT: hidden_states at the teacher's width

    def add_loss(self, loss: torch.Tensor | None) -> None:
        if loss is not None:
            self.loss = loss if self.loss is None else self.loss + loss


class EncoderWithHeads(nn.Module):
    """A backbone (TransformerEncoder) plus the heads `build_heads` returns, initialised as BERT's."""

    backbone_name = "bert"  # attribute and state-dict prefix of the backbone
    backbone_class: type[TransformerEncoder] = TransformerEncoder
    families: tuple[str, ...] = ()  # config families this model accepts: each family's model class names its own

    def __init__(self, config: EncoderConfig, *, embeddings: Embeddings | None = None):
        super().__init__()
        if config.family not in self.families:
            what = " or ".join(encoder_family(f).label for f in self.families) or "no family's"
            raise ValueError(f"{type(self).__name__} is a {what} model, but the config is for {config.label}; build "
                             f"the model class of that family.")
        self.config = config
        self.add_module(self.backbone_name, self.backbone_class(config, embeddings=embeddings))
        heads = self.build_heads(config)
        for name, head in heads.items():
            setattr(self, name, head)
        for head in heads.values():
            if head is not None:
                head.apply(lambda m: init_weights(m, config.initializer_range))

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        return {}

    @property
    def backbone(self) -> TransformerEncoder:
        return getattr(self, self.backbone_name)

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None,
               output_hidden_states: bool = False, *,
               packed: Packed | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Final hidden states (B, T, H), or all L + 1 of them with output_hidden_states.
        `packed`: several examples per row (models_lib.core.packing)."""
        return self.backbone.encode(input_ids, attention_mask, token_type_ids, output_hidden_states, packed=packed)

    def run_backbone(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     token_type_ids: torch.Tensor | None, output_hidden_states: bool = False, *,
                     packed: Packed | None = None):
        """-> (final hidden (B, T, H), pooled (B, H) or None, all hidden states or None). With
        `packed`, pooled has one row per example (its first token), in the examples' order."""
        states = self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states, packed=packed)
        hidden = states[-1] if output_hidden_states else states
        pooled = self.backbone.pooler(hidden, packed) if self.backbone.pooler is not None else None
        return hidden, pooled, (states if output_hidden_states else None)

    @property
    def word_embeddings(self) -> torch.Tensor:
        return self.backbone.embeddings.word.weight  # (V, E): the tied decoder of token heads

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """The parameters from the bottom up, each exactly once:
        [embeddings, layer 0, ..., layer L-1, head].

        For layer-wise learning-rate decay, freezing the bottom k layers and gradual unfreezing.
        `embeddings` holds the embedding tables and their LayerNorm, plus the E -> H projection
        (ALBERT, ELECTRA); `head` holds everything above the stack: the final LayerNorm of a
        pre-LN encoder, the pooler and the heads. Shared weights go to the lowest group that
        uses them: ALBERT's one shared block (share_layers="all") is one group, so its list is
        [embeddings, shared layer, head] whatever num_layers is; with share_layers="attention"
        or "ffn" the shared sublayer belongs to layer 0 and layers 1..L-1 hold the rest.
        Tied weights (the MLM decoder is the word embedding table) are in the embeddings group.
        """
        backbone = self.backbone
        bottom = list(backbone.embeddings.parameters())
        if backbone.embeddings_project is not None:
            bottom += list(backbone.embeddings_project.parameters())
        groups: list[list[nn.Parameter]] = []
        seen: set[int] = set()
        for params in (bottom, *(list(layer.parameters()) for layer in backbone.encoder.layers)):
            groups.append([p for p in params if id(p) not in seen])
            seen.update(id(p) for p in params)
        groups.append([p for p in self.parameters() if id(p) not in seen])
        return groups


class EncoderForPreTraining(EncoderWithHeads):
    """Backbone + masked-LM head. forward -> PreTrainingOutput with the MLM fields set."""

    mlm_activation: str | None = None  # None: config.hidden_act

    def build_heads(self, config: EncoderConfig) -> dict[str, nn.Module | None]:
        return {"mlm_head": MLMHead(config, activation=self.mlm_activation)}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, mlm_labels: torch.Tensor | None = None,
                *, output_hidden_states: bool = False, packed: Packed | None = None,
                mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """input_ids (B, T); attention_mask (B, T) padding or (B, T, T) visibility; mlm_labels (B, T),
        -100 where nothing is predicted; packed: several examples per row (models_lib.core.packing);
        mlm_positions: where mlm_labels has a label, when the caller knows it (see labelled_rows)."""
        hidden, _, states = self.run_backbone(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                              packed=packed)
        return self.masked_lm(hidden, mlm_labels, hidden_states=states, mlm_positions=mlm_positions)

    def masked_lm(self, hidden: torch.Tensor, mlm_labels: torch.Tensor | None,
                  hidden_states: tuple[torch.Tensor, ...] | None = None,
                  mlm_positions: torch.Tensor | None = None) -> PreTrainingOutput:
        """The MLM part of the output: logits, targets and loss from the final hidden states, at
        the labelled positions (`mlm_positions` when given, see labelled_rows)."""
        if mlm_labels is None:
            logits = self.mlm_head(hidden, self.word_embeddings)  # (B, T, V)
            return PreTrainingOutput(None, None, None, logits, None, None, hidden_states=hidden_states)
        # Project to the vocabulary only where a label exists (~15% of positions): the (.., V)
        # matmul and softmax dominate a small model's cost, so this is the big saving.
        rows, targets = labelled_rows(hidden, mlm_labels, mlm_positions)  # (N, H), (N,)
        # The loss reads the padded scores (padding at -inf, models_lib.core.vocab), the output the (N, V) logits.
        scores, logits = self.mlm_head.loss_logits(rows, self.word_embeddings)
        loss = token_loss(scores, targets)
        return PreTrainingOutput(loss, loss, None, logits, targets, None, hidden_states=hidden_states)


def labelled_rows(hidden: torch.Tensor, mlm_labels: torch.Tensor,
                  mlm_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (B, T, H), mlm_labels (B, T) -> the labelled positions' rows (N, H) and labels (N,),
    in row-major order. `mlm_positions` (N,) long: their flat indices (row * T + column), which a
    collator knows on the host; read with index_select, they spare the boolean index
    hidden[mlm_labels != -100], whose size only the device knows (a host sync in every step, and
    a graph break when compiled)."""
    if mlm_positions is not None:
        return hidden.flatten(0, 1).index_select(0, mlm_positions), mlm_labels.flatten().index_select(0, mlm_positions)
    selected = mlm_labels != IGNORE_INDEX  # (B, T)
    return hidden[selected], mlm_labels[selected]


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over (N, V) logits (or a head's padded scores); with N = 0, a zero that
    still belongs to the graph."""
    if targets.numel():
        return F.cross_entropy(logits.float(), targets)
    return logits.sum() * 0.0
