"""The vocabulary's tables, padded to a multiple of 64 rows inside the model.

A word-embedding table, an output layer over the vocabulary and its bias are allocated with
`padded_size(vocab_size)` rows (config.padded_vocab_size): GPT-2's 50,257 becomes 50,304 and
BERT's 30,522 becomes 30,528, as nanoGPT does. The output matmul then has a column count that
is a multiple of 8 (of 64), and cuBLAS/cutlass pick their aligned kernels instead of the slow
`align1` ones. config.vocab_size stays the tokenizer's size, and nothing outside the model
sees the padding:

  - the rows from vocab_size on start at zero and are never read: token ids are below
    vocab_size, and the logits a model returns are sliced to `[..., :vocab_size]` (`logits`), so
    no softmax, argmax or sampler outside sees a padding column; a model's own cross-entropy
    reads the padded scores with the padding columns at -inf (`loss_logits`), which is the
    unpadded softmax exactly. The padded columns get a gradient of exactly zero, so the padded
    rows and bias entries stay zero under AdamW (decoupled weight decay multiplies, momentum of
    zero gradients stays zero) and plain SGD, which then train the real rows exactly as without
    the padding. Adafactor keeps them zero too, but its relative step size (the RMS of the whole
    table) and its update clipping (the RMS of the whole update) count the zero rows: when the
    clipping does not bind, a padded table's steps are sqrt(V / V_pad) of the unpadded ones
    (at least 0.97 for 1,000 tokens or more; T5's own 32,128 is not padded at all).
  - state dicts in memory hold the padded tensors (what the parameters are); everything that
    leaves the model for disk holds vocab_size rows: our checkpoints and their optimizer state
    (`unpadded_state_dict`, `unpad_optimizer_state`) as well as transformers' files. A tensor
    of vocab_size rows loaded into a padded one is padded with zero rows (a load_state_dict
    pre-hook, `pad_optimizer_state`), so checkpoints written before the padding, and
    transformers' folders, load as they are.
  - the real rows are initialised with the draws an unpadded table of vocab_size rows gets
    (`VocabEmbedding.reset_parameters`, `real_rows` in each family's initialiser), so a seed
    gives the same model, padded or not.

`PAD_MULTIPLE` is read when a model is built; 1 builds unpadded models (what the tests compare
against).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

PAD_MULTIPLE = 64


def padded_size(vocab_size: int) -> int:
    """vocab_size rounded up to a multiple of PAD_MULTIPLE: the rows the model allocates."""
    return -(-int(vocab_size) // PAD_MULTIPLE) * PAD_MULTIPLE


def pad_rows(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """tensor with zero rows appended along dim 0 up to `rows`."""
    extra = rows - tensor.shape[0]
    if extra <= 0:
        return tensor
    return torch.cat([tensor, tensor.new_zeros(extra, *tensor.shape[1:])])


def declare(module: nn.Module, names: Iterable[str], vocab_size: int) -> None:
    """Mark `module`'s own parameters `names` as vocabulary-sized (padded_size(vocab_size) rows)
    and pad any tensor of exactly vocab_size rows that load_state_dict brings for them."""
    names = tuple(names)
    object.__setattr__(module, "vocab_size", int(vocab_size))
    object.__setattr__(module, "vocab_padded", tuple(getattr(module, "vocab_padded", ())) + names)
    module.register_load_state_dict_pre_hook(functools.partial(_pad_on_load, names=names))


def _pad_on_load(module: nn.Module, state_dict: dict, prefix: str, *_: Any, names: tuple[str, ...]) -> None:
    """load_state_dict pre-hook (module-level, so a model with it still pickles)."""
    for name in names:
        tensor = state_dict.get(prefix + name)
        param = getattr(module, name, None)
        if (isinstance(tensor, torch.Tensor) and isinstance(param, torch.Tensor) and tensor.dim() >= 1
                and tensor.shape[0] == module.vocab_size < param.shape[0]):
            state_dict[prefix + name] = pad_rows(tensor, param.shape[0])


class VocabEmbedding(nn.Embedding):
    """An embedding table over the vocabulary: padded_size(vocab_size) rows, of which the first
    vocab_size are the tokens' and the rest zero padding that no id looks up."""

    def __init__(self, vocab_size: int, embedding_dim: int, padding_idx: int | None = None, **kwargs: Any):
        object.__setattr__(self, "vocab_size", int(vocab_size))  # reset_parameters (in __init__) reads it
        super().__init__(padded_size(vocab_size), embedding_dim, padding_idx=padding_idx, **kwargs)
        declare(self, ("weight",), vocab_size)

    def reset_parameters(self) -> None:
        """nn.Embedding's N(0, 1), drawn for the real rows only (the same draws as a table of
        vocab_size rows); the padding rows are zero."""
        with torch.no_grad():
            self.weight[self.vocab_size:].zero_()
        nn.init.normal_(self.weight[:self.vocab_size])
        self._fill_padding_idx_with_zero()


