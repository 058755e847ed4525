"""transformers' GPT-2 (GPT2LMHeadModel) on disk: import into GPTLMHeadModel and export from it.

    model = hf.from_pretrained(folder)    # config.json model_type "gpt2" lands here
    hf.to_pretrained(model, folder)       # a GPTLMHeadModel (family "gpt") is written from here

GPT-1's multiple-choice model (models_lib.families.gpt_tasks.GPTForMultipleChoice) is written as
GPT2DoubleHeadsModel: its head is the same (the state at the extract token, dropout, a 1-unit
linear layer: multiple_choice_head.summary, summary_type "cls_index" with mc_token_ids = the
extract token's position); its start, delimiter and extract rows are appended to wte as the ids
vocab_size, vocab_size + 1 and vocab_size + 2, which is what they are here, so config.json's
vocab_size is ours + 3. An untied LM head gets zero rows for them (the LM here never scores
them); a tied one scores them with their embeddings, so the LM logits agree on the real vocabulary.

Layout differences: GPT-2 keeps its projections in `Conv1D` modules whose weight is stored
(in, out), the transpose of a torch Linear's (out, in), so every matrix is transposed on the
way in and out; its fused `c_attn` (in, 3H) holds Q, K, V side by side in the same order as
our fused `qkv`, so a transpose is all it needs. Biases and LayerNorms map as they are.
Only the pre-norm layout (GPT-2) exists there: a GPT-1 style model (norm_placement "post")
cannot be exported.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from models_lib.core import vocab
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.hf.base import log, read_config, read_weights, write_folder

BASE_PREFIX = "transformer."  # the GPT2Model inside GPT2LMHeadModel

# Our config field <- GPT-2's config.json field.
CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "n_embd",
    "num_layers": "n_layer",
    "num_heads": "n_head",
    "intermediate_size": "n_inner",
    "max_position_embeddings": "n_positions",
    "hidden_act": "activation_function",
    "hidden_dropout": "resid_pdrop",
    "attention_dropout": "attn_pdrop",
    "embedding_dropout": "embd_pdrop",
    "layer_norm_eps": "layer_norm_epsilon",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
    "eos_token_id": "eos_token_id",
    "tie_word_embeddings": "tie_word_embeddings",
}
# transformers' other names for the activations we have ("gelu_new" is the tanh approximation).
ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_new"}
# Buffers that older GPT-2 files carry (the causal mask as a tensor); never read.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")

# (our name, GPT-2's name relative to the base model, stored transposed)
Names = list[tuple[str, str, bool]]


def weight_names(config: GPTConfig) -> Names:
    names: Names = [("embeddings.word.weight", "wte.weight", False),
                    ("embeddings.position.weight", "wpe.weight", False)]
    for i in range(config.num_layers):
        ours, theirs = f"encoder.layers.{i}.", f"h.{i}."
        for our_module, their_module, is_conv in (("attn_norm", "ln_1", False), ("attention.qkv", "attn.c_attn", True),
                                                  ("attention.out", "attn.c_proj", True), ("ffn_norm", "ln_2", False),
                                                  ("ffn.up", "mlp.c_fc", True), ("ffn.down", "mlp.c_proj", True)):
            names.append((f"{ours}{our_module}.weight", f"{theirs}{their_module}.weight", is_conv))
            names.append((f"{ours}{our_module}.bias", f"{theirs}{their_module}.bias", False))
    names += [("encoder.final_norm.weight", "ln_f.weight", False), ("encoder.final_norm.bias", "ln_f.bias", False)]
    return names


# --- config ----------------------------------------------------------------------------------

def config_from_hf(hf: dict) -> GPTConfig:
    """Our GPTConfig for a GPT-2 config.json (as a dict); ValueError for what we cannot run."""
    if hf.get("add_cross_attention"):
        raise ValueError("GPT-2 checkpoints with cross-attention (add_cross_attention) are not supported.")
    if not hf.get("scale_attn_weights", True):
        raise ValueError("GPT-2 checkpoints without the 1/sqrt(head size) attention scaling "
                         "(scale_attn_weights=false) are not supported.")
    if hf.get("scale_attn_by_inverse_layer_idx"):
        raise ValueError("GPT-2 checkpoints that scale attention by the inverse layer index "
                         "(scale_attn_by_inverse_layer_idx) are not supported.")
    fields = {ours: hf[theirs] for ours, theirs in CONFIG_FIELDS.items() if theirs in hf}
    if "hidden_act" in fields:
        fields["hidden_act"] = ACTIVATION_ALIASES.get(fields["hidden_act"], fields["hidden_act"])
    for name in ("pad_token_id", "eos_token_id"):  # lists (several stop tokens) have no field of ours
        if isinstance(fields.get(name), list):
            fields[name] = fields[name][0] if fields[name] else None
    return GPTConfig(**fields)


def config_to_hf(config: GPTConfig, dtype: torch.dtype = torch.float32) -> dict:
    """GPT-2's config.json for our config; ValueError for a GPT-1 style (post-norm) model."""
    if config.norm_placement != "pre":
        raise ValueError("transformers' GPT-2 format is pre-norm (a LayerNorm at each block's input and a final "
                         "LayerNorm); this GPT-1 style model (norm_placement='post') cannot be written as GPT-2.")
    hf = {theirs: getattr(config, ours) for ours, theirs in CONFIG_FIELDS.items()}
    dtype_name = str(dtype).removeprefix("torch.")
    hf.update(architectures=["GPT2LMHeadModel"], model_type="gpt2", n_ctx=config.max_position_embeddings,
              bos_token_id=config.eos_token_id, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
              reorder_and_upcast_attn=False, add_cross_attention=False, use_cache=True,
              dtype=dtype_name, torch_dtype=dtype_name)  # torch_dtype: the name transformers 4.x reads
    return hf


