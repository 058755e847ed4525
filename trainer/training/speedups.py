"""The run options that change how fast, or in how much memory, a model trains, never what it
computes: activation checkpointing (`activation_checkpointing`) and torch.compile (`compile`:
"auto" compiles on a CUDA GPU, where it pays after a minute of compiling, and not on the CPU).
(bf16 autocast, TF32 and fused AdamW need no option: the engine and the optimizer turn them on
on CUDA.)

    apply(model, config.runtime, sink)     # after the weights are built or restored, before training
    ...
    except compile_errors() as e:          # around the loop: the first step compiles
        raise compile_failed(e)

torch.compile works in place (`nn.Module.compile`): the module's forward is compiled, the module
itself is not wrapped, so its state dict keeps its own keys (no `_orig_mod.` prefix) and a
checkpoint of a compiled run loads, resumes and exports like any other. Compiling happens on the
first forward pass (training, then once more for evaluation), so a failure to compile (no C++
compiler on the CPU, no Triton on a GPU) surfaces there, as an exception of torch._dynamo's.
The backend is inductor, or the one named by the environment variable LMWB_COMPILE_BACKEND
(e.g. "aot_eager" to tell a graph-capture problem from a code-generation one).
"""
from __future__ import annotations

import os
from typing import Any

from torch import nn

from trainer.errors import ConfigError

DEFAULT_BACKEND = "inductor"
SCOPES = ("model", "blocks")
DEFAULT_SCOPE = "model"


def compile_backend() -> str:
    return os.environ.get("LMWB_COMPILE_BACKEND", "").strip() or DEFAULT_BACKEND


def compile_scope() -> str:
    """What torch.compile compiles: "model" (the whole forward, as one graph where it can) or
    "blocks" (each transformer block on its own, the rest eager: identical blocks share one
    compiled graph, so compiling takes about one block's time however deep the model is). The
    environment variable LMWB_COMPILE_SCOPE chooses; "model" by default."""
    scope = os.environ.get("LMWB_COMPILE_SCOPE", "").strip() or DEFAULT_SCOPE
    if scope not in SCOPES:
        raise ConfigError(f"LMWB_COMPILE_SCOPE must be one of {', '.join(SCOPES)}, not {scope!r}.")
    return scope


def compile_model(model: nn.Module, backend: str, scope: str) -> None:
    """Compile `model` in place per `scope` (compile_scope)."""
    if scope == "model":
        model.compile(backend=backend)
        return
    from models_lib.core.recompute import RecomputedStack

    blocks = {id(b): b for stack in model.modules() if isinstance(stack, RecomputedStack)
              for b in getattr(stack, "layers", ())}
    if not blocks:  # nothing block-shaped (ELMo): the whole model
        model.compile(backend=backend)
        return
    for block in blocks.values():
        block.compile(backend=backend)


def compiles(runtime: Any, device: str) -> bool:
    """Whether the run compiles its model: compile "on", or "auto" on a CUDA GPU."""
    return runtime.compile == "on" or (runtime.compile == "auto" and device == "cuda")


def apply(model: nn.Module, runtime: Any, sink: Any, device: str) -> None:
    """Turn on what `runtime` (RunConfig.runtime) asks for on `device`, and say so in the run's log."""
    if runtime.activation_checkpointing:
        from models_lib.core.recompute import set_activation_checkpointing

        stacks = set_activation_checkpointing(model, True)
        if not stacks:  # the families refuse this first (ELMo's check_run)
            raise ConfigError("activation_checkpointing recomputes transformer blocks, and this model has none; "
                              "turn it off.")
        sink.log(f"Activation checkpointing: the blocks of {stacks} stack{'s' if stacks > 1 else ''} recompute "
                 f"their activations in the backward pass.")
    if compiles(runtime, device):
        backend, scope = compile_backend(), compile_scope()
        configure_dynamo()
        compile_model(model, backend, scope)
        why = " (compile \"auto\" on a GPU; set it to \"off\" to train uncompiled)" if runtime.compile == "auto" else ""
        where = " block by block" if scope == "blocks" else ""
        sink.log(f"torch.compile ({backend}{where}){why}: the first training step and the first validation compile the "
                 f"model, which takes a while.")


RECOMPILE_LIMIT = 32  # compilations of one function before dynamo runs it eager (its default: 8)


def configure_dynamo() -> None:
    """Dynamo's settings for a run's batches, whose sizes change (mark_dynamic): a dim marked
    dynamic stays symbolic when it is 1 (backed_size_oblivious; by default a size of 1 is
    specialised, so a packed batch of one row compiled a graph of its own), and a function may
    compile up to RECOMPILE_LIMIT times (train and eval, packed and padded batches, ELECTRA's
    generator and discriminator sharing the encoder's code make 8 graphs of one function)."""
    import torch._dynamo
    import torch.fx.experimental._config as fx_config

    fx_config.backed_size_oblivious = True
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(int(getattr(torch._dynamo.config, limit)), RECOMPILE_LIMIT))


def mark_dynamic(batch: Any) -> Any:
    """`batch` (on its device) with the dims that change from batch to batch (its
    varying_dims()) marked dynamic, so that the compiled forward's first graph takes every size
    of them and no later batch recompiles it (dynamo's default: the first shapes are static,
    a new size compiles again, the third size once more ...). Fixed-shape batches stay static."""
    import torch._dynamo

    for name, dims in batch.varying_dims().items():
        value = getattr(batch, name, None)
        if value is not None:
            for dim in dims:
                torch._dynamo.maybe_mark_dynamic(value, dim)
    return batch


