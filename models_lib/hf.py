"""Hugging Face `transformers` on-disk format: import and export of BERT (no transformers import).

A transformers BERT folder holds config.json and weights (model.safetensors, or the older
pytorch_model.bin, possibly sharded with an *.index.json). Names differ from ours and
query/key/value are three matrices where we keep one fused Q/K/V matrix (split on export,
joined on import). The MLM decoder weight is the word embedding matrix in both libraries,
so it is neither read nor written.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import safetensors.torch
import torch

from .bert import BertConfig, BertForPreTraining, BertModel

log = logging.getLogger(__name__)

# Our config field <- transformers' BertConfig field.
_CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "hidden_act": "hidden_act",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
}

# Keys in HF checkpoints that carry nothing we need: buffers and copies of tied weights.
_IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.predictions.decoder.weight",
            "cls.predictions.decoder.bias")


def _backbone_names(num_layers: int) -> list[tuple[str, str]]:
    """(our name, HF name) for every backbone tensor except Q/K/V; names relative to the backbone."""
    pairs = [("embeddings.word.weight", "embeddings.word_embeddings.weight"),
             ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
             ("embeddings.token_type.weight", "embeddings.token_type_embeddings.weight")]
    pairs += [(f"embeddings.norm.{p}", f"embeddings.LayerNorm.{p}") for p in ("weight", "bias")]
    for i in range(num_layers):
        ours, theirs = f"encoder.layers.{i}.", f"encoder.layer.{i}."
        for p in ("weight", "bias"):
            pairs += [(f"{ours}attention.out.{p}", f"{theirs}attention.output.dense.{p}"),
                      (f"{ours}attn_norm.{p}", f"{theirs}attention.output.LayerNorm.{p}"),
                      (f"{ours}ffn.up.{p}", f"{theirs}intermediate.dense.{p}"),
                      (f"{ours}ffn.down.{p}", f"{theirs}output.dense.{p}"),
                      (f"{ours}ffn_norm.{p}", f"{theirs}output.LayerNorm.{p}")]
    pairs += [(f"pooler.dense.{p}", f"pooler.dense.{p}") for p in ("weight", "bias")]
    return pairs


def _qkv_names(num_layers: int) -> list[tuple[str, list[str]]]:
    """(our fused name, [HF query, key, value] names), in the order the fused matrix stacks them."""
    return [(f"encoder.layers.{i}.attention.qkv.{p}",
             [f"encoder.layer.{i}.attention.self.{part}.{p}" for part in ("query", "key", "value")])
            for i in range(num_layers) for p in ("weight", "bias")]


_HEAD_NAMES = [("mlm_head.dense.weight", "cls.predictions.transform.dense.weight"),
               ("mlm_head.dense.bias", "cls.predictions.transform.dense.bias"),
               ("mlm_head.norm.weight", "cls.predictions.transform.LayerNorm.weight"),
               ("mlm_head.norm.bias", "cls.predictions.transform.LayerNorm.bias"),
               ("mlm_head.bias", "cls.predictions.bias"),
               ("nsp_head.classifier.weight", "cls.seq_relationship.weight"),
               ("nsp_head.classifier.bias", "cls.seq_relationship.bias")]


# --- import --------------------------------------------------------------------------------

def config_from_hf(hf: dict) -> BertConfig:
    if hf.get("model_type", "bert") != "bert":
        raise ValueError(f"This is a {hf['model_type']!r} checkpoint, not BERT.")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"Only absolute position embeddings are supported, not {hf['position_embedding_type']!r}.")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise ValueError("BERT checkpoints configured as a decoder (is_decoder / cross-attention) are not supported.")
    fields = {ours: hf[theirs] for ours, theirs in _CONFIG_FIELDS.items() if theirs in hf}
    return BertConfig(**fields)


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a transformers folder, whichever of the four layouts it uses."""
    def load(file: Path) -> dict[str, torch.Tensor]:
        if file.suffix == ".safetensors":
            return safetensors.torch.load_file(str(file), device="cpu")
        return torch.load(file, map_location="cpu", weights_only=True)

    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if (folder / single).is_file():
            return load(folder / single)
        if (folder / index).is_file():
            shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(load(folder / shard))
            return state
    raise ValueError(f"{folder} holds no weights (model.safetensors or pytorch_model.bin).")


