"""T5 in the Hugging Face `transformers` layout (T5ForConditionalGeneration), no transformers import.

    model = hf.from_pretrained(folder)    # dispatched here by config.json's model_type "t5"
    hf.to_pretrained(model, folder)       # dispatched here by model.config.family "t5"

Tensor names: transformers keeps separate q/k/v (and k/v in cross-attention) where we keep one
fused matrix, puts the stack's relative-position table inside block 0's self-attention, and
numbers the sublayers of a block (layer.0 self-attention, layer.1 cross-attention in the
decoder, then the feed-forward network).

Tied embeddings and output scaling: transformers 4.x ties lm_head to the shared table and
scales the decoder output by d_model^-0.5 exactly when tie_word_embeddings is true (v1.0);
5.x always ties unless the file holds a different lm_head, and records the scaling as
scale_decoder_outputs. We read the scaling from scale_decoder_outputs when present, else from
tie_word_embeddings; an unscaled model becomes our untied form (lm_head = the file's lm_head, or
a copy of the shared table when the file has none).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from models_lib.core import vocab
from models_lib.hf.base import NameMap, gather, log, read_config, read_weights, scatter, write_folder
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

ARCHITECTURE = "T5ForConditionalGeneration"

# Our config field <- transformers' field (same names: ours were chosen to match).
CONFIG_FIELDS = ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers", "num_heads",
                 "relative_attention_num_buckets", "relative_attention_max_distance", "dropout_rate",
                 "layer_norm_epsilon", "initializer_factor", "feed_forward_proj")

# Tensors in some files that no model reads: an unused cross-attention position table (old
# checkpoints) and the stacks' references to the shared table (read as aliases below).
IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
           "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


# --- config ----------------------------------------------------------------------------------

def _generation_defaults(folder: Path) -> dict:
    """generation_config.json (written by transformers next to config.json), if any."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _single_id(name: str, value):
    """transformers allows a list of eos ids; we stop on one."""
    if isinstance(value, list):
        if not value:
            return None
        if len(value) > 1:
            log.warning("%s lists several ids %s; generation stops at the first, %s.", name, value, value[0])
        return value[0]
    return value


def config_from_hf(hf: dict, generation: dict | None = None) -> T5Config:
    if hf.get("is_decoder"):
        raise ValueError("This T5 config.json describes a decoder on its own (is_decoder); only "
                         "encoder-decoder T5 checkpoints are supported.")
    generation = generation or {}
    fields = {k: hf[k] for k in CONFIG_FIELDS if k in hf and hf[k] is not None}
    tied = bool(hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True)))
    feed_forward = fields.get("feed_forward_proj", "relu")
    fields.update(version="1.1" if feed_forward.startswith("gated-") else "1.0", tie_word_embeddings=tied)
    pad = hf.get("pad_token_id", generation.get("pad_token_id", 0))
    fields["pad_token_id"] = 0 if pad is None else pad
    eos = _single_id("eos_token_id", hf.get("eos_token_id", generation.get("eos_token_id", 1)))
    fields["eos_token_id"] = eos
    start = hf.get("decoder_start_token_id", generation.get("decoder_start_token_id"))
    fields["decoder_start_token_id"] = _single_id("decoder_start_token_id", start)
    return T5Config(**fields)


def config_to_hf(config: T5Config, dtype: torch.dtype = torch.float32) -> dict:
    hf = {k: getattr(config, k) for k in CONFIG_FIELDS}
    hf.update(architectures=[ARCHITECTURE], model_type="t5", is_encoder_decoder=True,
              tie_word_embeddings=config.tie_word_embeddings, pad_token_id=config.pad_token_id,
              eos_token_id=config.eos_token_id, decoder_start_token_id=config.decoder_start_token_id,
              dtype=str(dtype).removeprefix("torch."))
    hf["torch_dtype"] = hf["dtype"]  # the name transformers 4.x reads
    return hf


# --- weights ---------------------------------------------------------------------------------

