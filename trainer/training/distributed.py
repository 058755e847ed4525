"""Training one run on several processes: torchrun's environment, DDP or FSDP2, full checkpoints.

A run on N devices is N copies of the trainer started by torchrun (torch.distributed.run: the
CLI starts it for `--devices N` or `--nnodes`, see trainer.cli); each copy calls train() as a
one-process run would. This module is what differs, and with one process every function here
is a no-op, so a one-process run is exactly what it was:

- init(): join the process group torchrun's environment describes (gloo on the CPU, NCCL on
  CUDA, one GPU per local rank).
- choose_strategy() / wrap(): DDP (the model replicated, gradients averaged; accumulation
  micro-batches skip the all-reduce under no_sync()) or FSDP2 (`fully_shard` on each block of
  every nn.ModuleList, then on the root; weights, gradients and optimizer state sharded; bf16
  compute with fp32 gradient reduction on CUDA). "auto" picks FSDP2 when the weights, gradients
  and optimizer state would take more than FIT_SHARE of the smallest free device memory.
- The data: each rank takes every N-th micro-batch of the one-process stream
  (trainer.training.data.TrainStream's `shard`), so N processes with grad_accum A see exactly
  the micro-batches of one process with grad_accum N x A, and the data position after a step is
  the same on every rank: a checkpoint resumes on any number of devices.
- Reporting: every rank computes, rank 0 alone reports (the engine gives the others a
  NullSink); training metrics are summed over the ranks at each log step (sum_floats), and a
  stop request on any rank stops all of them at the same step (any()). Validation is shared:
  each rank scores every N-th validation batch and the sums are added up over the ranks, which
  gives the one-process values (engine.Loop.validation_share; under FSDP2 a rank with a batch
  fewer runs one unscored, since each forward gathers the weights together).
- Checkpoints hold the full state in the one-process format: full_state() gathers FSDP2's
  shards with torch.distributed.checkpoint.state_dict (collective; rank 0 keeps them) and
  numbers the optimizer state by parameter order as Optimizer.state_dict() does; load() puts
  a full state back into a sharded or replicated model.
- The vocabulary's tables are padded to a multiple of 64 rows in the model (models_lib.core.vocab)
  and hold vocab_size rows on disk, their optimizer state too: full_state() cuts the padding's
  rows off the optimizer state (save_model those of the weights), load() pads both again, so
  a checkpoint from before the padding resumes as well.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from models_lib.core import vocab
from trainer.errors import ConfigError

STRATEGIES = ("ddp", "fsdp")
FIT_SHARE = 0.5  # "auto": DDP while weights + gradients + optimizer state take at most this share of free memory
OPTIMIZER_BYTES = {"adamw": 8, "adafactor": 1}  # optimizer state per parameter per byte of weight (approx.)


@dataclass(frozen=True)
class Dist:
    """Where this process stands: its global and local rank, the number of processes, and the
    strategy ("" while one process trains alone)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    strategy: str = ""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def with_strategy(self, strategy: str) -> "Dist":
        return Dist(self.rank, self.local_rank, self.world_size, strategy)

    # -- agreement between the ranks (identity with one process)
    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (a stop request)."""
        if not self.enabled:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=_comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def sum_floats(self, values: dict[str, float]) -> dict[str, float]:
        """Each key's sum over the ranks (keys that only some ranks have count as 0 elsewhere)."""
        if not self.enabled:
            return dict(values)
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, {k: float(v) for k, v in values.items()})
        out: dict[str, float] = {}
        for part in gathered:
            for k, v in part.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first, then the others (who find its work done: data preparation),
        then everyone goes on together."""
        if not self.enabled:
            yield
            return
        if not self.is_main:
            dist.barrier()
        yield
        if self.is_main:
            dist.barrier()
        dist.barrier()


def launched() -> bool:
    """Whether torchrun started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: str) -> Dist:
    """Join the process group of torchrun's environment (once; later calls only read it)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        if device == "cuda":
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        else:
            dist.init_process_group("gloo")
    return Dist(rank=rank, local_rank=local_rank, world_size=world)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _comm_device() -> torch.device:
    """Where collective tensors live: the current GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------- the strategy
def state_bytes(model: nn.Module, optimizer: str) -> int:
    """Bytes of the weights, their gradients and the optimizer's state."""
    total = 0
    for p in model.parameters():
        size = p.numel() * p.element_size()
        total += size + (size + OPTIMIZER_BYTES.get(optimizer, 8) * size if p.requires_grad else 0)
    return total


def free_memory(device: str) -> int:
    """Free bytes of this process's device: the GPU's, or the machine's available memory."""
    if device == "cuda":
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2**63 - 1  # unknown: assume it fits


def choose_strategy(ctx: Dist, requested: str, model: nn.Module, optimizer: str, device: str) -> str:
    """requested ("ddp", "fsdp" or "auto") -> "ddp" or "fsdp", the same on every rank."""
    if not ctx.enabled:
        return ""
    if requested in STRATEGIES:
        return requested
    free = torch.tensor([float(free_memory(device))], device=_comm_device())
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    return "fsdp" if state_bytes(model, optimizer) > FIT_SHARE * free.item() else "ddp"


