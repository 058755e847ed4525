"""transformers' XLNet (XLNetLMHeadModel) on disk: import into XLNetLMHeadModel and export from it.

    model = hf.from_pretrained(folder)    # config.json model_type "xlnet" lands here
    hf.to_pretrained(model, folder)       # an XLNetLMHeadModel (family "xlnet") is written from here

Layout differences: transformers keeps each projection of the relative attention as a (H, N, D)
tensor used in einsums; ours are bias-free linears. q, k, v and r (H -> N*D) are the transposes
of the tensor flattened to (H, N*D); o (N*D -> H) is that flattened tensor itself. The biases
(r_w_bias, r_r_bias, r_s_bias), the segment vectors and the LayerNorms map as they are.
transformers ties lm_loss.weight to the word embeddings; its bias is our lm_bias.

transformers' config has no memory length of 0: `mem_len` null (xlnet-base-cased's) keeps no
memory in this library (transformers would keep every position); our 0 is written as null.
bi_data (pre-training on both directions of the data) has no counterpart and is refused.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from models_lib.core import vocab
from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel
from models_lib.hf.base import log, read_config, read_weights, write_folder

BASE_PREFIX = "transformer."

# Our config field <- XLNet's config.json field.
CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "d_model",
    "num_layers": "n_layer",
    "num_heads": "n_head",
    "intermediate_size": "d_inner",
    "hidden_act": "ff_activation",
    "attn_type": "attn_type",
    "clamp_len": "clamp_len",
    "dropout": "dropout",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
    "eos_token_id": "eos_token_id",
    "tie_word_embeddings": "tie_word_embeddings",
}
ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_new"}

# (our name, theirs relative to the base model, how: "same" | "in" (transpose of (H, N*D)) | "out")
Names = list[tuple[str, str, str]]


def weight_names(config: XLNetConfig) -> Names:
    names: Names = [("word_embedding.weight", "word_embedding.weight", "same"), ("mask_emb", "mask_emb", "same")]
    for i in range(config.num_layers):
        ours, theirs = f"layers.{i}.", f"layer.{i}."
        for p in ("q", "k", "v", "r"):
            names.append((f"{ours}attention.{p}.weight", f"{theirs}rel_attn.{p}", "in"))
        names.append((f"{ours}attention.o.weight", f"{theirs}rel_attn.o", "out"))
        for p in ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed"):
            names.append((f"{ours}attention.{p}", f"{theirs}rel_attn.{p}", "same"))
        for our_module, their_module in (("attention.norm", "rel_attn.layer_norm"), ("ffn.norm", "ff.layer_norm"),
                                         ("ffn.layer_1", "ff.layer_1"), ("ffn.layer_2", "ff.layer_2")):
            for p in ("weight", "bias"):
                names.append((f"{ours}{our_module}.{p}", f"{theirs}{their_module}.{p}", "same"))
    return names


def _to_ours(t: torch.Tensor, how: str) -> torch.Tensor:
    if how == "in":
        return t.reshape(t.shape[0], -1).t().contiguous()
    if how == "out":
        return t.reshape(t.shape[0], -1).contiguous()
    return t


def _to_theirs(t: torch.Tensor, how: str, config: XLNetConfig) -> torch.Tensor:
    H, N, D = config.hidden_size, config.num_heads, config.head_size
    if how == "in":
        return t.t().reshape(H, N, D).contiguous()
    if how == "out":
        return t.reshape(H, N, D).contiguous()
    return t


# --- config ----------------------------------------------------------------------------------

def config_from_hf(hf: dict) -> XLNetConfig:
    """Our XLNetConfig for an XLNet config.json (as a dict); ValueError for what we cannot run."""
    if hf.get("bi_data"):
        raise ValueError("XLNet checkpoints configured for bidirectional data (bi_data=true) are not supported.")
    if hf.get("same_length"):
        raise ValueError("XLNet checkpoints with same_length=true are not supported.")
    fields = {ours: hf[theirs] for ours, theirs in CONFIG_FIELDS.items() if theirs in hf}
    if "hidden_act" in fields:
        fields["hidden_act"] = ACTIVATION_ALIASES.get(fields["hidden_act"], fields["hidden_act"])
    if "dropout" in fields:
        fields["attention_dropout"] = fields["dropout"]
    fields["mem_len"] = int(hf.get("mem_len") or 0)
    fields["reuse_len"] = int(hf.get("reuse_len") or 0)
    if hf.get("d_head") not in (None, fields.get("hidden_size", 768) // fields.get("num_heads", 12)):
        raise ValueError("XLNet checkpoints whose head size is not d_model / n_head are not supported.")
    for name in ("pad_token_id", "eos_token_id"):
        if isinstance(fields.get(name), list):
            fields[name] = fields[name][0] if fields[name] else None
    return XLNetConfig(**fields)


def config_to_hf(config: XLNetConfig, dtype: torch.dtype = torch.float32) -> dict:
    """XLNet's config.json for our config."""
    hf = {theirs: getattr(config, ours) for ours, theirs in CONFIG_FIELDS.items()}
    dtype_name = str(dtype).removeprefix("torch.")
    hf.update(architectures=["XLNetLMHeadModel"], model_type="xlnet", d_head=config.head_size,
              mem_len=config.mem_len or None, reuse_len=config.reuse_len or None, bi_data=False,
              same_length=False, untie_r=True, use_mems_eval=True, use_mems_train=False,
              dtype=dtype_name, torch_dtype=dtype_name)
    if config.attention_dropout != config.dropout:
        log.warning("transformers' XLNet has one dropout rate; attention_dropout %s is written as %s.",
                    config.attention_dropout, config.dropout)
    return hf


