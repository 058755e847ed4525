"""Export a checkpoint as ONNX files that onnxruntime runs, checked against the model before they are given.

    check_exportable(checkpoint_dir)                       JSON only: ExportError for what is refused
    export_onnx(checkpoint_dir, out_dir) -> ExportResult   the folder below, verified in onnxruntime

What a folder holds (the file, input and output names are Hugging Face optimum's, so its
ORTModelFor... classes and code written for optimum's files read them):

  encoder families (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, SpanBERT, TinyBERT, UniLM)
      model.onnx   inputs  input_ids, attention_mask (batch_size, sequence_length) int64, and
                           token_type_ids where the family's tokenizer gives them (BERT, ALBERT,
                           ELECTRA, SpanBERT, TinyBERT, UniLM; not RoBERTa, whose one token type is
                           always 0, nor DistilBERT, which has none)
                   outputs the checkpoint's own head:
                     pre-training          logits (batch_size, sequence_length, vocab): the MLM head
                                           (ELECTRA: the discriminator's replaced-token logits
                                           (batch_size, sequence_length), what its HF export keeps)
                     sequence classif.     logits (batch_size, num_labels)
                     token classification  logits (batch_size, sequence_length, num_labels)
                     extractive QA         start_logits, end_logits (batch_size, sequence_length)
                     a bare backbone       last_hidden_state (batch_size, sequence_length, hidden)
      UniLM reads a (batch, length) padding mask here, i.e. bidirectionally; its seq2seq
      (B, T, T) attention masks are not an input of the file.
  GPT (GPT-2 and GPT-1 style language models)
      model.onnx   one decoder for every step, as optimum's "with past" decoder:
                   inputs  input_ids, position_ids (batch_size, sequence_length);
                           attention_mask (batch_size, past_sequence_length + sequence_length),
                           1/0 over the cached and the new tokens (left padding);
                           past_key_values.{i}.key / .value (batch_size, num_heads,
                           past_sequence_length, head_size), float32, for layer i = 0..L-1
                   outputs logits (batch_size, sequence_length, vocab);
                           present.{i}.key / .value (batch_size, num_heads,
                           past_sequence_length + sequence_length, head_size)
                   The first step passes empty pasts (past_sequence_length 0); each next step the
                   presents of the one before. position_ids: the count of real tokens before each
                   one (attention_mask.cumsum(-1) - 1, clamped at 0), as generation does.
  T5
      encoder_model.onnx            input_ids, attention_mask (batch_size, encoder_sequence_length)
                                    -> last_hidden_state (batch_size, encoder_sequence_length, d_model)
      decoder_model.onnx            input_ids (batch_size, decoder_sequence_length),
                                    encoder_attention_mask, encoder_hidden_states
                                    -> logits, present.{i}.decoder.key / .value and
                                       present.{i}.encoder.key / .value (batch_size, num_heads, *, d_kv)
      decoder_with_past_model.onnx  input_ids (the new tokens), encoder_attention_mask,
                                    past_key_values.{i}.decoder.key / .value, past_key_values.{i}.encoder.key
                                    / .value -> logits, present.{i}.decoder.key / .value
  and beside them: tokenizer.json, tokenizer_config.json, special_tokens_map.json (as the
  Hugging Face export writes them), config.json (transformers' config where the model has a
  transformers counterpart; otherwise our config with architectures and model_type) and README.md
  (trainer.model_card).

Every export is checked before it is given: onnxruntime runs the files on fixed inputs (a batch of
two of different lengths, padded; GPT: a first step with an empty past, then a step with the past
it returned; T5: the encoder, the decoder on its output, then a step of the decoder with past) and
their logits must equal the PyTorch model's within 1e-4 (the largest absolute difference, over the
real tokens); otherwise ExportError says by how much they differ, and nothing is left at out_dir.

The exporter: torch.onnx.export with dynamo=True (torch.export + onnxscript), dynamic axes given as
torch.export.Dim's. We chose it over the TorchScript tracer (dynamo=False) for correctness: tried on
these models (torch 2.13, onnxruntime 1.32), the tracer wrote a T5 encoder that onnxruntime refuses
to load (a node reads the output of an RMSNorm cast it never wrote), and a tracer follows the Python
branches its dummy input takes and freezes them without a word (the forward's "nothing is padded:
drop the mask" test, for one), where torch.export refuses data-dependent control flow loudly. The
TorchScript exporter is also the deprecated one. The graphs below therefore bypass the few such
shortcuts of the PyTorch forward (that padding test, GPT's position-range check) and compute what
the model does without them; the check against the model makes sure of it. Its cost is time: a few
seconds per graph even for a tiny model (mostly torch.export's decompositions and the onnxscript
optimizer), against well under a second for the tracer. The dummy inputs have every dynamic axis at
2 or more (torch.export fixes axes of size 0 or 1), and a length that the model branches on (causal
masking "when the query length is over 1") is declared from 2 up; the graph then masks always, which
is the same answer at length 1 (the tests run length-1 steps and empty pasts).
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainer.export import ExportError, ExportResult, staged, write_tokenizer_files

TOLERANCE = 1e-4  # the largest absolute difference of logits between onnxruntime and PyTorch
OPSET = 18
ENCODER_FAMILIES = ("bert", "roberta", "albert", "electra", "distilbert", "spanbert", "tinybert", "unilm")
SUPPORTED = ("BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, SpanBERT, TinyBERT and UniLM models (pre-trained or "
             "fine-tuned for sequence classification, token classification or extractive question answering), "
             "GPT language models and T5")
REFUSED = {
    "elmo": "ELMo's character convolutions and bidirectional LSTMs",
    "transfo_xl": "Transformer-XL's segment-level memory and relative positions",
    "xlnet": "XLNet's two-stream attention over permutations and its memory",
}
ENCODER_CLASSES = ("TransformerEncoder", "BertModel", "BertForPreTraining", "RobertaForPreTraining",
                   "AlbertForPreTraining", "ElectraForPreTraining", "ElectraDiscriminator", "ElectraGenerator",
                   "DistilBertForPreTraining", "SpanBertForPreTraining", "TinyBertForPreTraining",
                   "UniLMForPreTraining", "EncoderForSequenceClassification", "EncoderForTokenClassification",
                   "EncoderForQuestionAnswering")
TASKS = ("sequence_classification", "token_classification", "question_answering")


def _refusal(family: str) -> str:
    return (f"{REFUSED[family]} have no ONNX export here; the ONNX export takes {SUPPORTED}. This checkpoint "
            f"can still be explored and used in the app.")


def check_exportable(checkpoint_dir: str | Path) -> None:
    """ExportError, from model_config.json alone (no torch), for a checkpoint this export refuses."""
    try:
        meta = json.loads((Path(checkpoint_dir) / "model_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ExportError("This checkpoint's model_config.json cannot be read, so it cannot be exported.") from None
    if not isinstance(meta, dict):
        raise ExportError("This checkpoint's model_config.json is not a model description, so it cannot be exported.")
    family = str(meta.get("family", "bert"))
    cls = str(meta.get("class", ""))
    task = meta.get("task") if isinstance(meta.get("task"), dict) else None
    if family in REFUSED:
        raise ExportError(_refusal(family))
    if family == "gpt":
        if task is not None or cls not in ("", "GPTLMHeadModel"):
            what = (task or {}).get("task") or cls
            raise ExportError(f"This GPT checkpoint is a fine-tuned {what} model, which has no ONNX export here; the "
                              f"ONNX export takes {SUPPORTED}.")
        return
    if family == "t5":
        return
    if family not in ENCODER_FAMILIES:
        raise ExportError(f"This is a {family!r} checkpoint, which has no ONNX export; the ONNX export takes {SUPPORTED}.")
    if cls and cls not in ENCODER_CLASSES:
        raise ExportError(f"This {family} checkpoint holds a {cls}, which has no ONNX export; the ONNX export takes "
                          f"{SUPPORTED}.")
    if task is not None and task.get("task") not in TASKS:
        raise ExportError(f"This {family} checkpoint is fine-tuned for {task.get('task')!r}, which has no ONNX export; "
                          f"the ONNX export takes {SUPPORTED}.")


# --- the graphs ----------------------------------------------------------------------------------

@dataclass
class Graph:
    """One ONNX file: the module to export, its dummy inputs, names and dynamic axes."""

    filename: str
    module: Any  # torch.nn.Module
    args: tuple
    input_names: list[str]
    output_names: list[str]
    dynamic_shapes: tuple
    extra: dict = field(default_factory=dict)


def _dims():
    """(torch.export.Dim, torch), imported when a graph is built."""
    import torch

    return torch.export.Dim, torch


def _encoder_kind(model) -> tuple[str, Any]:
    """(what the head gives, the module holding backbone and head) for an encoder model."""
    from models_lib.core.encoder import TransformerEncoder
    from models_lib.families.downstream import EncoderForDownstream
    from models_lib.families.electra import ElectraDiscriminator, ElectraForPreTraining
    from models_lib.families.pretraining import EncoderForPreTraining

    if isinstance(model, EncoderForDownstream):
        return model.task_config.task, model
    if isinstance(model, ElectraForPreTraining):
        return "rtd", model.discriminator
    if isinstance(model, ElectraDiscriminator):
        return "rtd", model
    if isinstance(model, EncoderForPreTraining):
        return "mlm", model
    if isinstance(model, TransformerEncoder):
        return "hidden", model
    raise ExportError(f"{type(model).__name__} has no ONNX export; the ONNX export takes {SUPPORTED}.")


def _encoder_module(kind: str):
    from torch import nn

    from models_lib.core.encoder import TransformerEncoder
    from models_lib.core.layers import build_attention_mask

    class EncoderGraph(nn.Module):
        """The encoder and its head, as the model's forward computes them, without its data-dependent
        shortcut (an unpadded batch dropping the mask: the same numbers either way)."""

        def __init__(self, holder: nn.Module):
            super().__init__()
            self.holder = holder

        def _hidden(self, input_ids, attention_mask, token_type_ids):
            holder = self.holder
            backbone = holder if isinstance(holder, TransformerEncoder) else holder.backbone
            x = backbone.embeddings(input_ids, token_type_ids)
            if backbone.embeddings_project is not None:
                x = backbone.embeddings_project(x)
            return backbone, backbone.encoder(x, build_attention_mask(attention_mask))

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            backbone, hidden = self._hidden(input_ids, attention_mask, token_type_ids)
            holder = self.holder
            if kind == "hidden":
                return hidden
            if kind == "mlm":
                return holder.mlm_head(hidden, holder.word_embeddings)
            if kind == "rtd":
                return holder.rtd_head(hidden)
            if kind == "sequence_classification":
                if holder.reads_pooler(holder.config.family):
                    return holder.head(backbone.pooler(hidden))
                return holder.head(hidden[:, 0])
            if kind == "token_classification":
                return holder.head(hidden)
            start, end = holder.head(hidden)
            return start, end

    return EncoderGraph


def _encoder_graphs(model, holder, kind: str, with_types: bool, max_positions: int) -> list[Graph]:
    Dim, torch = _dims()
    module = _encoder_module(kind)(holder).eval()
    ids = _dummy_ids(model, 2, 7)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    batch, seq = Dim("batch_size"), Dim("sequence_length", min=2, max=max(2, max_positions))
    names = ["input_ids", "attention_mask"]
    args: tuple = (ids, mask)
    shapes: tuple = ({0: batch, 1: seq}, {0: batch, 1: seq})
    if with_types:
        types = torch.zeros_like(ids)
        types[0, 4:] = 1 if getattr(model.config, "type_vocab_size", 0) > 1 else 0
        names.append("token_type_ids")
        args += (types,)
        shapes += ({0: batch, 1: seq},)
    outputs = {"hidden": ["last_hidden_state"], "question_answering": ["start_logits", "end_logits"]}.get(kind, ["logits"])
    return [Graph("model.onnx", module, args, names, outputs, shapes)]


def _dummy_ids(model, batch: int, length: int):
    import torch

    vocab = int(model.config.vocab_size)
    g = torch.Generator().manual_seed(0)
    return torch.randint(min(5, vocab - 1), vocab, (batch, length), generator=g)


def _gpt_module(model):
    import torch
    from torch import nn

    from models_lib.core.layers import KVCache, causal_mask

    class GPTDecoder(nn.Module):
        """GPTLMHeadModel's step: the new tokens after the cached keys/values (none at the first step).
        The mask is what GPTLMHeadModel.encode builds: causal, padded keys hidden, and a padding query
        sees itself (its row stays defined; its logits are not used)."""

        def __init__(self, lm: nn.Module):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, position_ids, *past):
            lm = self.lm
            T, S = input_ids.shape[1], attention_mask.shape[1]
            real = attention_mask.bool()  # (B, S)
            mask = real[:, None, None, :] & causal_mask(T, S, device=input_ids.device)  # (B, 1, T, S)
            query_pos = torch.arange(T, device=input_ids.device) + (S - T)
            own = query_pos[:, None] == torch.arange(S, device=input_ids.device)[None, :]  # (T, S)
            mask = mask | (own & ~real[:, None, None, :])  # key j = the query itself, where that is padding
            caches = [KVCache(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
            x = lm.embeddings.dropout(lm.embeddings.word(input_ids) + lm.embeddings.position(position_ids))
            hidden = lm.encoder(x, mask, causal=True, caches=caches)
            presents = [t for c in caches for t in (c.k, c.v)]
            return (lm.logits(hidden), *presents)

    return GPTDecoder


def _gpt_graphs(model) -> list[Graph]:
    Dim, torch = _dims()
    from models_lib.families.gpt import positions_from_mask

    config = model.config
    L, N = len(model.encoder.order), config.num_heads
    D = config.hidden_size // N
    B, P, T = 2, 3, 4
    ids = _dummy_ids(model, B, T)
    mask = torch.ones(B, P + T, dtype=torch.long)
    mask[1, :2] = 0
    positions = positions_from_mask(mask)[:, -T:].clone()  # not a view: torch.export would read its base
    past = tuple(torch.randn(B, N, P, D) * 0.1 for _ in range(2 * L))
    batch = Dim("batch_size")
    seq = Dim("sequence_length", min=2, max=config.max_positions)
    past_len = Dim("past_sequence_length", min=2, max=config.max_positions)
    total = Dim.AUTO
    kv = {0: batch, 2: past_len}
    shapes = ({0: batch, 1: seq}, {0: batch, 1: total}, {0: batch, 1: seq}, tuple([kv] * (2 * L)))  # *past: one tuple
    names = ["input_ids", "attention_mask", "position_ids",
             *[f"past_key_values.{i}.{w}" for i in range(L) for w in ("key", "value")]]
    outputs = ["logits", *[f"present.{i}.{w}" for i in range(L) for w in ("key", "value")]]
    module = _gpt_module(model)(model).eval()
    return [Graph("model.onnx", module, (ids, mask, positions, *past), names, outputs, shapes,
                  {"layers": L, "heads": N, "head_size": D,
                   "axis_names": {"attention_mask": {1: "past_sequence_length + sequence_length"}}})]


def _t5_modules():
    from torch import nn

    from models_lib.core.layers import KVCache, build_attention_mask

    class T5Encoder(nn.Module):
        def __init__(self, t5: nn.Module):
            super().__init__()
            self.t5 = t5

        def forward(self, input_ids, attention_mask):
            return self.t5.encode(input_ids, attention_mask)

    class T5Decoder(nn.Module):
        """The decoder from its first token: logits and every layer's keys/values (self and cross)."""

        def __init__(self, t5: nn.Module):
            super().__init__()
            self.t5 = t5

        def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states):
            n = self.t5.config.num_decoder_layers
            caches, cross = [KVCache() for _ in range(n)], [KVCache() for _ in range(n)]
            hidden = self.t5.decode(input_ids, encoder_hidden_states, build_attention_mask(encoder_attention_mask),
                                    caches=caches, cross_caches=cross)
            presents = [t for c, x in zip(caches, cross) for t in (c.k, c.v, x.k, x.v)]
            return (self.t5.logits(hidden), *presents)

    class T5DecoderWithPast(nn.Module):
        """The next decoder tokens after the cached ones; the encoder's keys/values come cached too."""

        def __init__(self, t5: nn.Module):
            super().__init__()
            self.t5 = t5

        def forward(self, input_ids, encoder_attention_mask, *past):
            n = self.t5.config.num_decoder_layers
            caches = [KVCache(past[4 * i], past[4 * i + 1]) for i in range(n)]
            cross = [KVCache(past[4 * i + 2], past[4 * i + 3]) for i in range(n)]
            hidden = self.t5.decoder(self.t5.shared(input_ids), None, context=None,
                                     context_mask=build_attention_mask(encoder_attention_mask), caches=caches,
                                     cross_caches=cross)
            presents = [t for c in caches for t in (c.k, c.v)]
            return (self.t5.logits(hidden), *presents)

    return T5Encoder, T5Decoder, T5DecoderWithPast