# --- import ----------------------------------------------------------------------------------

def from_pretrained(folder: str | Path, map_location: str | torch.device = "cpu") -> GPTLMHeadModel:
    """A GPT2LMHeadModel (or bare GPT2Model) folder as our GPTLMHeadModel, in eval mode.

    Like hf.from_pretrained for encoders: a folder without an output layer (GPT2Model, untied)
    keeps a fresh one and lists it in `model.missing_keys`; tensors with no place here are in
    `model.unexpected_keys`.
    """
    folder = Path(folder)
    hf = read_config(folder)
    config = config_from_hf(hf)
    state = {k.removeprefix(BASE_PREFIX): v for k, v in read_weights(folder).items()}
    model = GPTLMHeadModel(config)
    ours: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for our_key, their_key, transposed in weight_names(config):
        if their_key in state:
            ours[our_key] = state[their_key].t() if transposed else state[their_key]
            used.add(their_key)
    if model.lm_head is not None and "lm_head.weight" in state:
        ours["lm_head.weight"] = state["lm_head.weight"]
    used.add("lm_head.weight")  # when tied it is the word embeddings again (if written at all)

    expected = model.state_dict()
    missing = [k for k in expected if k not in ours]
    essential = [k for k in missing if k != "lm_head.weight"]
    if essential:
        raise ValueError(f"{folder} is not a complete GPT-2 checkpoint; missing for example "
                         f"{', '.join(essential[:3])} ({len(essential)} tensors in all).")
    try:
        model.load_state_dict(ours, strict=False)
    except RuntimeError as exc:  # shapes that disagree with config.json
        raise ValueError(f"The weights in {folder} do not match its config.json: {exc}") from exc
    model.missing_keys = missing
    model.unexpected_keys = sorted(k for k in state if k not in used and not k.endswith(IGNORED_SUFFIXES))
    if missing:
        log.warning("%s has no weights for %s; they keep their random initialisation.", folder, ", ".join(missing))
    if model.unexpected_keys:
        log.warning("%s: ignored tensors %s.", folder, ", ".join(model.unexpected_keys))
    return model.to(map_location).eval()


# --- export ----------------------------------------------------------------------------------

def to_pretrained(model: nn.Module, folder: str | Path) -> Path:
    """Write config.json + model.safetensors that transformers loads as GPT2LMHeadModel (as
    GPT2DoubleHeadsModel for GPT-1's multiple-choice model, see the module docstring)."""
    from models_lib.families.gpt_tasks import GPTForMultipleChoice

    if not isinstance(model, GPTLMHeadModel):
        raise TypeError(f"to_pretrained writes a GPTLMHeadModel as GPT-2, not a {type(model).__name__}.")
    config = model.config
    hf_config = config_to_hf(config, model.word_embeddings.dtype)
    ours = vocab.unpadded_state_dict(model)  # vocab_size rows, as transformers' tables have
    tensors = {BASE_PREFIX + theirs: (ours[our_key].t() if transposed else ours[our_key])
               for our_key, theirs, transposed in weight_names(config)}
    if model.lm_head is not None:
        tensors["lm_head.weight"] = ours["lm_head.weight"]
    if isinstance(model, GPTForMultipleChoice):
        special = ours["embeddings.special.weight"]
        tensors[BASE_PREFIX + "wte.weight"] = torch.cat([tensors[BASE_PREFIX + "wte.weight"], special])
        if "lm_head.weight" in tensors:
            tensors["lm_head.weight"] = torch.cat([tensors["lm_head.weight"], torch.zeros_like(special)])
        tensors["multiple_choice_head.summary.weight"] = ours["classifier.weight"]
        tensors["multiple_choice_head.summary.bias"] = ours["classifier.bias"]
        dropout = model.classifier_dropout.p
        hf_config.update(architectures=["GPT2DoubleHeadsModel"], vocab_size=config.vocab_size + special.shape[0],
                         num_labels=1, summary_type="cls_index", summary_use_proj=True, summary_proj_to_labels=True,
                         summary_activation=None, summary_first_dropout=dropout, summary_last_dropout=0.0,
                         start_token_id=config.vocab_size, delimiter_token_id=config.vocab_size + 1,
                         extract_token_id=config.vocab_size + 2)
    return write_folder(Path(folder), tensors, hf_config)
