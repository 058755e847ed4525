"""ELMo (Peters et al. 2018): a bidirectional LSTM language model whose layers become features.

    cfg = ElmoConfig.from_preset("elmo-tiny", vocab_size=8000, pad_token_id=0)
    model = ElmoLanguageModel(cfg)
    out = model(input_ids, attention_mask)          # ElmoOutput: loss = (forward + backward) / 2
    layers = model.embed(input_ids, attention_mask) # L + 1 tensors (B, T, 2P)
    vec = ScalarMix(len(layers))(layers, mask)      # gamma * sum_j softmax(s)_j * layer_j

What is the paper's (Peters et al. 2018, following Jozefowicz et al. 2016):
- one token representation shared by both directions: a character CNN over each token's
  characters (16-dim char embeddings, convolutions of widths 1-7 with 32..1024 filters, max-pool
  over characters, ReLU, 2 highway layers, projection to P), or here optionally a plain
  embedding table;
- a forward LM and a separate backward LM, each L = 2 layers of LSTM with a projection (LSTMP:
  `hidden_size` cells, output projected to P), a residual connection from layer 1 to layer 2,
  dropout between layers;
- one softmax (P -> V) shared by the two directions; the loss is the mean of the forward and the
  backward negative log likelihoods;
- the downstream representation: layer 0 duplicated to [x; x] so that every layer is 2P wide,
  each LSTM layer [forward; backward], mixed by softmax-normalised scalar weights s_j and a
  scale gamma (`ScalarMix`), optionally layer-normalising each layer first.

What is scaled down or simplified (small sizes are fine for this app):
- presets: elmo-tiny (P 64, 128 cells), elmo-mini (P 128, 512 cells), elmo-small (P 256, 1024
  cells); the paper's model is P 512, 4096 cells, 2048 char filters
  [[1,32],[2,32],[3,64],[4,128],[5,256],[6,512],[7,1024]], 2 highway layers, 50 chars a token,
  a 793k-word vocabulary trained with a sampled softmax;
- the vocabulary is the run's subword vocabulary and the softmax is a full one;
- the LSTM is torch's nn.LSTM with proj_size (fast kernels), so the paper's cell and projection
  clipping (both at 3) is left out;
- the embedding table may be tied to the softmax (`tie_embeddings`, only without the char CNN).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models_lib.core import vocab
from models_lib.core.config import PresetConfig, positive_int

# torch on the CPU says once per process that its oneDNN kernels lack LSTMs with projections and
# that it uses its own implementation instead: true, expected here, and of no use in a log.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")

__all__ = ["CHAR_VOCAB_SIZE", "ELMO_PRESETS", "ElmoConfig", "ElmoLanguageModel", "ElmoOutput", "ScalarMix",
           "char_table"]

# Character ids (char_table): 0 = padding, a UTF-8 byte b = b + 1, then the word markers.
CHAR_PAD = 0
BOW, EOW = 257, 258  # begin / end of a token
BOW_MARKED = 259  # begin of a token that carried a subword mark ("##", "▁", "Ġ"), so "##ing" != "ing"
CHAR_VOCAB_SIZE = 260
SUBWORD_MARKS = ("##", "▁", "Ġ")

# The paper's character filters (2048 in all); the presets use a prefix of fewer, narrower ones.
PAPER_CHAR_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


def _default_char_filters() -> list[list[int]]:
    return [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]]


# name -> the fields that differ from ElmoConfig's defaults. The paper's full model would be
# dict(embedding_dim=512, hidden_size=4096, char_filters=PAPER_CHAR_FILTERS, highway_layers=2).
ELMO_PRESETS: dict[str, dict[str, Any]] = {
    "elmo-tiny": dict(embedding_dim=64, hidden_size=128, highway_layers=1, max_chars=20,
                      char_filters=[[1, 16], [2, 16], [3, 32], [4, 64]]),
    "elmo-mini": dict(embedding_dim=128, hidden_size=512, highway_layers=1, max_chars=30,
                      char_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]]),
    "elmo-small": dict(embedding_dim=256, hidden_size=1024, highway_layers=2, max_chars=50,
                       char_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512]]),
}


@dataclass
class ElmoConfig(PresetConfig):
    config_label: ClassVar[str] = "ELMo"
    presets: ClassVar[dict[str, dict[str, Any]]] = ELMO_PRESETS

    family: str = "elmo"

    # Size
    vocab_size: int = 8000
    embedding_dim: int = 128  # P: the token representation and each LSTM layer's projected output
    hidden_size: int = 512  # LSTM cells per layer and direction (projected down to P)
    num_layers: int = 2  # biLSTM layers; the paper uses 2

    # Regularisation and initialisation
    dropout: float = 0.1  # between layers and before the softmax (the paper: 0.1)
    initializer_range: float = 0.02  # std of the embedding, projection and softmax weights

    # Token representation: an embedding table, or a character CNN (the paper's)
    char_cnn: bool = False
    max_chars: int = 50  # characters per token, begin/end markers included (longer tokens are cut)
    char_embedding_dim: int = 16
    char_filters: list[list[int]] = field(default_factory=_default_char_filters)  # [[width, filters], ...]
    highway_layers: int = 2

    # Softmax
    tie_embeddings: bool = False  # share the embedding table with the softmax (embedding table only)

    # Tokens
    pad_token_id: int | None = 0  # its embedding row starts at zero and gets no gradient

    def __post_init__(self) -> None:
        if self.family != "elmo":
            raise ValueError(f"An ElmoConfig is for the ELMo family, got family {self.family!r}.")
        for name in ("vocab_size", "embedding_dim", "hidden_size", "num_layers", "max_chars",
                     "char_embedding_dim"):
            positive_int(name, getattr(self, name))
        if self.embedding_dim > self.hidden_size:
            raise ValueError(f"Each LSTM layer projects its {self.hidden_size} cells down to embedding_dim "
                             f"({self.embedding_dim}), so hidden_size must be at least embedding_dim.")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be between 0 and 1, got {self.dropout!r}.")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise ValueError(f"initializer_range must be positive, got {self.initializer_range!r}.")
        if not isinstance(self.highway_layers, int) or isinstance(self.highway_layers, bool) \
                or self.highway_layers < 0:
            raise ValueError(f"highway_layers must be 0 or more, got {self.highway_layers!r}.")
        for name in ("char_cnn", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}.")
        self.char_filters = self._check_filters(self.char_filters)
        widest = max(width for width, _ in self.char_filters)
        if self.max_chars < max(3, widest):
            raise ValueError(f"max_chars ({self.max_chars}) must be at least 3 (begin marker, a character, end "
                             f"marker) and at least the widest character filter ({widest}).")
        if self.char_cnn and self.tie_embeddings:
            raise ValueError("tie_embeddings shares the embedding table with the softmax, but with char_cnn the "
                             "tokens have no embedding table; turn one of them off.")
        if self.pad_token_id is not None and not (
                isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size):
            raise ValueError(f"pad_token_id {self.pad_token_id!r} is outside the vocabulary (size {self.vocab_size}).")

    @staticmethod
    def _check_filters(filters: Any) -> list[list[int]]:
        message = ("char_filters must be a non-empty list of [width, number of filters] pairs of positive whole "
                   f"numbers, e.g. [[1, 32], [2, 32], [3, 64]]; got {filters!r}.")
        if not isinstance(filters, (list, tuple)) or not filters:
            raise ValueError(message)
        out = []
        for pair in filters:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2 or any(
                    not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in pair):
                raise ValueError(message)
            out.append([int(pair[0]), int(pair[1])])
        return out

    @property
    def label(self) -> str:
        return "ELMo"

    @property
    def max_positions(self) -> int:
        """An LSTM has no position limit; the trainer reads this as the longest input it may feed."""
        return 10**6

    @property
    def char_cnn_output_size(self) -> int:
        return sum(n for _, n in self.char_filters)

    # Size
    def count_params(self, embeddings: bool = False) -> int:
        """Per direction and layer an LSTM of H cells projected to P (nn.LSTM with proj_size: 9HP
        + 8H weights and biases; without a projection when P = H), plus the character CNN when
        on. With `embeddings`, also the embedding table and the shared softmax (its weight once
        when tied): every parameter of ElmoLanguageModel."""
        P, H, L = self.embedding_dim, self.hidden_size, self.num_layers
        V = self.padded_vocab_size  # the table's and the softmax's rows as allocated (models_lib.core.vocab)
        lstm = 9 * H * P + 8 * H if P < H else 4 * H * P + 4 * H * H + 8 * H
        n = 2 * L * lstm
        if self.char_cnn:
            E, D = self.char_embedding_dim, self.char_cnn_output_size
            n += CHAR_VOCAB_SIZE * E + sum(width * E * filters + filters for width, filters in self.char_filters)
            n += self.highway_layers * 2 * (D * D + D) + D * P + P
        if embeddings:
            table = 0 if self.char_cnn else V * P
            n += table + V + (0 if self.tie_embeddings else P * V)
        return n

    def shape(self) -> dict[str, Any]:
        """What the launch form shows of a preset: layers, LSTM cells, projection, a label (no heads, no FFN)."""
        L, H, P = self.num_layers, self.hidden_size, self.embedding_dim
        return {"layers": L, "hidden": H, "projection": P, "heads": 0, "ffn": 0, "label": f"L{L} H{H} P{P}"}

    # Serialisation


@dataclass
class ElmoOutput:
    loss: torch.Tensor  # 0-dim: (forward_loss + backward_loss) / 2
    forward_loss: torch.Tensor  # 0-dim: mean CE of token t+1 from the forward state at t
    backward_loss: torch.Tensor  # 0-dim: mean CE of token t-1 from the backward state at t
    forward_tokens: torch.Tensor  # 0-dim long: tokens predicted by the forward LM
    backward_tokens: torch.Tensor
    forward_correct: torch.Tensor  # 0-dim long: argmax hits
    backward_correct: torch.Tensor


# ---------------------------------------------------------------------------------------------
# Characters


def _strip_mark(token: str) -> tuple[str, bool]:
    for mark in SUBWORD_MARKS:
        if token.startswith(mark) and len(token) > len(mark):
            return token[len(mark):], True
    return token, False


def char_table(vocab_strings: Sequence[str], max_chars: int = 50) -> torch.Tensor:
    """(V, max_chars) long: each token's characters as ids, for the character CNN.

    Row layout: [begin, byte+1, ..., end, 0, 0, ...] over the token's UTF-8 bytes; the begin marker
    is BOW, or BOW_MARKED when a subword mark ("##", "▁", "Ġ") was stripped, so that "##ing" and
    "ing" (two different tokens) still read differently. Tokens longer than max_chars - 2 bytes
    are cut (the end marker is kept).
    """
    positive_int("max_chars", max_chars)
    if max_chars < 3:
        raise ValueError(f"max_chars must be at least 3 (begin marker, a character, end marker), got {max_chars}.")
    table = torch.full((len(vocab_strings), max_chars), CHAR_PAD, dtype=torch.long)
    for i, token in enumerate(vocab_strings):
        if not isinstance(token, str):
            raise ValueError(f"Vocabulary entry {i} is a {type(token).__name__}, not a string.")
        text, marked = _strip_mark(token)
        ids = [BOW_MARKED if marked else BOW] + [b + 1 for b in text.encode("utf-8")[:max_chars - 2]] + [EOW]
        table[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
    return table


class Highway(nn.Module):
    """y = g * x + (1 - g) * relu(W x), g = sigmoid(W_g x) (Srivastava et al. 2015)."""

    def __init__(self, size: int):
        super().__init__()
        self.transform = nn.Linear(size, size)
        self.gate = nn.Linear(size, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.gate(x))
        return gate * x + (1.0 - gate) * F.relu(self.transform(x))


class CharCNN(nn.Module):
    """Token ids -> (.., P) through their characters: embed, convolve, max-pool, highway, project."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        self.char_embeddings = nn.Embedding(CHAR_VOCAB_SIZE, config.char_embedding_dim, padding_idx=CHAR_PAD)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, n, kernel_size=width) for width, n in config.char_filters)
        size = config.char_cnn_output_size
        self.highways = nn.ModuleList(Highway(size) for _ in range(config.highway_layers))
        self.projection = nn.Linear(size, config.embedding_dim)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        # chars (N, C) long -> (N, P)
        x = self.char_embeddings(chars).transpose(1, 2)  # (N, E_char, C)
        pooled = [F.relu(conv(x).amax(dim=-1)) for conv in self.convolutions]  # each (N, filters)
        h = torch.cat(pooled, dim=-1)  # (N, sum of filters)
        for highway in self.highways:
            h = highway(h)
        return self.projection(h)


