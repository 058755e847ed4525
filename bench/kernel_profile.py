"""Where a training step's device time goes: torch.profiler's events sorted into a few categories.

Used by `bench/train_throughput.py --profile N` (issue 20, point 3: the CUDA step's elementwise
work, bf16 casts, per-layer cats, LM head GEMMs and fp32 softmax/cross-entropy). On a GPU the unit
is a CUDA kernel (or memcpy/memset), timed on the device; on the CPU it is an op's own (self) time,
so that nested ops are not counted twice and the units add up to the step.

`classify(name, context)` is the whole taxonomy: a pure function of a kernel's or op's name and
the names of the ops it ran under (innermost first), so that it can be tested on names alone. The
context settles what a name cannot: a copy kernel under `aten::_to_copy` is a cast, an add under
`Optimizer.step` is the optimizer's, a bmm under the math SDPA is attention's. A name it does not
know goes to "other" and is listed, so that a new kernel shows up instead of hiding in a category.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

MATMUL, ATTENTION, NORM, ELEMENTWISE, COPY, CAT, REDUCTION, OPTIMIZER, OTHER = (
    "matmul/GEMM", "attention", "normalisation", "elementwise", "casts/copies", "cat/stack",
    "reductions/softmax/loss", "optimizer", "other")
CATEGORIES = (MATMUL, ATTENTION, NORM, ELEMENTWISE, COPY, CAT, REDUCTION, OPTIMIZER, OTHER)

# --- aten ops (the CPU's units, and the context of every kernel) ---------------------------------

_OPS = {
    MATMUL: {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_addmm_activation", "addbmm", "addmv", "mv",
             "dot", "einsum", "_int_mm", "_scaled_mm", "mkldnn_linear", "_mkldnn_linear"},
    COPY: {"_to_copy", "to", "copy_", "clone", "contiguous", "_copy_from", "_copy_from_and_resize", "type_as",
           "lift_fresh_copy", "pad", "constant_pad_nd"},
    CAT: {"cat", "_cat", "stack", "concat", "concatenate", "hstack", "vstack"},
    REDUCTION: {"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "norm", "linalg_vector_norm", "all",
                "any", "logsumexp", "cumsum", "var", "std", "var_mean", "std_mean", "prod", "count_nonzero",
                "_softmax", "softmax", "_log_softmax", "log_softmax", "_softmax_backward_data",
                "_log_softmax_backward_data", "_safe_softmax", "nll_loss", "nll_loss_nd", "nll_loss_forward",
                "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "cross_entropy_loss",
                "binary_cross_entropy", "binary_cross_entropy_with_logits", "binary_cross_entropy_backward",
                "mse_loss", "mse_loss_backward", "kl_div", "sum_to_size"},
    ELEMENTWISE: {"add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "neg_", "pow", "pow_",
                  "sqrt", "sqrt_", "rsqrt", "rsqrt_", "exp", "exp_", "log", "log_", "log1p", "tanh", "tanh_",
                  "tanh_backward", "sigmoid", "sigmoid_backward", "gelu", "gelu_backward", "relu", "relu_",
                  "threshold_backward", "silu", "silu_backward", "native_dropout", "native_dropout_backward",
                  "dropout", "feature_dropout", "bernoulli_", "bernoulli", "where", "masked_fill", "masked_fill_",
                  "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros",
                  "new_ones", "new_full", "arange", "triu", "tril", "rand", "rand_like", "randint", "randn",
                  "randn_like", "uniform_", "normal_", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp",
                  "lerp_", "clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "abs", "sign", "eq", "ne",
                  "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and",
                  "bitwise_or", "bitwise_not", "erf", "reciprocal", "square", "maximum", "minimum", "sin", "cos",
                  "softplus", "hardtanh", "leaky_relu", "elu", "_masked_scale", "floor_divide", "remainder",
                  "round", "floor", "ceil", "trunc", "xlogy", "_unsafe_masked_index", "isneginf", "isposinf",
                  "isinf", "isnan", "isfinite", "nan_to_num"},
}
# Ops that do no arithmetic (views, allocation, host bookkeeping) or only move rows about (the
# embedding's gather and its backward's scatter): "other", but known, so not listed as strange.
_KNOWN_OTHER_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "t", "transpose",
    "permute", "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "split_with_sizes", "chunk",
    "unbind", "detach", "detach_", "alias", "empty", "empty_strided", "empty_like", "new_empty",
    "new_empty_strided", "resize_", "set_", "flatten", "unflatten", "view_as", "lift_fresh", "item",
    "_local_scalar_dense", "is_nonzero", "result_type", "index_select", "embedding", "embedding_backward",
    "embedding_dense_backward", "index", "index_put_", "_index_put_impl_", "scatter", "scatter_", "scatter_add",
    "scatter_add_", "gather", "masked_select", "masked_scatter", "masked_scatter_", "nonzero", "take",
    "index_add_", "sort", "argsort", "unique", "_unique2", "multinomial", "repeat", "repeat_interleave", "roll",
    "_has_compatible_shallow_copy_type", "record_stream", "_to_dense", "numel", "size", "stride", "dim",
    "resolve_conj", "resolve_neg", "scalar_tensor", "_conj", "conj", "as_strided_", "select_backward", "slice_backward",
}
_OPTIMIZER_OP = re.compile(r"^_foreach_|^_fused_(adam|adamw|sgd|adagrad)")
_ATTENTION_OP = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|_cudnn_attention")
_NORM_OP = re.compile(r"layer_norm|rms_norm|group_norm|batch_norm")
_LOSS_OP = re.compile(r"cross_entropy|nll_loss")

# Profiler annotations and wrappers whose own time is host overhead: the step's Python outside
# any op (ProfilerStep), the autograd engine between backward ops, torch.compile's wrappers.
_KNOWN_OTHER_NAME = re.compile(
    r"^ProfilerStep|^autograd::engine::|^torch::autograd::|^detach$|Backward\d*$|^CompiledFunction|"
    r"^Torch-Compiled Region|^## |^TorchDynamo|^cuda(LaunchKernel|Memcpy|Memset|StreamSynchronize|"
    r"DeviceSynchronize)|^inductor|^Lazy Compilation|^AOTDispatcher|^Pregraph|bytecode")

# --- CUDA kernel names (substrings of the lower-cased name), first match wins -----------------

_KERNEL_RULES: tuple[tuple[str | None, re.Pattern], ...] = (
    # fmha_cutlass* is memory-efficient attention, not a GEMM: attention goes before matmul
    (ATTENTION, re.compile(r"flash|fmha|sdpa|attention")),
    (OPTIMIZER, re.compile(r"multi_tensor_apply|fused_?adam|fused_?sgd")),
    (MATMUL, re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitkreduce|s16816|s1688|wgmma|^triton_tem_")),
    (CAT, re.compile(r"catarraybatchedcopy|cat_array|catarray")),
    (NORM, re.compile(r"layer_?norm|rms_?norm|group_?norm|batch_?norm|gammabetabackward|rowwisemoments|"
                      r"computeinternalgradients|computegradientfusedparams")),
    (REDUCTION, re.compile(r"softmax|nll_loss|cross_?entropy|logsumexp|reduce_kernel|reducekernel|"
                           r"devicereduce|devicesegmentedreduce|reduction")),
    # known, of no category: the embedding's gathers and scatters, and the sorts its backward uses
    (None, re.compile(r"index|embedding|scatter|gather|radixsort|radix_sort|sort_|compute_grad_weight|"
                      r"sum_and_scatter|krn_partial|segment_offsets|compute_num_of_partial|unique")),
    (COPY, re.compile(r"bfloat16_copy|float8_copy|half_copy|copy_kernel|memcpy|copy_device_to_device")),
    (ELEMENTWISE, re.compile(r"elementwise|dropout|gelu|relu|tanh|sigmoid|silu|fill|memset|bernoulli|"
                             r"masked_fill|lerp|addcmul|addcdiv|pointwise|^triton_poi_")),
)
_CAST_KERNEL = re.compile(r"bfloat16_copy|float8_copy|half_copy|_to_copy")
# An inductor kernel's fused ops are in its name; these do no arithmetic of their own.
_TRITON_NAME = re.compile(r"^triton_(poi|red|per|tem)_fused_(.*?)(_\d+)?$")
_TRITON_NO_MATH = ("_unsafe_view", "_to_copy", "clone", "view", "permute", "transpose", "expand", "unsqueeze",
                   "squeeze", "select", "slice", "t", "copy", "cat", "stack")


def _op(name: str) -> str | None:
    """`aten::add_.Tensor` -> `add_`; None for names that are not aten ops."""
    if not name.startswith("aten::"):
        return None
    return name[len("aten::"):].split(".", 1)[0]


def _op_category(op: str) -> str | None:
    if _OPTIMIZER_OP.search(op):
        return OPTIMIZER
    if _ATTENTION_OP.search(op):
        return ATTENTION
    if _NORM_OP.search(op):
        return NORM
    for category, ops in _OPS.items():
        if op in ops:
            return category
    return None


def _triton_category(name: str) -> str | None:
    """Inductor's kernels: `triton_poi_fused__to_copy_t_0` is a cast; `..._cat_2` alone a cat; the
    rest by their fused ops, or by kind (pointwise, reduction, template GEMM)."""
    match = _TRITON_NAME.match(name)
    if not match:
        return None
    kind, fused = match.group(1), match.group(2)
    if kind == "tem":
        return MATMUL
    if not fused:
        return ELEMENTWISE if kind == "poi" else REDUCTION
    for category, pattern in _KERNEL_RULES:
        if category in (ATTENTION, NORM, REDUCTION) and pattern.search(fused):
            return category
    if re.search(r"(^|_)rsqrt(_|$)", fused) and re.search(r"(^|_)(mean|pow)(_|$)", fused):
        return NORM  # a composite RMSNorm (T5's: pow, mean, rsqrt, mul) fused into one kernel
    if re.search(r"(^|_)(log_)?softmax|(^|_)(sum|mean|amax|max)(_|$)", fused):
        return REDUCTION
    words = fused
    for word in sorted(_TRITON_NO_MATH, key=len, reverse=True):
        words = re.sub(rf"(^|_){re.escape(word)}(?=_|$)", "_", words)
    if not words.strip("_"):  # only data movement
        if re.search(r"(^|_)(cat|stack)(_|$)", fused) and "to_copy" not in fused:
            return CAT
        return COPY
    return ELEMENTWISE if kind == "poi" else REDUCTION


def classify(name: str, context: Sequence[str] = ()) -> tuple[str, bool]:
    """(category, recognised) for a kernel or op `name` that ran under the ops `context` (innermost
    first). recognised is False when nothing placed the name and it fell into "other"."""
    ops = [op for op in map(_op, context) if op]
    if any(c.startswith(("Optimizer.step", "Optimizer.zero_grad")) for c in context) or any(
            _OPTIMIZER_OP.search(op) for op in ops):
        return OPTIMIZER, True
    own, known = _own_category(name)
    if own in (OPTIMIZER, ATTENTION, CAT):  # named for what it is, wherever it ran
        return own, True
    if own == COPY and context and _op(context[0]) in _OPS[MATMUL]:  # addmm's copy of the bias (CPU)
        return MATMUL, True
    if "_to_copy" in ops and own in (COPY, ELEMENTWISE, None):  # autocast's casts and .to(dtype)
        return COPY, True
    if own != COPY:  # a copy stays a copy; the rest belongs to the op it ran in
        if any(_ATTENTION_OP.search(op) for op in ops):  # e.g. the math SDPA's bmm and softmax
            return ATTENTION, True
        if own != MATMUL:
            if any(_NORM_OP.search(op) for op in ops):  # e.g. a composite RMSNorm's pow and mean
                return NORM, True
            if any(_LOSS_OP.search(op) for op in ops):
                return REDUCTION, True
    if own in (COPY, None) and any(op in _OPS[CAT] for op in ops):
        return CAT, True
    if own is not None:
        return own, True
    return OTHER, known


def _own_category(name: str) -> tuple[str | None, bool]:
    """The category the name alone gives (None: none), and for None whether the name is known."""
    op = _op(name)
    if op is not None:
        category = _op_category(op)
        return category, category is not None or op in _KNOWN_OTHER_OPS
    if name.startswith(("Optimizer.step", "Optimizer.zero_grad")):
        return OPTIMIZER, True
    if _KNOWN_OTHER_NAME.search(name):
        return None, True
    lowered = name.lower()
    triton = _triton_category(lowered)
    if triton is not None:
        return triton, True
    for category, pattern in _KERNEL_RULES:
        if pattern.search(lowered):
            return category, True
    return None, False


def is_cast(name: str, context: Sequence[str] = ()) -> bool:
    """A kernel that only converts dtypes: a copy made by `aten::_to_copy` (autocast's casts,
    `.to(dtype)`), or a copy kernel whose name says it converts (bf16/fp8 copies, inductor's
    `_to_copy` kernels with nothing else fused in)."""
    if classify(name, context)[0] != COPY:
        return False
    return bool(_CAST_KERNEL.search(name.lower())) or "_to_copy" in [_op(c) for c in context]


def is_cat(name: str, context: Sequence[str] = ()) -> bool:
    return classify(name, context)[0] == CAT


# --- from the profiler's events to figures -----------------------------------------------------

@dataclass
class Unit:
    """One kernel run (CUDA) or one op's own time (CPU), with the ops it ran under."""
    name: str
    us: float
    context: tuple[str, ...] = ()
    counted: bool = True  # in the kernel counts (CPU: an op that does work, and no op inside it does)


