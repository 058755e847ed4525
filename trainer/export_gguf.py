"""Export a GPT-2 checkpoint as one GGUF file (what llama.cpp, Ollama and LM Studio load).

    check_exportable(checkpoint_dir)             ExportError unless it is a GPT-2 checkpoint (JSON only)
    export_gguf(checkpoint_dir, out_dir) -> ExportResult(folder, "gpt2", files)

The folder written holds:

- model.gguf: llama.cpp's "gpt2" architecture, every tensor in F32 (no quantisation, so the file
  computes what the checkpoint computes; llama.cpp's `llama-quantize` makes smaller ones from it).
  Metadata: general.architecture/name/license/file_type/description, gpt2.context_length,
  embedding_length, feed_forward_length, block_count, attention.head_count(_kv),
  attention.layer_norm_epsilon; the tokenizer: tokenizer.ggml.model "gpt2" (byte-level BPE),
  tokenizer.ggml.pre "gpt-2" (GPT-2's split regex, which our ByteLevel pre-tokenizer uses),
  tokens, token_type (normal, control for the special tokens, unused for rows the model has
  beyond the tokenizer), merges, the bos/eos/unknown/padding ids, add_bos/add_eos false (a GPT
  run's documents are only separated by EOS), add_space_prefix.
  Tensors, in llama.cpp's gpt2 names: token_embd, position_embd, blk.N.{attn_norm, attn_qkv,
  attn_output, ffn_norm, ffn_up, ffn_down} (.weight and .bias), output_norm, and output.weight
  only when the output layer is not tied to token_embd (llama.cpp then reuses token_embd).
  Layout: a GGUF tensor's dimensions are numpy's reversed, so a torch Linear weight (out, in)
  stored as it is reads as ggml's {in, out}, which is what llama.cpp's gpt2 loader asks for
  (convert_hf_to_gguf.py transposes GPT-2's Conv1D weights into exactly this). Our fused qkv
  holds Q, K, V one after the other, the order llama.cpp splits attn_qkv in.
- tokenizer.json, tokenizer_config.json, special_tokens_map.json (trainer.export.write_tokenizer_files)
- README.md, the model card (trainer.model_card).

What the GGUF cannot say about our tokenizer: it lowercases its input (a Lowercase normalizer)
and puts a space before the text and before each part of it that follows a special token
(ByteLevel add_prefix_space), and llama.cpp's BPE tokenizer does neither
(tokenizer.ggml.add_space_prefix is written, but llama.cpp reads it for SentencePiece
vocabularies only). A prompt lowercased and begun with a space gets the same ids as in the
workbench; general.description says so. The tokenizer.json beside the file is ours as it is, so
transformers' AutoTokenizer on this folder reads it (not the GGUF's vocabulary) and lowercases;
it also adds <s> ... </s> around a text (RoBERTa's template, which a GPT prompt here never has).

transformers (5.x) loads the file (`AutoModelForCausalLM.from_pretrained(folder,
gguf_file="model.gguf")`), which the tests use for parity, with two gaps of its own: it reads
gpt2.context_length into `n_ctx`, not `n_positions`, so a model with other than 1024 positions
needs `n_positions=` passed to from_pretrained, and it never reads feed_forward_length into
`n_inner`, so a model whose FFN is not 4 x hidden needs `n_inner=` too. llama.cpp reads both.

BERT as an embedding model (llama.cpp's "bert" architecture) is not written: transformers'
GGUF loader has no "bert" architecture (neither a config mapping nor a tensor mapping for it,
transformers/integrations/ggml.py and modeling_gguf_pytorch_utils.py), so no export of it could
be checked against our model the way GPT-2 is, and an unchecked file is not given.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from trainer.export import ExportError, ExportResult, staged, write_tokenizer_files

ARCHITECTURE = "gpt2"
GGUF_NAME = "model.gguf"
SUPPORTED = ("GGUF export is for GPT-2 checkpoints: a GPT run's pre-norm language model (or an imported "
             "GPT-2) with its byte-level BPE tokenizer")
# Our activations that are llama.cpp's gpt2 GELU (ggml_gelu: the tanh approximation).
GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")
# llama.cpp's token types (gguf.TokenType): NORMAL 1, CONTROL 3, USER_DEFINED 4, UNUSED 5.
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
# (our module in encoder.layers.N, llama.cpp's tensor in blk.N)
BLOCK_TENSORS = (("attn_norm", "attn_norm"), ("attention.qkv", "attn_qkv"), ("attention.out", "attn_output"),
                 ("ffn_norm", "ffn_norm"), ("ffn.up", "ffn_up"), ("ffn.down", "ffn_down"))


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ExportError(f"This checkpoint's {what} cannot be read, so it cannot be exported as GGUF.") from None


def check_exportable(checkpoint_dir: str | Path) -> None:
    """ExportError with a sentence for a checkpoint export_gguf refuses, from its JSON files alone
    (model_config.json, and tokenizer.json for the tokenizer's kind): anything but a GPT-2 language
    model (another family, GPT-1's post-norm blocks, a fine-tuned task head, bottleneck adapters,
    an activation llama.cpp's gpt2 does not compute) or a tokenizer other than byte-level BPE."""
    checkpoint = Path(checkpoint_dir)
    meta = _read_json(checkpoint / "model_config.json", "model_config.json")
    if not isinstance(meta, dict):
        raise ExportError("This checkpoint's model_config.json cannot be read, so it cannot be exported as GGUF.")
    family = str(meta.get("family", ""))
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    if family != "gpt":
        from trainer.export import export_refusal

        label = _family_label(family)
        instead = "" if export_refusal(family) else " Export it in the Hugging Face format instead."
        raise ExportError(f"{SUPPORTED}; this is a{'n' if label[:1] in 'AEIOU' else ''} {label} checkpoint.{instead}")
    task = meta.get("task")
    if task or meta.get("class") != "GPTLMHeadModel":
        name = task.get("task") if isinstance(task, dict) and task.get("task") else meta.get("class", "a task")
        raise ExportError(f"{SUPPORTED}; this checkpoint is fine-tuned with a task head ({name}), which llama.cpp's "
                          f"GPT-2 has no place for. Export it in the Hugging Face format instead.")
    if config.get("norm_placement", "pre") != "pre":
        raise ExportError(f"{SUPPORTED}; this is a GPT-1 style model (a LayerNorm after each residual addition, "
                          f"norm_placement 'post'), which llama.cpp's GPT-2 does not compute.")
    adapters = meta.get("adapters")
    if isinstance(adapters, dict) and adapters.get("size"):
        raise ExportError(f"{SUPPORTED}; this model carries bottleneck adapters (size {adapters['size']}), which "
                          f"llama.cpp's GPT-2 does not have.")
    act = config.get("hidden_act", "gelu_new")
    if act not in GELU_TANH:
        raise ExportError(f"{SUPPORTED}; this model's activation is {act!r}, and llama.cpp's GPT-2 computes the tanh "
                          f"approximation of GELU (gelu_new) only.")
    _tokenizer_kind(checkpoint)


def _family_label(family: str) -> str:
    from trainer import families

    return families.get(family).label if family in families.names() else (family or "unknown")


def _tokenizer_kind(checkpoint: Path) -> dict[str, bool]:
    """{"lowercase", "prefix_space"} of a byte-level BPE tokenizer.json; ExportError for another kind."""
    data = _read_json(checkpoint / "tokenizer.json", "tokenizer.json")
    model = data.get("model") if isinstance(data, dict) else None
    pre = data.get("pre_tokenizer") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(pre, dict) \
            or pre.get("type") != "ByteLevel":
        kind = model.get("type", "unknown") if isinstance(model, dict) else "unknown"
        raise ExportError(f"{SUPPORTED}; this checkpoint's tokenizer is {kind}"
                          f"{'' if kind != 'BPE' else ' without the byte-level pre-tokenizer'}, which GGUF's "
                          f"GPT-2 tokenizer cannot reproduce.")
    if not pre.get("use_regex", True):
        raise ExportError(f"{SUPPORTED}; this tokenizer's byte-level pre-tokenizer does not split words with GPT-2's "
                          f"regular expression, so llama.cpp would tokenize text differently.")
    normalizer = data.get("normalizer")
    steps = (normalizer.get("normalizers") or []) if isinstance(normalizer, dict) and \
        normalizer.get("type") == "Sequence" else [normalizer]
    return {"lowercase": any(isinstance(s, dict) and s.get("type") == "Lowercase" for s in steps),
            "prefix_space": bool(pre.get("add_prefix_space", False))}


def _vocabulary(checkpoint: Path, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges "a b") of the checkpoint's tokenizer, padded to the model's rows."""
    data = _read_json(checkpoint / "tokenizer.json", "tokenizer.json")
    by_id: dict[int, str] = {int(i): t for t, i in data["model"]["vocab"].items()}
    types = {i: NORMAL for i in by_id}
    for added in data.get("added_tokens") or []:
        by_id[int(added["id"])] = added["content"]
        types[int(added["id"])] = CONTROL if added.get("special") else USER_DEFINED
    n = max(by_id) + 1 if by_id else 0
    if n > vocab_size:
        raise ExportError(f"This checkpoint's tokenizer has {n} tokens but its model only {vocab_size} rows, so it "
                          f"cannot be exported as GGUF.")
    if sorted(by_id) != list(range(n)):
        raise ExportError("This checkpoint's tokenizer leaves gaps between its token ids, which a GGUF vocabulary "
                          "cannot have.")
    tokens = [by_id[i] for i in range(n)] + [f"[PAD{i}]" for i in range(n, vocab_size)]
    token_types = [types[i] for i in range(n)] + [UNUSED] * (vocab_size - n)
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"].get("merges") or []]
    return tokens, token_types, merges


def _description(kind: dict[str, bool]) -> str:
    made = "Exported by LM Workbench (GPT-2, F32)."
    steps = [(does, you) for (does, you), on in (
        (("lowercases the text", "lowercase the text"), kind["lowercase"]),
        (("puts a space before it (and after each special token)", "begin it with a space"), kind["prefix_space"]),
    ) if on]
    if not steps:
        return made
    return (f"{made} Its tokenizer {' and '.join(d for d, _ in steps)}, which llama.cpp does not do: "
            f"{' and '.join(y for _, y in steps)} yourself to get the ids it was trained on.")


def _tensors(model: Any) -> list[tuple[str, Any]]:
    """(llama.cpp's name, float32 numpy array) of every tensor, in the order llama.cpp lists them."""
    from models_lib.core import vocab

    state = vocab.unpadded_state_dict(model)  # vocab_size rows, as the vocabulary has
    config = model.config
    names = [("token_embd.weight", "embeddings.word.weight"), ("position_embd.weight", "embeddings.position.weight")]
    for i in range(config.num_layers):
        for ours, theirs in BLOCK_TENSORS:
            for part in ("weight", "bias"):
                names.append((f"blk.{i}.{theirs}.{part}", f"encoder.layers.{i}.{ours}.{part}"))
    names += [("output_norm.weight", "encoder.final_norm.weight"), ("output_norm.bias", "encoder.final_norm.bias")]
    if model.lm_head is not None:
        names.append(("output.weight", "lm_head.weight"))
    missing = [ours for _, ours in names if ours not in state]
    if missing:
        raise ExportError(f"This GPT model has no {missing[0]} tensor, which a GGUF GPT-2 needs, so it cannot be "
                          f"exported as GGUF.")
    return [(theirs, state[ours].detach().to("cpu").float().contiguous().numpy()) for theirs, ours in names]


def _write_gguf(path: Path, model: Any, checkpoint: Path, *, name: str, license: str,
                progress: Callable[[float], None]) -> None:
    try:
        import gguf
    except ImportError:
        raise ExportError("The GGUF export needs the gguf package, which is not installed here "
                          "(pip install gguf).") from None

    config = model.config
    kind = _tokenizer_kind(checkpoint)
    tokens, token_types, merges = _vocabulary(checkpoint, config.vocab_size)
    tok_meta = _read_json(checkpoint / "tokenizer_meta.json", "tokenizer_meta.json")
    roles = {k: int(v) for k, v in (tok_meta.get("special_tokens") or {}).items()}
    eos = config.eos_token_id if config.eos_token_id is not None else roles.get("sep")
    pad = config.pad_token_id if config.pad_token_id is not None else roles.get("pad")

    writer = gguf.GGUFWriter(path, ARCHITECTURE)
    try:
        writer.add_name(name)
        writer.add_license(license)
        writer.add_description(_description(kind))
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_block_count(config.num_layers)
        writer.add_head_count(config.num_heads)
        writer.add_head_count_kv(config.num_heads)
        writer.add_layer_norm_eps(config.layer_norm_eps)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("gpt-2")
        writer.add_token_list(tokens)
        writer.add_token_types(token_types)
        writer.add_token_merges(merges)
        if eos is not None:
            writer.add_bos_token_id(eos)  # as GPT-2's: its one boundary token starts and ends a text
            writer.add_eos_token_id(eos)
        if roles.get("unk") is not None:
            writer.add_unk_token_id(roles["unk"])
        if pad is not None:
            writer.add_pad_token_id(pad)
        writer.add_add_bos_token(False)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(kind["prefix_space"])
        for tensor_name, array in _tensors(model):
            writer.add_tensor(tensor_name, array)
        progress(60)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def export_gguf(checkpoint_dir: str | Path, out_dir: str | Path, *, name: str = "", license: str = "other",
                progress: Callable[[float], None] = lambda p: None) -> ExportResult:
    """Write the GPT-2 checkpoint in `checkpoint_dir` as a folder at `out_dir` (replaced whole, so a
    failed export leaves none) holding model.gguf, the tokenizer files and the model card.
    progress: percentages, 0 to 100. ExportError with a sentence for what cannot be exported."""
    from models_lib.checkpoint import load_model
    from models_lib.families.gpt import GPTLMHeadModel
    from trainer.model_card import check_license, write_model_card

    checkpoint, out = Path(checkpoint_dir), Path(out_dir)
    progress(0)
    license = check_license(license)  # sentences before anything is loaded
    check_exportable(checkpoint)
    try:
        model = load_model(checkpoint, map_location="cpu").eval()
    except (OSError, ValueError) as e:
        raise ExportError(f"The checkpoint {checkpoint.name} cannot be loaded, so it cannot be exported: {e}") from None
    if type(model) is not GPTLMHeadModel:
        raise ExportError(f"{SUPPORTED}; this checkpoint holds a {type(model).__name__}.")
    progress(30)
    try:
        with staged(out) as staging:
            _write_gguf(staging / GGUF_NAME, model, checkpoint, name=name or checkpoint.name, license=license,
                        progress=progress)
            progress(85)
            write_tokenizer_files(checkpoint, staging, max_positions=model.config.max_positions,
                                  with_token_types=False)
            files = sorted(p.name for p in staging.iterdir()) + ["README.md"]
            write_model_card(checkpoint, staging, fmt="gguf", architecture=ARCHITECTURE, name=name or checkpoint.name,
                             license=license, files=sorted(set(files)))
    except OSError as e:
        raise ExportError(f"The GGUF export could not be written to {out}: {e.strerror or e}.") from None
    progress(100)
    return ExportResult(out, ARCHITECTURE, sorted(p.name for p in out.iterdir()))