# ---------------------------------------------------------------------------------------------
# The biLM


class ElmoLanguageModel(nn.Module):
    """Token representation -> forward and backward L-layer LSTMP stacks -> one shared softmax."""

    def __init__(self, config: ElmoConfig):
        super().__init__()
        if not isinstance(config, ElmoConfig):
            raise ValueError(f"ElmoLanguageModel needs an ElmoConfig, got {type(config).__name__}.")
        self.config = config
        P, H = config.embedding_dim, config.hidden_size
        if config.char_cnn:
            self.char_cnn = CharCNN(config)
            self.embeddings = None
            # Which characters spell each token id; persistent, so checkpoints carry it.
            self.register_buffer("char_table", torch.zeros(config.vocab_size, config.max_chars, dtype=torch.long))
        else:
            self.char_cnn = None
            self.embeddings = vocab.VocabEmbedding(config.vocab_size, P, padding_idx=config.pad_token_id)
            self.char_table = None
        self._char_table_checked = False

        def stack() -> nn.ModuleList:
            # LSTMP: H cells, output projected to P (nn.LSTM requires proj_size < hidden_size).
            return nn.ModuleList(nn.LSTM(P, H, batch_first=True, proj_size=P if P < H else 0)
                                 for _ in range(config.num_layers))

        self.forward_lstm = stack()
        self.backward_lstm = stack()
        self.dropout = nn.Dropout(config.dropout)
        # Shared by both directions; padded_vocab_size rows, its outputs the vocab_size real ones.
        self.softmax = vocab.VocabLinear(P, config.vocab_size)
        self._init_weights()
        if self.embeddings is not None and config.tie_embeddings:
            self.softmax.weight = self.embeddings.weight

    def _init_weights(self) -> None:
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                nn.init.normal_(vocab.real_rows(module), std=std)  # of the softmax, the real rows
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(vocab.real_rows(module), std=std)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.LSTM):
                # torch's uniform(+-1/sqrt(H)) weights; forget-gate biases at 1 so that memory is
                # kept early in training (Jozefowicz et al. 2015). Gate order: input, forget, cell, output.
                H = module.hidden_size
                for name, p in module.named_parameters():
                    if name.startswith("bias_ih"):
                        with torch.no_grad():
                            p.zero_()
                            p[H:2 * H].fill_(1.0)
                    elif name.startswith("bias_hh"):
                        nn.init.zeros_(p)
        for highway in (self.char_cnn.highways if self.char_cnn is not None else []):
            nn.init.constant_(highway.gate.bias, 1.0)  # start by carrying the input through

    @property
    def max_positions(self) -> int:
        return self.config.max_positions

    # -- characters -----------------------------------------------------------------------------

    def set_char_table(self, table: torch.Tensor) -> None:
        """Install the (V, max_chars) character ids of the vocabulary (see char_table)."""
        if self.char_cnn is None:
            raise ValueError("This ELMo model reads an embedding table (char_cnn is off), so it has no "
                             "character table to set.")
        expected = (self.config.vocab_size, self.config.max_chars)
        if not isinstance(table, torch.Tensor) or tuple(table.shape) != expected:
            shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
            raise ValueError(f"The character table must be a tensor of shape {expected} (vocabulary size, "
                             f"max_chars), got {shape}.")
        if table.dtype.is_floating_point or table.min() < 0 or table.max() >= CHAR_VOCAB_SIZE:
            raise ValueError(f"The character table must hold whole-number character ids in 0..{CHAR_VOCAB_SIZE - 1}.")
        with torch.no_grad():
            self.char_table.copy_(table.to(torch.long))
        self._char_table_checked = True

    # -- the two LSTM stacks --------------------------------------------------------------------

    def token_representation(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, T, P): layer 0, shared by both directions."""
        if self.char_cnn is None:
            return self.embeddings(input_ids)
        if not self._char_table_checked:
            if not bool(self.char_table.any()):
                raise ValueError("This ELMo model reads characters (char_cnn) but has no character table yet; call "
                                 "model.set_char_table(char_table(vocabulary strings, max_chars)) first.")
            self._char_table_checked = True
        # Each distinct token of the batch through the CNN once.
        unique, inverse = torch.unique(input_ids, return_inverse=True)
        return self.char_cnn(self.char_table[unique])[inverse]  # (B, T, P)

    @staticmethod
    def _lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """Real lengths (B,), or None when there is no padding to care about."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}.")
        if attention_mask is None:
            return None
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} must have the shape of input_ids "
                             f"{tuple(input_ids.shape)}.")
        mask = attention_mask.bool()
        lengths = mask.sum(dim=1)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        if not torch.equal(mask, positions[None, :] < lengths[:, None]):
            raise ValueError("ELMo reads right-padded batches: attention_mask must be 1s followed by 0s in each row.")
        return lengths

    @staticmethod
    def _reverse(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        """Reverse each row of x (B, T, D) within its real length; padding stays at the end.
        Applying it twice gives x back."""
        if lengths is None:
            return x.flip(1)
        T = x.shape[1]
        t = torch.arange(T, device=x.device)[None, :]  # (1, T)
        index = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # (B, T)
        return x.gather(1, index[:, :, None].expand_as(x))

    def _run_stack(self, lstms: nn.ModuleList, x: torch.Tensor) -> list[torch.Tensor]:
        """One direction, reading left to right; returns each layer's output (B, T, P).
        Right padding comes after every real token, so it never reaches a real position."""
        outputs = []
        for i, lstm in enumerate(lstms):
            h, _ = lstm(self.dropout(x))
            if i > 0:
                h = h + x  # ELMo's residual connection between LSTM layers
            outputs.append(h)
            x = h
        return outputs

    def _bilm(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
              ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """(token representation (B, T, P), forward layers, backward layers), each (B, T, P) in
        the original order."""
        lengths = self._lengths(input_ids, attention_mask)
        x = self.token_representation(input_ids)
        forward = self._run_stack(self.forward_lstm, x)
        backward = [self._reverse(h, lengths) for h in self._run_stack(self.backward_lstm, self._reverse(x, lengths))]
        return x, forward, backward

    # -- public ---------------------------------------------------------------------------------

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> ElmoOutput:
        """Both LM losses over the real tokens (right padding carries no loss)."""
        _, forward, backward = self._bilm(input_ids, attention_mask)
        if attention_mask is None:
            valid = torch.ones_like(input_ids[:, 1:], dtype=torch.bool)
        else:
            valid = attention_mask[:, 1:].bool()  # position t+1 real (so t is too)
        # Forward: state at t predicts t+1. Backward: state at t+1 predicts t.
        fwd = self._predict(self.dropout(forward[-1])[:, :-1][valid], input_ids[:, 1:][valid])
        bwd = self._predict(self.dropout(backward[-1])[:, 1:][valid], input_ids[:, :-1][valid])
        return ElmoOutput(loss=(fwd[0] + bwd[0]) / 2, forward_loss=fwd[0], backward_loss=bwd[0],
                          forward_tokens=fwd[1], backward_tokens=bwd[1], forward_correct=fwd[2],
                          backward_correct=bwd[2])

    def _predict(self, hidden: torch.Tensor, targets: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # hidden (N, P), targets (N,) -> (mean CE, N, argmax hits)
        n = torch.tensor(targets.numel(), device=targets.device)
        if targets.numel() == 0:  # every row one token long: nothing to predict
            zero = hidden.sum() * 0.0 + self.softmax.weight.sum() * 0.0  # keeps the graph, no NaN
            return zero.float(), n, torch.zeros((), dtype=torch.long, device=targets.device)
        # The padded scores (padding columns at -inf, models_lib.core.vocab): the unpadded softmax.
        scores = vocab.loss_logits(hidden, self.softmax.weight, self.softmax.bias, self.config.vocab_size)[0].float()
        loss = F.cross_entropy(scores, targets)
        correct = (scores.argmax(dim=-1) == targets).sum()
        return loss, n, correct

    def lm_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(forward_logits, backward_logits), each (B, T, V): forward_logits[:, t] scores token t+1,
        backward_logits[:, t] scores token t-1 (rows at padding are meaningless)."""
        _, forward, backward = self._bilm(input_ids, attention_mask)
        return self.softmax(self.dropout(forward[-1])), self.softmax(self.dropout(backward[-1]))

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """ELMo's features: L + 1 tensors (B, T, 2P), zero at padding. Layer 0 is the token
        representation duplicated [x; x]; layer j is [forward_j; backward_j]."""
        x, forward, backward = self._bilm(input_ids, attention_mask)
        layers = [torch.cat([x, x], dim=-1)] + [torch.cat([f, b], dim=-1) for f, b in zip(forward, backward)]
        if attention_mask is not None:
            keep = attention_mask[:, :, None].to(layers[0].dtype)
            layers = [h * keep for h in layers]
        return layers


class ScalarMix(nn.Module):
    """gamma * sum_j s_j * h_j with s = softmax(w) (Peters et al. 2018, eq. 1): the task-specific
    combination of a frozen biLM's layers. w starts at zero (equal weights), gamma at one.

    do_layer_norm: normalise each layer first, with one mean and variance over all its real
    (unmasked) entries, which the paper found helps when the layers' scales differ.
    """

    def __init__(self, num_layers: int, do_layer_norm: bool = False, trainable: bool = True):
        super().__init__()
        positive_int("num_layers", num_layers)
        self.num_layers = num_layers
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.Parameter(torch.zeros(num_layers), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(()), requires_grad=trainable)

    @property
    def weights(self) -> torch.Tensor:
        """s: the softmax-normalised layer weights (num_layers,)."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def forward(self, layers: Sequence[torch.Tensor] | torch.Tensor, mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        # layers: num_layers tensors (B, T, D) (or one stacked (num_layers, B, T, D)); mask (B, T)
        if len(layers) != self.num_layers:
            raise ValueError(f"This ScalarMix mixes {self.num_layers} layers, but {len(layers)} were given.")
        weights = self.weights
        mixed = None
        for s, h in zip(weights, layers):
            if self.do_layer_norm:
                h = self._normalise(h, mask)
            term = s.to(h.dtype) * h
            mixed = term if mixed is None else mixed + term
        return self.gamma.to(mixed.dtype) * mixed

    @staticmethod
    def _normalise(h: torch.Tensor, mask: torch.Tensor | None, eps: float = 1e-12) -> torch.Tensor:
        hf = h.float()
        if mask is None:
            mean, var = hf.mean(), hf.var(unbiased=False)
        else:
            m = mask[..., None].to(hf.dtype)  # (B, T, 1)
            count = m.sum() * h.shape[-1]
            mean = (hf * m).sum() / count
            var = (((hf - mean) * m) ** 2).sum() / count
        return ((hf - mean) / torch.sqrt(var + eps)).to(h.dtype)