# Device activities that occupy the GPU; annotations (gpu_user_annotation) span kernels counted already.
DEVICE_ACTIVITIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def _chain(event) -> tuple[str, ...]:
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    return tuple(names)


def units_from_events(events: Iterable, device: str) -> list[Unit]:
    """torch.profiler's events (profile.events()) as units: CUDA kernels, each with the ops that
    launched it (the profiler links a kernel to its op by correlation id), or on the CPU every op's
    own time, the annotations' included (the step's Python outside ops is ProfilerStep's own)."""
    from torch.autograd import DeviceType

    events = list(events)
    units = []
    if device == "cuda":
        ops = {e.id: e for e in events if e.device_type == DeviceType.CPU and not e.is_async
               and not getattr(e, "linked_correlation_id", 0) and e.id > 0}
        for e in events:
            if e.device_type == DeviceType.CPU or e.is_user_annotation:
                continue
            if e.activity_type is not None and str(e.activity_type) not in DEVICE_ACTIVITIES:
                continue
            op = ops.get(getattr(e, "linked_correlation_id", 0))
            units.append(Unit(e.name, e.time_range.elapsed_us(), _chain(op)))
        return units
    def does_work(event) -> bool:
        op = _op(event.name)
        return op is not None and op not in _KNOWN_OTHER_OPS

    for e in events:
        if e.device_type != DeviceType.CPU or e.is_async:
            continue
        # an op is a kernel of its own when no op inside it does the work (linear's addmm is the
        # kernel, not linear; mm is, though views and conj checks run inside it)
        units.append(Unit(e.name, e.self_cpu_time_total, _chain(e.cpu_parent),
                          counted=does_work(e) and not any(map(does_work, e.cpu_children))))
    return units