def _t5_graphs(model) -> list[Graph]:
    Dim, torch = _dims()
    config = model.config
    n, N, D = config.num_decoder_layers, config.num_heads, config.d_kv
    encoder_cls, decoder_cls, with_past_cls = _t5_modules()
    B, S, T, P = 2, 7, 3, 3
    ids = _dummy_ids(model, B, S)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    dec = _dummy_ids(model, B, T)
    with torch.no_grad():
        states = model.encode(ids, mask)
    batch = Dim("batch_size")
    enc_len = Dim("encoder_sequence_length", min=2)
    dec_len = Dim("decoder_sequence_length", min=2)
    past_len = Dim("past_decoder_sequence_length", min=2)
    layer_names = [f"{i}.{part}.{w}" for i in range(n) for part in ("decoder", "encoder") for w in ("key", "value")]
    self_names = [f"{i}.decoder.{w}" for i in range(n) for w in ("key", "value")]
    encoder = Graph("encoder_model.onnx", encoder_cls(model).eval(), (ids, mask), ["input_ids", "attention_mask"],
                    ["last_hidden_state"], ({0: batch, 1: enc_len}, {0: batch, 1: enc_len}))
    decoder = Graph("decoder_model.onnx", decoder_cls(model).eval(), (dec, mask, states),
                    ["input_ids", "encoder_attention_mask", "encoder_hidden_states"],
                    ["logits", *[f"present.{name}" for name in layer_names]],
                    ({0: batch, 1: dec_len}, {0: batch, 1: enc_len}, {0: batch, 1: enc_len}))
    past = []
    for _ in range(n):
        past += [torch.randn(B, N, P, D) * 0.1, torch.randn(B, N, P, D) * 0.1,
                 torch.randn(B, N, S, D) * 0.1, torch.randn(B, N, S, D) * 0.1]
    self_kv, cross_kv = {0: batch, 2: past_len}, {0: batch, 2: enc_len}
    with_past = Graph("decoder_with_past_model.onnx", with_past_cls(model).eval(), (dec, mask, *past),
                      ["input_ids", "encoder_attention_mask", *[f"past_key_values.{name}" for name in layer_names]],
                      ["logits", *[f"present.{name}" for name in self_names]],
                      ({0: batch, 1: dec_len}, {0: batch, 1: enc_len}, tuple([self_kv, self_kv, cross_kv, cross_kv] * n)))
    return [encoder, decoder, with_past]