class _DDP(DistributedDataParallel):
    """DDP that also answers the wrapped model's attributes (a Step reads model.config)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(self.module, name)


def wrap(ctx: Dist, model: nn.Module, forward: Any, *, device: str, precision: str) -> nn.Module:
    """The model as the ranks train it together (ctx.strategy), and the Step `forward` pointed
    at it. One process: the model itself."""
    if ctx.strategy == "ddp":
        wrapped = _DDP(model, device_ids=[ctx.local_rank] if device == "cuda" else None,
                       forward_sync_buffers=False,  # no running statistics in these models
                       find_unused_parameters=True)  # e.g. the pooler when no objective reads it
        forward.model = wrapped
        return wrapped
    if ctx.strategy == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if device == "cuda" and precision == "bf16" else MixedPrecisionPolicy())
        for block in _blocks(model):
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)  # in place: forward.model is this module already
        return model
    return model


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated layers (each child of an nn.ModuleList), each sharded on its own so that one
    layer's weights are gathered at a time; a module used more than once (ALBERT's shared layer)
    or holding a parameter shared with another module stays with the root."""
    owners: dict[int, set[int]] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners.setdefault(id(p), set()).add(id(module))
    blocks, seen = [], set()
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            for child in module:
                if id(child) in seen:
                    continue
                seen.add(id(child))
                inside = {id(m) for m in child.modules()}
                if all(owners[id(p)] <= inside for p in child.parameters()):
                    blocks.append(child)
    return [b for b in blocks if not any(b is not o and any(b is m for m in o.modules()) for o in blocks)]


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


@contextlib.contextmanager
def gradient_sync(ctx: Dist, model: nn.Module, *, last: bool) -> Iterator[None]:
    """Around one micro-batch's forward and backward: the gradients are reduced across the ranks
    only on the last micro-batch of an update (DDP's no_sync(), FSDP2's
    set_requires_gradient_sync)."""
    if ctx.strategy == "ddp" and not last:
        with model.no_sync():
            yield
    elif ctx.strategy == "fsdp":
        model.set_requires_gradient_sync(last)
        yield
    else:
        yield


def full_value(t: Any) -> Any:
    """A tensor as a whole (a DTensor, e.g. FSDP2's gradient norm, gathered: collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


# ---------------------------------------------------------------------------- full state
_FULL = {"full_state_dict": True, "cpu_offload": True}


def full_state(ctx: Dist, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict | None, dict]:
    """(weights by name or None, optimizer state) as one process would save them. Weights: None
    unless FSDP2 (then save the module's own); the gathered tensors on rank 0 otherwise. Collective
    under FSDP2: every rank calls it, only rank 0 gets the state."""
    if ctx.strategy != "fsdp":
        return None, vocab.unpad_optimizer_state(model, optimizer, optimizer.state_dict())
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
    )

    options = StateDictOptions(**_FULL)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, optimizer, options=options)
    if not ctx.is_main:
        return None, {}
    return weights, vocab.unpad_optimizer_state(model, optimizer, _numbered(optim))


def load(ctx: Dist, model: nn.Module, optimizer: torch.optim.Optimizer, weights_file: Path,
         optimizer_state: dict) -> None:
    """Load a checkpoint's full weights and optimizer state into the (wrapped) model and its optimizer."""
    import safetensors.torch

    if ctx.strategy != "fsdp":
        module = unwrap(model)
        safetensors.torch.load_model(module, str(weights_file), strict=True,  # pads the vocabulary's tables
                                     device=str(next(module.parameters()).device))
        optimizer.load_state_dict(vocab.pad_optimizer_state(module, optimizer, optimizer_state))
        return
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, set_model_state_dict, set_optimizer_state_dict,
    )

    weights = safetensors.torch.load_file(str(weights_file))
    names = _names_by_param(model)
    for group in names.values():  # names of a shared tensor that the file holds once
        kept = next((n for n in group if n in weights), None)
        if kept is not None:
            for n in group:
                weights.setdefault(n, weights[kept])
    weights = vocab.padded_state_dict(model, weights)  # set_model_state_dict checks shapes before any hook
    optimizer_state = vocab.pad_optimizer_state(model, optimizer, optimizer_state)
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, weights, options=options)
    set_optimizer_state_dict(model, optimizer, _named(optimizer_state, optimizer, names), options=options)


def _names_by_param(model: nn.Module) -> dict[int, list[str]]:
    """id(parameter) -> every name it has in the model (several when it is shared)."""
    out: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.setdefault(id(p), []).append(name)
    return out


def _numbered(optim: dict) -> dict:
    """An optimizer state keyed by parameter names (torch.distributed.checkpoint) -> keyed by
    position in the parameter groups, as Optimizer.state_dict() keys it."""
    index: dict[str, int] = {}
    groups = []
    for group in optim["param_groups"]:
        ids = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[n]: s for n, s in optim["state"].items()}, "param_groups": groups}


def _named(state: dict, optimizer: torch.optim.Optimizer, names: dict[int, list[str]]) -> dict:
    """The inverse of _numbered for this optimizer's parameters."""
    order = [names[id(p)][0] for group in optimizer.param_groups for p in group["params"]]
    if len(order) != sum(len(g["params"]) for g in state["param_groups"]):
        raise ConfigError("The checkpoint's optimizer state does not fit this model's parameters; resume with the "
                          "settings the run started with.")
    groups = [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {order[int(i)]: s for i, s in state["state"].items()}, "param_groups": groups}