def short_name(name: str, width: int = 100) -> str:
    """A CUDA kernel's templated name, cut to what tells kernels apart in a table."""
    for noise in ("void ", "at::native::", "(anonymous namespace)::", "c10::", "std::"):
        name = name.replace(noise, "")
    return name if len(name) <= width else name[:width - 3] + "..."


def summarise(units: Sequence[Unit], steps: int, top: int = 15) -> dict:
    """Per step: time by category (ms and share), the `top` units by time with their calls, the
    counts of kernels, casts and cats, and what fell into "other" (recognised or not)."""
    by_category = {c: 0.0 for c in CATEGORIES}
    names: dict[tuple[str, str], dict] = {}
    counts = {"kernels": 0, "casts": 0, "cat_stack": 0}
    for unit in units:
        category, known = classify(unit.name, unit.context)
        by_category[category] += unit.us
        # keyed by category too: aten::add_ of the model and of the optimizer are two rows
        row = names.setdefault((unit.name, category), {"name": unit.name, "category": category, "us": 0.0,
                                                       "calls": 0, "recognised": known})
        row["us"] += unit.us
        row["calls"] += 1
        if unit.counted:
            counts["kernels"] += 1
            counts["casts"] += is_cast(unit.name, unit.context)
            counts["cat_stack"] += category == CAT
    total = sum(by_category.values())

    def per_step(row: dict) -> dict:
        return {"name": row["name"], "category": row["category"], "ms_per_step": row["us"] / steps / 1000,
                "calls_per_step": row["calls"] / steps, "recognised": row["recognised"]}

    rows = sorted(names.values(), key=lambda r: -r["us"])
    return {
        "steps": steps,
        "total_ms_per_step": total / steps / 1000,
        "categories": {c: {"ms_per_step": us / steps / 1000, "share": us / total if total else 0.0}
                       for c, us in by_category.items()},
        "top": [per_step(r) for r in rows[:top]],
        "counts_per_step": {k: v / steps for k, v in counts.items()},
        "other": [per_step(r) for r in rows if r["category"] == OTHER][:12],
        "unrecognised": [r["name"] for r in rows if not r["recognised"]],
    }


