"""Model FLOPs utilisation (MFU): the FLOPs a training step needs, per token, over the device's peak.

    mfu = flops_per_token x tokens_per_s / peak FLOP/s          (0..1; PaLM, Chowdhery et al. 2022, app. B)

FLOPs per token, by family (what `training_flops_per_token` computes, with the formula below that
the family's plugin names: trainer.families, Family.flops_formula). Only matrix products are
counted (norms, activations, softmax and the loss are a few percent at most). A weight matrix of
n_in x n_out costs 2 n_in n_out FLOPs per token forward, and twice that backward (the gradient of
the input and of the weight): 6 x the weights a token passes through, the "6N" of Kaplan et al.
Attention adds, per token and layer, the scores QK^T and their weighted sum of the values, 2 x 2
T d forward (T keys, d = heads x head size), 12 T d in all: PaLM's 12 L d T. Causal stacks count
the whole square, as PaLM does. Embedding lookups are not products and are left out; an output
layer over the vocabulary is counted, tied to the embeddings or not.

  encoder families (BERT, RoBERTa, ALBERT, SpanBERT, UniLM, DistilBERT), per input token:
      6 [E H + L (4 H^2 + 2 H F)] + 12 L H T                      E -> H projection when E is set;
    + 6 p (H E' + E' V)              the MLM head, at the share p = mask_prob of predicted tokens
    + 6 p (3 H^2 + H E' + E' V)      SpanBERT's SBO head, at the same tokens
    + 6 (H^2 + 2 H) / T              BERT's NSP / ALBERT's SOP: pooler and classifier, once a row
      (E' = E or H; ALBERT counts every application of its shared block: L is the depth)
    DistilBERT adds its frozen teacher's forward pass: 1/3 of the same sum for the teacher.
    Fine-tuning: the backbone's terms alone (a task head is one small matrix).
  ELECTRA: the generator (its own narrower config) with its MLM head as above, plus the
      discriminator's backbone and its RTD head on every token, 6 (H^2 + H).
  GPT: 6 [L (4 H^2 + 2 H F) + H V] + 12 L H T                     (the output layer on every token)
  T5 (inner = heads x d_kv; FFN 2 d F, gated (v1.1) 3 d F; S input and Lt target tokens a row):
      encoder token   Le [2 (4 d inner + FFN) + 4 S inner]                          (forward)
      decoder token   Ld [2 (6 d inner + FFN) + 4 Lt inner + 4 S inner] + 2 d V     (self, cross, output)
      cross keys/vals Ld 2 (2 d inner) for every encoder token
      x 3 for training, divided by S + Lt: tokens/s counts the encoder's and the decoder's tokens.
  ELMo (P projection, H cells, L layers): per token, both directions' LSTMs,
      6 x 2 L [4 H P + 4 H P' + H P] (P' = P when projected, else H, and no H P), plus the shared
      softmax in both directions, 6 x 2 (T-1)/T P V. The character CNN runs once per distinct
      token of a batch, a number no formula knows, so it is left out: with char_cnn, MFU is low.
  Transformer-XL and XLNet (models_lib.core.relative; inner I = heads x head size, FFN 2 H F):
    a layer reads K = M + T keys (M = mem_len memory states, as training reads once the memory is
    full) and projects P = K + T = M + 2T distances. Per query, forward:
      q(H I) + o(I H) + FFN + scores (q+u).k over K keys, (q+v).W_r R over all P distances
      (then shifted or gathered), weights x values over K keys:  2 (2 H I + 2 H F) + 2 I (2K + P)
      XLNet adds the relative segment term (q+b).s over the two segment vectors, 4 I.
    Per key (memory included: its keys and values take part in the backward pass), k and v: 4 H I.
    The position projection W_r runs once per micro-batch of B rows, over P distances that need no
    gradient: 2 H I P forward and the same backward for W_r alone, 4 H I P / B a row.
    Transformer-XL: 3 x [L (T queries + K keys) + T (2 H V)] + 4 L H I P / B, over the T tokens.
    XLNet: the content stream over T queries and the query stream over G = seq_len // plm_k
      targets (the fast path: only the target rows), the output layer at the G targets only
      (2 H V each). The content stream of the last layer feeds no loss, so it runs forward only:
      3 x [L (G queries + K keys) + (L-1) T queries + G (2 H V)] + T queries + 4 L H I P / B,
      over the T tokens.

T is seq_len (padding included: a padded batch is credited less than it computes).
V is the vocabulary as the model computes it: config.padded_vocab_size, vocab_size rounded up to a
multiple of 64 (models_lib.core.vocab pads the tables so that the output matmul runs on aligned
kernels; its padding columns are computed, then cut off). MFU therefore counts the output
layer's products as run, like every other product here.

Peaks: `GPU_PEAKS`, the datasheet dense (no sparsity) tensor-core figure of the GPU, matched on
torch.cuda.get_device_name(): bf16 for bf16 runs, TF32 for fp32 runs (TF32 is on for them;
GPUs without TF32 or bf16 tensor cores list their plain fp32 peak). Any other device, the CPU
included, gets a measured peak: the best FLOP/s of a few large matrix products in the run's
dtype, measured once per process (`measured_peak`).
"""
from __future__ import annotations