def names(config: T5Config) -> NameMap:
    """(our name, transformers names) for every tensor of T5ForConditionalGeneration."""
    out: NameMap = [("shared.weight", ("shared.weight",))]
    gated = config.is_gated
    for stack, layers in (("encoder", config.num_layers), ("decoder", config.num_decoder_layers)):
        out.append((f"{stack}.relative_attention_bias.weight",
                    (f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",)))
        out.append((f"{stack}.final_norm.weight", (f"{stack}.final_layer_norm.weight",)))
        for i in range(layers):
            ours, theirs = f"{stack}.layers.{i}.", f"{stack}.block.{i}.layer."
            attn = f"{theirs}0.SelfAttention."
            out += [(f"{ours}attn_norm.weight", (f"{theirs}0.layer_norm.weight",)),
                    (f"{ours}attention.qkv.weight", tuple(f"{attn}{x}.weight" for x in "qkv")),
                    (f"{ours}attention.out.weight", (f"{attn}o.weight",))]
            ffn = 1
            if stack == "decoder":
                cross = f"{theirs}1.EncDecAttention."
                out += [(f"{ours}cross_norm.weight", (f"{theirs}1.layer_norm.weight",)),
                        (f"{ours}cross_attention.q.weight", (f"{cross}q.weight",)),
                        (f"{ours}cross_attention.kv.weight", (f"{cross}k.weight", f"{cross}v.weight")),
                        (f"{ours}cross_attention.out.weight", (f"{cross}o.weight",))]
                ffn = 2
            dense = f"{theirs}{ffn}.DenseReluDense."
            out.append((f"{ours}ffn_norm.weight", (f"{theirs}{ffn}.layer_norm.weight",)))
            if gated:
                out += [(f"{ours}ffn.gate.weight", (f"{dense}wi_0.weight",)),
                        (f"{ours}ffn.up.weight", (f"{dense}wi_1.weight",))]
            else:
                out.append((f"{ours}ffn.up.weight", (f"{dense}wi.weight",)))
            out.append((f"{ours}ffn.down.weight", (f"{dense}wo.weight",)))
    if not config.tie_word_embeddings:
        out.append(("lm_head.weight", ("lm_head.weight",)))
    return out


def from_pretrained(folder: str | Path, map_location: str | torch.device = "cpu") -> T5ForConditionalGeneration:
    """A transformers T5 folder (T5ForConditionalGeneration, or T5Model) as our model, in eval mode."""
    folder = Path(folder)
    hf = read_config(folder)
    architectures = hf.get("architectures") or []
    if architectures and all(a == "T5EncoderModel" for a in architectures):
        raise ValueError(f"{folder} holds a T5EncoderModel (an encoder only); T5 import needs the encoder "
                         "and the decoder (T5ForConditionalGeneration or T5Model).")
    config = config_from_hf(hf, _generation_defaults(folder))
    hf_state = {k.removeprefix("transformer."): v for k, v in read_weights(folder).items()}
    if "shared.weight" not in hf_state:  # some files keep the table only under a stack's name
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            if alias in hf_state:
                hf_state["shared.weight"] = hf_state[alias]
                break
    lm_head = hf_state.get("lm_head.weight")
    if config.tie_word_embeddings and lm_head is not None and "shared.weight" in hf_state \
            and not torch.equal(lm_head, hf_state["shared.weight"]):
        raise ValueError(f"{folder} scales the decoder output as a tied T5 (v1.0) does, but its lm_head differs "
                         "from the shared embedding table; such a model has no T5 counterpart.")
    if not config.tie_word_embeddings and lm_head is None and "shared.weight" in hf_state:
        hf_state["lm_head.weight"] = hf_state["shared.weight"]  # tied without scaling: the table is the softmax

    model = T5ForConditionalGeneration(config)
    ours = model.state_dict()
    state, used = gather(ours, hf_state, names(config))
    missing = sorted(k for k in ours if k not in state)
    if missing:
        raise ValueError(f"{folder} is not a complete T5 checkpoint; missing for example "
                         f"{', '.join(missing[:3])} ({len(missing)} tensors in all).")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # shapes that disagree with config.json
        raise ValueError(f"The weights in {folder} do not match its config.json: {exc}") from exc
    model.missing_keys = []
    model.unexpected_keys = sorted(k for k in hf_state if k not in used and k not in IGNORED
                                   and not (k == "lm_head.weight" and config.tie_word_embeddings))
    if model.unexpected_keys:
        log.warning("%s: ignored tensors %s.", folder, ", ".join(model.unexpected_keys))
    return model.to(map_location).eval()


def to_pretrained(model: T5ForConditionalGeneration, folder: str | Path) -> Path:
    """config.json + model.safetensors that transformers loads as T5ForConditionalGeneration."""
    if not isinstance(model, T5ForConditionalGeneration):
        raise TypeError(f"T5 export takes a T5ForConditionalGeneration, not {type(model).__name__}.")
    config = model.config
    tensors = scatter(vocab.unpadded_state_dict(model), names(config))  # vocab_size rows, as transformers' tables
    return write_folder(Path(folder), tensors, config_to_hf(config, model.shared.weight.dtype))