# --- import ----------------------------------------------------------------------------------

def from_pretrained(folder: str | Path, map_location: str | torch.device = "cpu") -> XLNetLMHeadModel:
    """An XLNetLMHeadModel (or bare XLNetModel) folder as our XLNetLMHeadModel, in eval mode.
    A folder without the output bias keeps zeros there and lists it in `model.missing_keys`."""
    folder = Path(folder)
    config = config_from_hf(read_config(folder))
    state = {k.removeprefix(BASE_PREFIX): v for k, v in read_weights(folder).items()}
    model = XLNetLMHeadModel(config)
    ours: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for our_key, their_key, how in weight_names(config):
        if their_key in state:
            ours[our_key] = _to_ours(state[their_key], how)
            used.add(their_key)
    if "lm_loss.bias" in state:
        ours["lm_bias"] = state["lm_loss.bias"]
    if model.lm_head is not None and "lm_loss.weight" in state:
        ours["lm_head.weight"] = state["lm_loss.weight"]
    used.update({"lm_loss.bias", "lm_loss.weight"})

    expected = model.state_dict()
    missing = [k for k in expected if k not in ours]
    essential = [k for k in missing if k not in ("lm_bias", "lm_head.weight")]
    if essential:
        raise ValueError(f"{folder} is not a complete XLNet checkpoint; missing for example "
                         f"{', '.join(essential[:3])} ({len(essential)} tensors in all).")
    try:
        model.load_state_dict(ours, strict=False)
    except RuntimeError as exc:
        raise ValueError(f"The weights in {folder} do not match its config.json: {exc}") from exc
    model.missing_keys = missing
    model.unexpected_keys = sorted(k for k in state if k not in used)
    if missing:
        log.warning("%s has no weights for %s; they keep their initialisation.", folder, ", ".join(missing))
    if model.unexpected_keys:
        log.warning("%s: ignored tensors %s.", folder, ", ".join(model.unexpected_keys))
    return model.to(map_location).eval()


# --- export ----------------------------------------------------------------------------------

def to_pretrained(model: nn.Module, folder: str | Path) -> Path:
    """Write config.json + model.safetensors that transformers loads as XLNetLMHeadModel."""
    if not isinstance(model, XLNetLMHeadModel):
        raise TypeError(f"to_pretrained writes an XLNetLMHeadModel as XLNet, not a {type(model).__name__}.")
    config = model.config
    ours = vocab.unpadded_state_dict(model)  # vocab_size rows, as transformers' tables have
    tensors = {BASE_PREFIX + theirs: _to_theirs(ours[our_key], how, config)
               for our_key, theirs, how in weight_names(config)}
    tensors["lm_loss.bias"] = ours["lm_bias"]
    if model.lm_head is not None:
        tensors["lm_loss.weight"] = ours["lm_head.weight"]
    return write_folder(Path(folder), tensors, config_to_hf(config, model.word_embedding.weight.dtype))