import functools
import json
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.flop_units import matmul_flops, output_vocab

@dataclass(frozen=True)
class Workload:
    """What a training row computes besides the model's shape."""

    seq_len: int                       # input tokens a row (T5: the encoder's)
    target_len: int = 0                # T5: decoder tokens a row
    predicted: float = 1.0             # share of the positions an MLM head predicts (mask_prob)
    objectives: tuple[str, ...] = ()   # the pre-training objectives (each adds its Objective.head_flops)
    pretraining: bool = True           # False: fine-tuning, the backbone alone
    teacher: Any = None                # DistilBERT: the teacher's models_lib config (forward only)
    targets: int = 0                   # XLNet: query-stream targets a row (0: seq_len // 6, plm_k's default)
    batch_size: int = 0                # rows a micro-batch (XLNet, Transformer-XL: once-a-batch products; 0: left out)


# ------------------------------------------------------------------------------ the families
def _stack_forward(c: Any, T: int) -> float:
    """An encoder stack (models_lib.core.encoder.Encoder: the encoder families and GPT), forward,
    per token: the E -> H projection, L blocks (fused QKV, output, FFN) and attention."""
    H, F, L = c.hidden_size, c.intermediate_size, c.num_layers
    E = getattr(c, "embedding_size", None)
    block = matmul_flops(H, 3 * H) + matmul_flops(H, H) + matmul_flops(H, F) + matmul_flops(F, H) + 4.0 * T * H
    return (matmul_flops(E, H) if E else 0.0) + L * block


def _encoder_forward(c: Any, w: Workload) -> float:
    """An encoder family's model with its pre-training heads, forward, per input token."""
    from trainer import objectives

    flops = _stack_forward(c, w.seq_len)
    if not w.pretraining:
        return flops
    H, V = c.hidden_size, output_vocab(c)
    E = c.embedding_size or H
    flops += w.predicted * (matmul_flops(H, E) + matmul_flops(E, V))  # MLM head at the predicted positions
    for name in w.objectives:  # the heads the objectives add (Objective.head_flops: NSP, SOP, SBO)
        head = objectives.get(name).head_flops
        flops += head(c, w) if head is not None else 0.0
    return flops


def encoder_flops(c: Any, w: Workload) -> float:
    flops = 3.0 * _encoder_forward(c, w)
    if w.teacher is not None:  # DistilBERT's teacher: forward only, no pair head
        flops += _encoder_forward(w.teacher, Workload(w.seq_len, predicted=w.predicted))
    return flops


def electra_flops(c: Any, w: Workload) -> float:
    H = c.hidden_size
    generator = _encoder_forward(c.generator_config(), w)
    discriminator = _stack_forward(c, w.seq_len) + matmul_flops(H, H) + matmul_flops(H, 1)
    return 3.0 * (generator + discriminator)