# --- writing and checking ---------------------------------------------------------------------------

@contextlib.contextmanager
def _quiet():
    """The exporter's warnings and notices (deprecations, optional torchvision ops) are not the user's."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _write_graph(graph: Graph, folder: Path) -> list[str]:
    """Export one graph into folder; the names of the files written (an external .data file for
    weights past 2 GB)."""
    import torch

    size = sum(p.numel() * p.element_size() for p in graph.module.parameters())
    external = size > 1_500_000_000
    before = set(os.listdir(folder))
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(graph.module, graph.args, dynamo=True, opset_version=OPSET,
                                        input_names=graph.input_names, output_names=graph.output_names,
                                        dynamic_shapes=graph.dynamic_shapes, verbose=False, optimize=True)
            program.save(str(folder / graph.filename), external_data=external)
        if graph.extra.get("axis_names"):
            _name_axes(folder / graph.filename, graph.extra["axis_names"])
    except ExportError:
        raise
    except Exception as e:  # the exporter's own errors: one sentence, not its traceback
        raise ExportError(f"torch.onnx could not export {graph.filename}: {_gist(e)}") from None
    return sorted(set(os.listdir(folder)) - before)


def _gist(error: Exception) -> str:
    """One line of an exporter's or onnxruntime's error: its exception summary where it has one
    (torch.onnx's messages open with advice on filing issues), without terminal colours."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        lines = lines[lines.index("## Exception summary") + 1:]
    return (lines[0] if lines else type(error).__name__)[:300]


def _name_axes(path: Path, names: dict[str, dict[int, str]]) -> None:
    """Give inputs' axes that torch.export named by its own symbols (an axis of Dim.AUTO) our names."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for value in model.graph.input:
        for axis, name in names.get(value.name, {}).items():
            value.type.tensor_type.shape.dim[axis].dim_param = name
    onnx.save(model, str(path))


def _session(path: Path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _run(session, feeds: dict) -> dict:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {k: v.numpy() if hasattr(v, "numpy") else v
                                               for k, v in feeds.items()})))


class _Difference:
    """The largest |onnxruntime - PyTorch| seen, and where."""

    def __init__(self):
        self.value, self.where = 0.0, ""

    def add(self, ours, theirs, where: str, keep=None) -> None:
        import numpy as np

        a, b = ours.detach().float().numpy(), np.asarray(theirs, dtype=np.float32)
        if a.shape != b.shape:
            raise ExportError(f"The ONNX file gives {where} of shape {tuple(b.shape)}, but the model gives "
                              f"{tuple(a.shape)}; the export is refused.")
        if keep is not None:
            a, b = a[keep], b[keep]
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        if not np.isfinite(diff):
            diff = float("inf")
        if diff > self.value or not self.where:
            self.value, self.where = diff, where


def _check_encoder(model, kind: str, holder, folder: Path, with_types: bool, diff: _Difference) -> None:
    import torch

    session = _session(folder / "model.onnx")
    ids = _dummy_ids(model, 2, 9)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # a batch of two of different lengths, the second padded
    feeds = {"input_ids": ids, "attention_mask": mask}
    types = None
    if with_types:
        types = torch.zeros_like(ids)
        if getattr(model.config, "type_vocab_size", 0) > 1:
            types[:, 3:] = 1
        feeds["token_type_ids"] = types
    out = _run(session, feeds)
    real = mask.bool().numpy()
    with torch.no_grad():
        if kind == "hidden":
            diff.add(holder(ids, mask, types).hidden_states, out["last_hidden_state"], "last_hidden_state", real)
        elif kind == "mlm":
            diff.add(holder(ids, mask, types).mlm_logits, out["logits"], "the MLM logits", real)
        elif kind == "rtd":
            diff.add(holder(ids, mask, types), out["logits"], "the replaced-token logits", real)
        elif kind == "question_answering":
            result = holder(ids, mask, types)
            diff.add(result.start_logits, out["start_logits"], "start_logits", real)
            diff.add(result.end_logits, out["end_logits"], "end_logits", real)
        else:
            diff.add(holder(ids, mask, types).logits, out["logits"], "the logits",
                     real if kind == "token_classification" else None)


def _check_gpt(model, folder: Path, graph: Graph, diff: _Difference) -> None:
    import torch

    from models_lib.families.gpt import positions_from_mask

    session = _session(folder / "model.onnx")
    L, N, D = graph.extra["layers"], graph.extra["heads"], graph.extra["head_size"]
    ids = _dummy_ids(model, 2, 6)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding: the second prompt is two tokens shorter
    empty = {f"past_key_values.{i}.{w}": torch.zeros(2, N, 0, D) for i in range(L) for w in ("key", "value")}
    first = _run(session, {"input_ids": ids, "attention_mask": mask, "position_ids": positions_from_mask(mask),
                           **empty})
    new = _dummy_ids(model, 2, 8)[:, -2:]
    full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
    past = {f"past_key_values.{i}.{w}": first[f"present.{i}.{w}"] for i in range(L) for w in ("key", "value")}
    second = _run(session, {"input_ids": new, "attention_mask": full_mask,
                            "position_ids": positions_from_mask(full_mask)[:, -2:], **past})
    with torch.no_grad():
        whole = model(torch.cat([ids, new], dim=1), full_mask).logits
    diff.add(whole[:, :6], first["logits"], "the logits of the first step", mask.bool().numpy())
    diff.add(whole[:, 6:], second["logits"], "the logits of a step with past")


def _check_t5(model, folder: Path, diff: _Difference) -> None:
    import torch

    encoder = _session(folder / "encoder_model.onnx")
    decoder = _session(folder / "decoder_model.onnx")
    with_past = _session(folder / "decoder_with_past_model.onnx")
    n = model.config.num_decoder_layers
    ids = _dummy_ids(model, 2, 9)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    start = torch.full((2, 1), model.config.decoder_start_token_id, dtype=torch.long)
    dec = torch.cat([start, _dummy_ids(model, 2, 3)], dim=1)  # (2, 4)
    nxt = _dummy_ids(model, 2, 5)[:, -1:]
    states = _run(encoder, {"input_ids": ids, "attention_mask": mask})["last_hidden_state"]
    first = _run(decoder, {"input_ids": dec, "encoder_attention_mask": mask, "encoder_hidden_states": states})
    past = {f"past_key_values.{i}.{part}.{w}": first[f"present.{i}.{part}.{w}"]
            for i in range(n) for part in ("decoder", "encoder") for w in ("key", "value")}
    second = _run(with_past, {"input_ids": nxt, "encoder_attention_mask": mask, **past})
    with torch.no_grad():
        ours_states = model.encode(ids, mask)
        logits = model(ids, mask, decoder_input_ids=torch.cat([dec, nxt], dim=1)).logits
    diff.add(ours_states, states, "the encoder's hidden states", mask.bool().numpy())
    diff.add(logits[:, :4], first["logits"], "the decoder's logits")
    diff.add(logits[:, 4:], second["logits"], "the logits of the decoder with past")


def _hf_config(model, kind: str, family: str, meta: dict) -> tuple[str, dict]:
    """(architecture, config.json): transformers' config where models_lib.hf has the model's
    counterpart, else ours with architectures and model_type."""
    from models_lib import hf
    from models_lib.hf import gpt2, t5

    config = model.config
    try:
        if family == "gpt":
            return "GPT2LMHeadModel", gpt2.config_to_hf(config)
        if family == "t5":
            return t5.ARCHITECTURE, t5.config_to_hf(config)
        fmt = hf.encoder_format(family)
        base = fmt.backbone_architecture.removesuffix("Model")
        architecture = {"hidden": fmt.backbone_architecture, "mlm": f"{base}ForMaskedLM",
                        "rtd": f"{base}ForPreTraining"}.get(kind) or fmt.task_architecture(kind)
        hf_config = fmt.config_to_hf(config, architecture)
        if kind in TASKS:
            hf_config.update(fmt.task_config_to_hf(model.task_config, config))
        return architecture, hf_config
    except ValueError:
        pass
    architecture = type(model).__name__ if kind not in TASKS else f"{config.label}For{_camel(kind)}"
    ours = {"architectures": [architecture], "model_type": family, **dict(meta.get("config") or {})}
    if kind in TASKS:
        task = model.task_config
        ours["task"] = task.to_dict()
        if kind != "question_answering":
            ours.update(id2label={str(i): label for i, label in task.id2label.items()}, label2id=task.label2id)
    return architecture, ours


def _camel(task: str) -> str:
    return "".join(part.capitalize() for part in task.split("_"))


def export_onnx(checkpoint_dir: str | Path, out_dir: str | Path, *, name: str = "", license: str = "other",
                progress: Callable[[float], None] = lambda p: None) -> ExportResult:
    """Write the checkpoint in `checkpoint_dir` as ONNX files (see the module's docstring) at `out_dir`,
    replaced whole once onnxruntime's outputs have matched the model's; a failure leaves nothing
    there. progress: percentages, 0 to 100."""
    checkpoint, out = Path(checkpoint_dir), Path(out_dir)
    progress(0)
    check_exportable(checkpoint)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise ExportError(f"The ONNX export needs the onnx, onnxscript and onnxruntime packages, and {e.name} is "
                          f"not installed.") from None
    import torch

    from models_lib.checkpoint import load_model
    from trainer.export import _token_types

    try:
        model = load_model(checkpoint, map_location="cpu").eval()
        meta = json.loads((checkpoint / "model_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"The checkpoint {checkpoint.name} cannot be loaded, so it cannot be exported: {e}") from None
    model = model.float()
    family = str(getattr(model.config, "family", meta.get("family", "")))
    progress(10)

    with_types = False
    holder = model
    if family == "gpt":
        kind, graphs = "lm", _gpt_graphs(model)
    elif family == "t5":
        kind, graphs = "seq2seq", _t5_graphs(model)
    else:
        kind, holder = _encoder_kind(model)
        with_types = bool(getattr(model.config, "type_vocab_size", 0)) and _token_types(family)
        graphs = _encoder_graphs(model, holder, kind, with_types, int(model.config.max_positions))
    architecture, hf_config = _hf_config(model, kind, family, meta)

    with staged(out) as staging:
        files: list[str] = []
        torch.manual_seed(0)
        for i, graph in enumerate(graphs):
            files += _write_graph(graph, staging)
            progress(10 + 60 * (i + 1) / len(graphs))
        diff = _Difference()
        try:
            if family == "gpt":
                _check_gpt(model, staging, graphs[0], diff)
            elif family == "t5":
                _check_t5(model, staging, diff)
            else:
                _check_encoder(model, kind, holder, staging, with_types, diff)
        except ExportError:
            raise
        except Exception as e:  # onnxruntime refusing the file it was given
            raise ExportError(f"onnxruntime could not run the exported files, so the export is refused: "
                              f"{_gist(e)}") from None
        if not diff.value <= TOLERANCE:
            raise ExportError(f"The ONNX files do not compute what the model does: {diff.where} differ from "
                              f"PyTorch's by up to {diff.value:.3g} (at most {TOLERANCE:g} is allowed), so the "
                              f"export is refused.")
        progress(85)
        write_tokenizer_files(checkpoint, staging, max_positions=int(min(model.config.max_positions, 10**6)),
                              with_token_types=with_types)
        (staging / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
        from trainer.model_card import write_model_card

        listed = sorted(p.name for p in staging.iterdir())
        write_model_card(checkpoint, staging, fmt="onnx", architecture=architecture, name=name or checkpoint.name,
                         license=license, files=listed)
        progress(95)
    progress(100)
    return ExportResult(out, architecture, sorted(p.name for p in out.iterdir()))