def compile_errors() -> tuple[type[BaseException], ...]:
    """What torch.compile raises when it cannot compile (dynamo's and inductor's exceptions)."""
    import torch._dynamo.exc
    import torch._inductor.exc

    errors: list[type[BaseException]] = [torch._dynamo.exc.TorchDynamoException]
    inductor_error = getattr(torch._inductor.exc, "InductorError", None)
    if isinstance(inductor_error, type):
        errors.append(inductor_error)
    return tuple(errors)


def compile_failed(error: BaseException) -> ConfigError:
    """A sentence for a run that could not compile its model: the cause's first line, and what to do."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    cause = lines[0] if lines else type(error).__name__
    if len(cause) > 300:
        cause = cause[:297] + "..."
    return ConfigError(f"torch.compile could not compile the model ({cause}). Turn compile off for this run, or "
                       f"give the worker what compiling needs (a C++ compiler on the CPU, Triton on a GPU).")


# ---------------------------------------------------------------------------- recompiles
WARM_UP_STEPS = 2  # training steps that may compile (the first, and one more for a shape or mode of the first)


def compiled(model: nn.Module) -> bool:
    """Whether `model` or any of its modules was compiled in place (compile_model)."""
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())


def _dynamo_state() -> tuple[Any, Any]:
    """(dynamo's counters, its list of recent compilations' metrics) or (None, None) where this
    torch lacks them (then recompiles go unreported rather than stop a run)."""
    try:
        from torch._dynamo.utils import counters, get_compilation_metrics
    except ImportError:
        return None, None
    return counters, get_compilation_metrics


class CompileWatch:
    """Says in the run's log when torch.compile compiles again once warm-up is over.

    Compiling is expected during warm-up: the first WARM_UP_STEPS training steps and the first
    validation (eval mode and no_grad are guards: validation has a graph of its own). After it,
    each compilation makes a step take seconds to minutes, and after
    torch._dynamo.config.recompile_limit of them a function runs uncompiled (eager) for the rest
    of the run, silently: the log says which function, why (dynamo's first guard that failed)
    and, for the limit, that it fell back to eager. `check()` after a step costs a dictionary
    look-up when nothing compiled (dynamo's frame counter); only a change reads its metrics."""

    def __init__(self, sink: Any):
        self.sink = sink
        self.counters, self._metrics = _dynamo_state()
        self.frames = self._frames()
        self.last = self._latest()
        self.validated = False  # the first validation (its compile) is over
        self.after_warm_up = 0  # compilations reported
        self.fell_back: set[str] = set()
        self.names: dict[str, str] = {}  # dynamo's frame id -> the function's name

    def _frames(self) -> int:
        return self.counters["frames"]["total"] if self.counters is not None else 0

    def _latest(self) -> Any:
        recent = self._metrics() if self._metrics is not None else []
        return recent[-1] if recent else None

    def _new(self) -> list[Any]:
        recent = self._metrics() if self._metrics is not None else []
        seen = next((i for i in range(len(recent) - 1, -1, -1) if recent[i] is self.last), -1)
        self.last = recent[-1] if recent else self.last
        return recent[seen + 1:]

    def check(self, step: int, *, validation: bool = False) -> None:
        """After a training step (`step`, 1-based) or a validation (validation=True)."""
        frames = self._frames()
        if frames == self.frames:
            if validation:
                self.validated = True
            return
        self.frames = frames
        new = self._new()
        for entry in new:  # a failed compilation has no name of its own: its frame's earlier ones do
            if getattr(entry, "co_name", None):
                self.names[_frame_of(entry)] = entry.co_name
        warm = self.validated if validation else step > WARM_UP_STEPS
        if validation:
            self.validated = True
        if not warm:
            return
        where = f"validation at step {step}" if validation else f"step {step}"
        for entry in new:
            self.report(entry, where)

    def report(self, entry: Any, where: str) -> None:
        reason = _first_line(getattr(entry, "recompile_reason", None))
        function = getattr(entry, "co_name", None) or self.names.get(_frame_of(entry), "the model's forward")
        failure = str(getattr(entry, "fail_reason", None) or "")
        if "recompile limit" in failure or "cache_size_limit" in failure or "recompile_limit" in failure:
            if function in self.fell_back:
                return
            self.fell_back.add(function)
            self.sink.log(f"torch.compile gave up compiling {function} at {where}: it reached the limit of "
                          f"{_limit()} compilations (torch._dynamo.config.recompile_limit), so it runs "
                          f"uncompiled (eager) from now on, much slower. The last recompile's reason: {reason}.")
            return
        self.after_warm_up += 1
        if reason:
            self.sink.log(f"torch.compile recompiled {function} at {where} (recompile {self.after_warm_up} after "
                          f"warm-up), because {reason}.")
        else:
            self.sink.log(f"torch.compile compiled {function} at {where} (compile {self.after_warm_up} after "
                          f"warm-up): a part of the model that had not run before.")


def _frame_of(entry: Any) -> str:
    """The frame part of a compilation's id ("3" of "3/1": the 2nd compilation of frame 3)."""
    return str(getattr(entry, "compile_id", "")).split("/")[0]


def _first_line(text: str | None) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    first = lines[0] if lines else "dynamo gave no reason"
    return first if len(first) <= 300 else first[:297] + "..."


def _limit() -> int:
    import torch._dynamo

    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))


def watch(model: nn.Module, sink: Any) -> CompileWatch | None:
    """A CompileWatch for a compiled `model` (speedups.apply did), else None."""
    return CompileWatch(sink) if compiled(model) else None