def gpt_flops(c: Any, w: Workload) -> float:
    return 3.0 * (_stack_forward(c, w.seq_len) + matmul_flops(c.hidden_size, output_vocab(c)))


def t5_flops(c: Any, w: Workload) -> float:
    d, inner, F = c.d_model, c.num_heads * c.d_kv, c.d_ff
    S, Lt = w.seq_len, max(1, w.target_len)
    ffn = (3 if c.is_gated else 2) * matmul_flops(d, F)
    encoder_token = c.num_layers * (matmul_flops(d, 3 * inner) + matmul_flops(inner, d) + ffn + 4.0 * S * inner)
    decoder_token = c.num_decoder_layers * (
        matmul_flops(d, 3 * inner) + matmul_flops(inner, d)            # self-attention projections
        + matmul_flops(d, inner) + matmul_flops(inner, d)              # cross-attention query and output
        + ffn + 4.0 * Lt * inner + 4.0 * S * inner) + matmul_flops(d, output_vocab(c))
    cross_keys_values = c.num_decoder_layers * matmul_flops(d, 2 * inner)  # per encoder token
    row = S * (encoder_token + cross_keys_values) + Lt * decoder_token
    return 3.0 * row / (S + Lt)


def elmo_flops(c: Any, w: Workload) -> float:
    P, H, V, T = c.embedding_dim, c.hidden_size, output_vocab(c), w.seq_len
    projected = P < H
    lstm = matmul_flops(P, 4 * H) + matmul_flops(P if projected else H, 4 * H) + (matmul_flops(H, P) if projected else 0.0)
    softmax = 2 * (T - 1) / T * matmul_flops(P, V)
    return 3.0 * (2 * c.num_layers * lstm + softmax)


def _relative_parts(c: Any, w: Workload, segments: bool) -> tuple[float, float, float]:
    """models_lib.core.relative's layer, forward: (one query's products, one key's, the position
    projection's once per micro-batch and layer), with the memory full (M = mem_len)."""
    H, inner, F, T = c.hidden_size, c.num_heads * c.head_size, c.intermediate_size, w.seq_len
    K = c.mem_len + T
    P = K + T  # relative_positions(T, K): distances K down to -T + 1
    query = (matmul_flops(H, inner) + matmul_flops(inner, H) + matmul_flops(H, F) + matmul_flops(F, H)
             + 2.0 * inner * (2 * K + P) + (2.0 * inner * 2 if segments else 0.0))
    return query, matmul_flops(H, 2 * inner), P * matmul_flops(H, inner)


def _positions(c: Any, w: Workload, per_layer: float) -> float:
    """W_r over the distances, per row: forward and the weight's gradient (its input needs none)."""
    return 2.0 * c.num_layers * per_layer / w.batch_size if w.batch_size else 0.0


def transfo_xl_flops(c: Any, w: Workload) -> float:
    T, L = w.seq_len, c.num_layers
    query, key, positions = _relative_parts(c, w, segments=False)
    row = 3.0 * (L * (T * query + (c.mem_len + T) * key) + T * matmul_flops(c.hidden_size, output_vocab(c)))
    return (row + _positions(c, w, positions)) / T


