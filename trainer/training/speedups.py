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
        compile_model(model, backend, scope)
        why = " (compile \"auto\" on a GPU; set it to \"off\" to train uncompiled)" if runtime.compile == "auto" else ""
        where = " block by block" if scope == "blocks" else ""
        sink.log(f"torch.compile ({backend}{where}){why}: the first training step and the first validation compile the "
                 f"model, which takes a while.")


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