def format_summary(summary: dict, unit: str, width: int = 100) -> list[str]:
    """The printed table: categories, counts, top units and the contents of "other"."""
    lines = [f"  {'category':<26}{'ms/step':>10}{'share':>8}"]
    for category, fig in summary["categories"].items():
        lines.append(f"  {category:<26}{fig['ms_per_step']:10.3f}{fig['share']:8.1%}")
    lines.append(f"  {'total':<26}{summary['total_ms_per_step']:10.3f}{1:8.1%}")
    c = summary["counts_per_step"]
    lines.append(f"  {unit}s per step: {c['kernels']:,.0f} in all, {c['casts']:,.0f} casts, "
                 f"{c['cat_stack']:,.0f} cat/stack")
    lines.append(f"  top {len(summary['top'])} {unit}s by time:")
    lines.append(f"    {'ms/step':>9} {'calls/step':>10}  {'category':<24}name")
    for row in summary["top"]:
        lines.append(f"    {row['ms_per_step']:9.3f} {row['calls_per_step']:10.1f}  {row['category']:<24}"
                     f"{short_name(row['name'], width)}")
    if summary["other"]:
        lines.append("  in \"other\" (? = a name the classifier does not know):")
        for row in summary["other"]:
            lines.append(f"    {row['ms_per_step']:9.3f} {row['calls_per_step']:10.1f}  "
                         f"{'' if row['recognised'] else '? '}{short_name(row['name'], width)}")
    return lines