def xlnet_flops(c: Any, w: Workload) -> float:
    T, L = w.seq_len, c.num_layers
    G = w.targets or max(1, T // 6)
    query, key, positions = _relative_parts(c, w, segments=True)
    trained = L * (G * query + (c.mem_len + T) * key) + (L - 1) * T * query + G * matmul_flops(c.hidden_size, output_vocab(c))
    row = 3.0 * trained + T * query  # the last layer's content stream: forward only (no loss reads it)
    return (row + _positions(c, w, positions)) / T


def training_flops_per_token(model_config: Any, workload: Workload) -> float | None:
    """FLOPs of a training step (forward and backward) per token that tokens/s counts, by the
    formula the config's family names (Family.flops_formula); None for a family that names none
    (Family.no_flops says why) and for a config of no registered family."""
    from trainer import families

    family = families.find(getattr(model_config, "family", None))
    return family.flops_per_token(model_config, workload) if family is not None else None


def missing_formula(model_config: Any) -> str:
    """Why a run of this config's family has no MFU (its Family.no_flops), for the run's log; ""
    when its family has a formula."""
    from trainer import families

    family = families.find(getattr(model_config, "family", None))
    if family is None:
        return f"the model's family {getattr(model_config, 'family', None)!r} is not registered in trainer.families."
    return "" if family.flops_formula else family.no_flops


def run_workload(config: Any, model: Any, step: Any = None, stream: Any = None) -> Workload:
    """The Workload of a run: a pre-training RunConfig (seq_len, mask_prob, objectives; the
    teacher and T5's target length from its step and data stream) or a fine-tuning config
    (max_length, the backbone alone)."""
    from trainer.config import RunConfig

    if not isinstance(config, RunConfig):  # fine-tuning (trainer.finetune.config.FinetuneConfig)
        return Workload(seq_len=config.seq_len, pretraining=False)
    teacher = getattr(step, "teacher", None)
    collator = getattr(stream, "collator", None)
    return Workload(seq_len=config.seq_len, target_len=int(getattr(collator, "target_len", 0) or 0),
                    predicted=config.mask_prob, objectives=tuple(config.objectives),
                    teacher=getattr(teacher, "config", None),
                    targets=int(getattr(collator, "num_predict", 0) or max(1, config.seq_len // config.plm_k)),
                    batch_size=config.batch_size)


# ------------------------------------------------------------------------------ peaks
@dataclass(frozen=True)
class GpuPeak:
    pattern: str          # a regular expression on torch.cuda.get_device_name()
    label: str
    bf16: float | None    # dense bf16 tensor-core FLOP/s (None: no bf16 tensor cores)
    fp32: float           # dense TF32 tensor-core FLOP/s, or plain fp32 where the GPU has no TF32


TERA = 1e12
# NVIDIA datasheets, dense figures (the sparsity figures halved). First match wins.
GPU_PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak(r"H100.*PCI", "NVIDIA H100 PCIe", 756 * TERA, 378 * TERA),
    GpuPeak(r"H100(?!.*NVL)", "NVIDIA H100 SXM", 989.4 * TERA, 494.7 * TERA),
    GpuPeak(r"H200(?!.*NVL)", "NVIDIA H200 SXM", 989.4 * TERA, 494.7 * TERA),
    GpuPeak(r"A100", "NVIDIA A100", 312 * TERA, 156 * TERA),
    GpuPeak(r"\bL4\b", "NVIDIA L4", 121 * TERA, 60 * TERA),
    GpuPeak(r"\bA10\b", "NVIDIA A10", 125 * TERA, 62.5 * TERA),
    GpuPeak(r"RTX 4090(?!.*Laptop)", "NVIDIA GeForce RTX 4090", 165.2 * TERA, 82.6 * TERA),  # bf16 with fp32 accumulate
    GpuPeak(r"V100S", "NVIDIA V100S PCIe", None, 16.4 * TERA),
    GpuPeak(r"V100.*SXM", "NVIDIA V100 SXM2", None, 15.7 * TERA),
    GpuPeak(r"V100", "NVIDIA V100 PCIe", None, 14 * TERA),
    GpuPeak(r"\bT4\b", "NVIDIA T4", None, 8.1 * TERA),
)


@dataclass(frozen=True)
class Peak:
    flops: float   # FLOP/s
    source: str    # where the figure comes from, for the log


def gpu_peak(name: str, precision: str) -> Peak | None:
    """The datasheet peak of a GPU named `name` for a precision ("bf16" or "fp32"), or None."""
    for row in GPU_PEAKS:
        if re.search(row.pattern, name, flags=re.IGNORECASE):
            if precision == "bf16" and row.bf16 is not None:
                return Peak(row.bf16, f"{row.label} datasheet, bf16 dense")
            if precision == "bf16":
                return Peak(row.fp32, f"{row.label} datasheet, fp32 (it has no bf16 tensor cores)")
            tf32 = "TF32" if row.bf16 is not None else "fp32"
            return Peak(row.fp32, f"{row.label} datasheet, {tf32} dense")
    return None


def peak_for(device: str, precision: str) -> Peak:
    """The peak FLOP/s MFU divides by on this device: a known GPU's datasheet figure, else measured."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        known = gpu_peak(name, precision)
        if known is not None:
            return known
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        return Peak(measured_peak("cuda", dtype), f"measured {precision} matmul on {name}")
    threads = torch.get_num_threads()
    return Peak(measured_peak(device, torch.float32),
                f"measured fp32 matmul on the CPU, {threads} thread{'s' if threads != 1 else ''}")


@functools.lru_cache(maxsize=None)
def _measured(device: str, dtype: torch.dtype, threads: int, size: int, seconds: float, probe: int = 0) -> float:
    # Its own generator: drawing from the global one would move a run's dropout masks (the first run
    # in a process measures, later ones read the cache, so one seed would train two ways).
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator).to(dtype)
    b = torch.randn(size, size, device=device, generator=generator).to(dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.mm(a, b)  # warm-up (kernel choice, allocation)
    sync()
    best, spent = 0.0, 0.0
    while spent < seconds:
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        took = time.perf_counter() - start
        spent += took
        best = max(best, 2.0 * size ** 3 / took)
    return best


def measured_peak(device: str, dtype: torch.dtype = torch.float32, *, seconds: float = 0.3) -> float:
    """The best FLOP/s of square matrix products (1024 on a CPU, 8192 on a GPU) over about
    `seconds`; measured once per process, device, dtype and CPU thread count.

    On a CPU, one short probe on a busy machine reads far too low (0.04 TFLOP/s where the CPU does
    ten times that) and every MFU after it too high. So the CPU's figure is the best of several
    probes, and the best this machine ever measured for the same thread count and dtype is kept in
    a cache file (LMWB_CACHE_DIR, default ~/.cache/lm-workbench): a busy first measurement is
    replaced by the first quieter one, and later runs start from the machine's real figure."""
    size = 8192 if device == "cuda" else 1024
    if device == "cuda":
        return _measured(device, dtype, torch.get_num_threads(), size, seconds)
    threads = torch.get_num_threads()
    now = max(_measured(device, dtype, threads, size, seconds / CPU_PROBES, probe) for probe in range(CPU_PROBES))
    return _cached_best(f"{_cpu_name()}|{threads}|{dtype}", now)


CPU_PROBES = 3


def _cache_file() -> Path:
    root = os.environ.get("LMWB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lm-workbench")
    return Path(root) / "cpu-peak.json"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cached_best(key: str, measured: float) -> float:
    """The larger of `measured` and the best figure cached for `key`; the cache keeps the larger."""
    path = _cache_file()
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(cached, dict):
            cached = {}
    except (OSError, ValueError):
        cached = {}
    best = max(measured, float(cached.get(key) or 0.0))
    if best > float(cached.get(key) or 0.0):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({**cached, key: best}, indent=1), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:  # a read-only home: the figure is still this process's best
            pass
    return best


def utilisation(flops_per_token: float | None, tokens_per_s: float, peak: Peak | None) -> float | None:
    """FLOPs done over the peak, unchecked (above 1 means the peak is wrong, see mfu)."""
    if not flops_per_token or peak is None or peak.flops <= 0:
        return None
    return flops_per_token * tokens_per_s / peak.flops


def mfu(flops_per_token: float | None, tokens_per_s: float, peak: Peak | None) -> float | None:
    """Model FLOPs utilisation, 0..1; None without a formula or a peak, and None above 1: a device
    cannot do more than its peak, so such a figure says the peak was measured wrong, not the run."""
    value = utilisation(flops_per_token, tokens_per_s, peak)
    return value if value is not None and value <= 1.0 else None