def _normalise_hf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip the "bert." prefix (BertModel folders have none) and the TF-era gamma/beta names."""
    out = {}
    for key, tensor in state.items():
        key = key.removeprefix("bert.")
        if key.endswith(".gamma") or key.endswith(".beta"):
            key = key.rsplit(".", 1)[0] + (".weight" if key.endswith(".gamma") else ".bias")
        out[key] = tensor
    return out


def from_pretrained(path: str | Path, map_location: str | torch.device = "cpu") -> BertForPreTraining:
    """Load a transformers BERT folder (BertForPreTraining, BertForMaskedLM or BertModel weights).

    Parts the checkpoint lacks (the NSP head and pooler of a BertForMaskedLM, both heads of a
    BertModel) keep their fresh initialisation; their names are logged and listed in
    `model.missing_keys`. Tensors we have no place for (e.g. a fine-tuned classifier) are
    listed in `model.unexpected_keys`. Returns the model in eval mode.
    """
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a Hugging Face model folder: config.json is missing.")
    config = config_from_hf(json.loads((folder / "config.json").read_text()))
    hf_state = _normalise_hf_names(_read_weights(folder))
    hf_state["cls.predictions.bias"] = hf_state.get("cls.predictions.bias", hf_state.get("cls.predictions.decoder.bias"))
    if hf_state["cls.predictions.bias"] is None:
        del hf_state["cls.predictions.bias"]

    model = BertForPreTraining(config)
    ours = model.state_dict()
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    pairs = [("bert." + o, t) for o, t in _backbone_names(config.num_layers)] + _HEAD_NAMES
    for our_key, hf_key in pairs:
        if hf_key in hf_state and our_key in ours:
            state[our_key] = hf_state[hf_key]
            used.add(hf_key)
    for our_key, parts in _qkv_names(config.num_layers):
        if all(p in hf_state for p in parts):
            state["bert." + our_key] = torch.cat([hf_state[p] for p in parts], dim=0)
            used.update(parts)

    missing = [k for k in ours if k not in state]
    essential = [k for k in missing if k.startswith("bert.") and not k.startswith("bert.pooler.")]
    if essential:
        raise ValueError(f"{folder} is not a complete BERT checkpoint; missing for example "
                         f"{', '.join(essential[:3])} ({len(essential)} tensors in all).")
    try:
        model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that disagree with config.json
        raise ValueError(f"The weights in {folder} do not match its config.json: {exc}") from exc

    model.missing_keys = missing
    model.unexpected_keys = sorted(k for k in hf_state if k not in used and not k.endswith(_IGNORED))
    if missing:
        log.warning("%s has no weights for %s; they keep their random initialisation.", folder, ", ".join(missing))
    if model.unexpected_keys:
        log.warning("%s: ignored tensors %s.", folder, ", ".join(model.unexpected_keys))
    return model.to(map_location).eval()


# --- export --------------------------------------------------------------------------------

def config_to_hf(config: BertConfig, architecture: str = "BertForPreTraining",
                 dtype: torch.dtype = torch.float32) -> dict:
    """transformers' config.json for a plain BERT; ValueError for variants transformers' BERT lacks."""
    unsupported = {
        "embedding_size": (config.embedding_size not in (None, config.hidden_size), "factorised embeddings"),
        "share_layers": (config.share_layers != "none", "shared layers"),
        "norm_placement": (config.norm_placement != "post", "pre-LayerNorm blocks"),
        "position_offset": (config.position_offset != 0, "offset position ids"),
        "type_vocab_size": (config.type_vocab_size == 0, "no token-type embeddings"),
        "use_pooler": (not config.use_pooler and architecture == "BertForPreTraining", "no pooler"),
    }
    for field, (bad, what) in unsupported.items():
        if bad:
            raise ValueError(f"transformers' BERT cannot represent {what} ({field}={getattr(config, field)!r}).")
    hf = {theirs: getattr(config, ours) for ours, theirs in _CONFIG_FIELDS.items()}
    hf.update(architectures=[architecture], model_type="bert", position_embedding_type="absolute",
              tie_word_embeddings=True, is_decoder=False, dtype=str(dtype).removeprefix("torch."))
    hf["torch_dtype"] = hf["dtype"]  # the name transformers 4.x reads
    return hf


def to_pretrained(model: BertForPreTraining | BertModel, path: str | Path) -> Path:
    """Write config.json + model.safetensors that transformers loads as BertForPreTraining
    (or BertModel when given a bare backbone). Returns the folder."""
    if isinstance(model, BertForPreTraining):
        backbone, prefix, architecture = model.bert, "bert.", "BertForPreTraining"
    elif isinstance(model, BertModel):
        backbone, prefix, architecture = model, "", "BertModel"
    else:
        raise TypeError(f"to_pretrained takes a BertForPreTraining or BertModel, not {type(model).__name__}.")
    config = backbone.config
    dtype = backbone.embeddings.word.weight.dtype
    hf_config = config_to_hf(config, architecture, dtype)

    ours = backbone.state_dict()
    out: dict[str, torch.Tensor] = {}
    for our_key, hf_key in _backbone_names(config.num_layers):
        if our_key in ours:
            out[prefix + hf_key] = ours[our_key]
    for our_key, parts in _qkv_names(config.num_layers):
        for part, tensor in zip(parts, ours[our_key].chunk(3, dim=0)):
            out[prefix + part] = tensor
    if isinstance(model, BertForPreTraining):
        heads = model.state_dict()
        out.update({hf_key: heads[our_key] for our_key, hf_key in _HEAD_NAMES})

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    # Fresh contiguous copies: safetensors refuses tensors that share memory (the Q/K/V slices).
    out = {k: v.detach().to("cpu").clone().contiguous() for k, v in out.items()}
    safetensors.torch.save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    return folder