class VocabLinear(nn.Linear):
    """An output layer over the vocabulary: a weight of padded_size(vocab_size) rows (and bias
    entries), the rows past vocab_size zero. forward computes all of them (an aligned matmul)
    and returns the vocab_size real outputs (`logits`)."""

    def __init__(self, in_features: int, vocab_size: int, bias: bool = True, **kwargs: Any):
        object.__setattr__(self, "vocab_size", int(vocab_size))
        super().__init__(in_features, padded_size(vocab_size), bias=bias, **kwargs)
        declare(self, ("weight", "bias") if bias else ("weight",), vocab_size)

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation of a vocab_size-output layer, on the real rows only."""
        V = self.vocab_size
        with torch.no_grad():
            self.weight[V:].zero_()
            if self.bias is not None:
                self.bias[V:].zero_()
        nn.init.kaiming_uniform_(self.weight[:V], a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias[:V], -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return logits(x, self.weight, self.bias, self.vocab_size)  # (..., vocab_size)


def real_rows(module: nn.Module) -> torch.Tensor:
    """The weight rows an initialiser draws: the first vocab_size of a vocabulary table, the whole
    weight of any other module."""
    if isinstance(module, (VocabEmbedding, VocabLinear)):
        return module.weight[:module.vocab_size]
    return module.weight


@torch.no_grad()
def zero_padding(model: nn.Module) -> nn.Module:
    """Set the padding rows of every vocabulary tensor of `model` back to zero (after its weights
    were written directly, e.g. filled with random values); returns the model."""
    for module in model.modules():
        for name in getattr(module, "vocab_padded", ()):
            param = getattr(module, name, None)
            if param is not None:
                param[module.vocab_size:].zero_()
    return model


def logits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """(..., E) -> (..., vocab_size): the product with the whole padded (V_pad, E) table, then
    the padding's columns cut off (a view), so no caller, loss or sampler ever sees them."""
    out = F.linear(x, weight, bias)
    return out if out.shape[-1] == vocab_size else out[..., :vocab_size]


def loss_logits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores, logits) for a model's own cross-entropy: scores (..., V_pad) are the product
    with the padded table whose padding columns are -inf (added as the bias), so their softmax
    and cross-entropy are exactly those of the vocab_size columns, with a gradient of exactly
    zero for the padding, over rows of an aligned width; logits = scores[..., :vocab_size] is
    what the model returns. Cutting the columns off before the loss instead costs a strided copy
    forward and a zero-filled one backward: on an H200, GPT-2's output layer and loss over 8 x
    1024 tokens (bf16) took 9.3 ms that way, 8.0 ms this way (21.2 ms unpadded).

    The scores never leave the model: -inf columns would turn a caller's sum over the vocabulary
    (label smoothing, a KL divergence) into inf or NaN."""
    rows = weight.shape[0]
    if rows == vocab_size:
        out = F.linear(x, weight, bias)
        return out, out
    real = bias[:vocab_size] if bias is not None else weight.new_zeros(vocab_size)
    masked = torch.cat([real, real.new_full((rows - vocab_size,), float("-inf"))])
    scores = F.linear(x, weight, masked)
    return scores, scores[..., :vocab_size]


# --- tensors that leave the model ----------------------------------------------------------------

def padded_names(model: nn.Module) -> dict[str, tuple[int, int]]:
    """state-dict name -> (vocab_size, rows allocated) for every vocabulary tensor of `model`
    (each name of a shared one: ELECTRA's generator and discriminator share one table)."""
    out: dict[str, tuple[int, int]] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name in getattr(module, "vocab_padded", ()):
            param = getattr(module, name, None)
            if param is not None:
                out[f"{prefix}.{name}" if prefix else name] = (module.vocab_size, param.shape[0])
    return out


def padded_params(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> vocab_size for every vocabulary parameter of `model`."""
    out: dict[int, int] = {}
    for module in model.modules():
        for name in getattr(module, "vocab_padded", ()):
            param = getattr(module, name, None)
            if param is not None:
                out[id(param)] = module.vocab_size
    return out


def unpadded_state_dict(model: nn.Module, state: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """model.state_dict() (or `state`, by the same names) with each padded tensor cut to its
    vocab_size rows (a compact copy): what is written to disk."""
    state = model.state_dict() if state is None else state
    sizes = padded_names(model)
    out = {}
    for name, t in state.items():
        V = sizes.get(name, (None,))[0]
        out[name] = t[:V].clone() if V is not None and t.dim() >= 1 and t.shape[0] > V else t
    return out


def padded_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each tensor of vocab_size rows that the model pads padded to its rows (for a
    load that goes around load_state_dict's hooks: FSDP2's set_model_state_dict)."""
    sizes = padded_names(model)
    out = {}
    for name, t in state.items():
        V, rows = sizes.get(name, (None, None))
        out[name] = pad_rows(t, rows) if V is not None and t.dim() >= 1 and t.shape[0] == V < rows else t
    return out


def _optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters in the order Optimizer.state_dict() numbers them."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def unpad_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """An Optimizer.state_dict()-shaped `state` (numbered as `optimizer` numbers its parameters)
    with the per-row state of padded parameters (AdamW's moments, Adafactor's row statistics)
    cut to vocab_size rows. Returns a new dict: the optimizer's own state is left as it is."""
    return _map_row_state(model, optimizer, state,
                          lambda v, V, rows: v[:V].clone() if v.shape[0] == rows else v)


def pad_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """The inverse of unpad_optimizer_state: per-row state of vocab_size rows padded with zero
    rows to the parameter's (a checkpoint written before the padding, or by this one)."""
    # V == 1: a (1, E) column statistic would look like a row; V == rows: nothing to pad
    return _map_row_state(model, optimizer, state,
                          lambda v, V, rows: pad_rows(v, rows) if v.shape[0] == V and V not in (1, rows) else v)


def _map_row_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, change: Any) -> dict:
    """`state` with change(tensor, vocab_size, padded rows) applied to every tensor entry (of one
    dimension or more) of each vocabulary-sized parameter's state; the rest as it is."""
    vocab = padded_params(model)
    params = _optimizer_params(optimizer)
    out = {}
    for index, entries in state["state"].items():
        i = int(index)
        param = params[i] if i < len(params) else None
        V = vocab.get(id(param)) if param is not None else None
        if V is None:
            out[index] = entries
            continue
        rows = param.shape[0]
        out[index] = {k: (change(v, V, rows) if isinstance(v, torch.Tensor) and v.dim() >= 1 else v)
                      for k, v in entries.items()}
    return {**state, "state": out}
