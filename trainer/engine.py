"""The training loop: train(config, data_dir=..., out_dir=..., sink=...) -> TrainResult.

train() reads as a table of contents: load the tokenizer, build the model, the optimizer and
the data (or restore all of them from the latest checkpoint), then loop over steps with
maybe_log / maybe_eval / maybe_checkpoint. Everything random is seeded from config.seed:
weights and dropout through torch's generator (whose state is checkpointed), data order,
pairs and masks through explicit generators keyed by the data position. So N steps, a
stop, and a resume give the same model as one uninterrupted run.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from trainer import checkpoints, registry
from trainer.collators import Batch, SpecialIds
from trainer.config import RunConfig, resolve_device, resolve_precision
from trainer.data import DataPosition, Prefetcher, TrainStream, build_train_stream, build_valid_batches
from trainer.errors import ConfigError
from trainer.optim import build_optimizer, clip_gradients
from trainer.sinks import MetricsSink, format_duration


PREFETCH_DEVICES = ("cuda",)  # where batches are collated on a background thread (on a CPU it would
                              # compete with the compute threads)


@dataclass
class TrainResult:
    final_step: int
    status: str  # "succeeded" | "cancelled"
    last_checkpoint: Path | None


@dataclass
class TrainState:
    """What a checkpoint restores besides weights, optimizer and RNG."""

    step: int = 0
    tokens_seen: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    elapsed_s: float = 0.0  # training time before this session (for the ETA)
    train_metrics: dict[str, float] = field(default_factory=dict)
    valid_metrics: dict[str, float] = field(default_factory=dict)


def train(config: RunConfig, *, data_dir: Path, out_dir: Path, sink: MetricsSink,
          should_stop: Callable[[], bool] = lambda: False, resume: bool = False) -> TrainResult:
    """Train per `config` on the shards in data_dir (a tokenizer folder), writing checkpoints to
    out_dir/checkpoints/. Calls sink.close() when done, also on error."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    try:
        registry.validate(config)
        tokenizer = load_tokenizer(config, data_dir)
        device, precision = setup_runtime(config)
        resume_from = find_resume_point(out_dir, resume, sink)
        model = build_model(config, tokenizer.vocab_size, tokenizer.pad_id, device)
        optimizer, scheduler = build_optimizer(model, config)
        state = TrainState()
        if resume_from is not None:
            state = restore(resume_from, config, data_dir, model, optimizer, scheduler)
        special = SpecialIds.from_tokenizer(tokenizer)
        stream = build_train_stream(config, data_dir, special, state.position)
        valid = build_valid_batches(config, data_dir, special)
        if not valid:
            sink.log("The validation split gives no examples for these settings; training without validation.")
        loop = Loop(config, model=model, optimizer=optimizer, scheduler=scheduler, stream=stream,
                    valid=valid, state=state, sink=sink, data_dir=data_dir, out_dir=out_dir,
                    device=device, precision=precision, resumed_from=resume_from)
        return loop.run(should_stop)
    finally:
        sink.close()


# ---------------------------------------------------------------------------- building
def load_tokenizer(config: RunConfig, data_dir: Path) -> Any:
    from trainer.tokenization import load_tokenizer as _load

    bundle = _load(data_dir)
    registry.validate_tokenizer(config, bundle.meta.get("algorithm", "wordpiece"))
    return bundle


def setup_runtime(config: RunConfig) -> tuple[str, str]:
    """Resolve device and precision, set threads and the seed (before the weights are made)."""
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device)
    if config.num_threads > 0:
        torch.set_num_threads(config.num_threads)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(config.seed)
    return device, precision


def model_config(config: RunConfig, vocab_size: int, pad_id: int) -> Any:
    spec = registry.get(config.architecture)
    overrides = dict(config.model_overrides)
    cfg = spec.preset_config(config.preset, vocab_size=vocab_size, pad_token_id=pad_id, **overrides)
    if registry.max_positions(cfg) < config.seq_len:  # registry.validate refuses this; belt and braces
        raise ConfigError(f"seq_len {config.seq_len} is longer than the model's {registry.max_positions(cfg)} positions.")
    return cfg


def build_model(config: RunConfig, vocab_size: int, pad_id: int, device: str) -> nn.Module:
    model = registry.get(config.architecture).build_model(model_config(config, vocab_size, pad_id))
    return model.to(device).train()


def find_resume_point(out_dir: Path, resume: bool, sink: MetricsSink) -> Path | None:
    if resume:
        folder = checkpoints.latest_resumable(out_dir)
        if folder is None:
            sink.log(f"No checkpoint to resume from in {out_dir}; starting from step 0.")
        return folder
    if checkpoints.list_checkpoints(out_dir):
        raise ConfigError(f"{out_dir} already holds checkpoints of a run. Resume that run, or train into "
                          f"another folder.")
    return None


def restore(folder: Path, config: RunConfig, data_dir: Path, model: nn.Module,
            optimizer: torch.optim.Optimizer, scheduler: Any) -> TrainState:
    """Load weights, optimizer, scheduler and RNG states from a checkpoint; return the rest."""
    import safetensors.torch

    from models_lib.checkpoint import read_model_config

    saved = read_model_config(folder)["config"]
    if saved != model.config.to_dict():
        changed = sorted(k for k in set(saved) | set(model.config.to_dict())
                         if saved.get(k) != model.config.to_dict().get(k))
        raise ConfigError(f"The checkpoint {folder.name} holds a different model ({', '.join(changed)} differ); "
                          f"resume with the preset and model_overrides the run started with.")
    if _digest(folder / "tokenizer.json") != _digest(data_dir / "tokenizer.json"):
        raise ConfigError(f"The checkpoint {folder.name} was trained with another tokenizer than the one in "
                          f"{data_dir}; resume with the run's own tokenizer.")
    safetensors.torch.load_model(model, str(folder / "model.safetensors"), strict=True,
                                 device=str(next(model.parameters()).device))
    opt = checkpoints.read_optimizer_state(folder)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    checkpoints.restore_rng_state(opt["rng"])
    s = checkpoints.read_state(folder)
    metrics = s.get("metrics", {})
    return TrainState(step=int(s["step"]), tokens_seen=int(s.get("tokens_seen", 0)),
                      position=DataPosition.from_dict(s["data_position"]),
                      elapsed_s=float(s.get("elapsed_s", 0.0)),
                      train_metrics=metrics.get("train", {}), valid_metrics=metrics.get("valid", {}))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


# ---------------------------------------------------------------------------- the loop
class _Interval:
    """Sums over the steps since the last log line (kept on the device: no sync per step)."""

    def __init__(self) -> None:
        self.micro_batches = 0
        self.sums: dict[str, torch.Tensor | float] = {}
        self.tokens = 0
        self.started = time.perf_counter()

    def add(self, key: str, value: torch.Tensor | float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def get(self, key: str) -> float:
        v = self.sums.get(key, 0.0)
        return float(v.item() if isinstance(v, torch.Tensor) else v)


class Loop:
    def __init__(self, config: RunConfig, *, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                 stream: TrainStream, valid: list[Batch], state: TrainState, sink: MetricsSink, data_dir: Path,
                 out_dir: Path, device: str, precision: str, resumed_from: Path | None):
        self.config, self.model, self.optimizer, self.scheduler = config, model, optimizer, scheduler
        self.stream, self.valid, self.state, self.sink = stream, valid, state, sink
        self.data_dir, self.out_dir, self.device, self.precision = data_dir, out_dir, device, precision
        self.resumed_from = resumed_from
        self.first_step = state.step
        self.last_checkpoint: Path | None = resumed_from
        self.last_checkpoint_step = state.step if resumed_from is not None else -1
        self.last_eval_step = -1
        self.session_start = time.perf_counter()
        self.interval = _Interval()
        self.grad_norm: torch.Tensor | float = 0.0
        self.lr = 0.0
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16"
                         else contextlib.nullcontext())
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()

    # -- the table of contents
    def run(self, should_stop: Callable[[], bool]) -> TrainResult:
        self.log_start()
        # On a GPU, the next batches are collated on a thread while the current one computes.
        self.prefetch = (Prefetcher(self.stream, pin=self.device == "cuda")
                         if self.device in PREFETCH_DEVICES else None)
        try:
            while self.state.step < self.config.max_steps:
                if should_stop():
                    return self.cancel()
                self.train_step()
                self.sink.heartbeat(self.state.step, self.state.tokens_seen)
                self.maybe_log()
                self.maybe_eval()
                self.maybe_checkpoint()
            return self.finish()
        except torch.cuda.OutOfMemoryError:
            raise ConfigError(
                f"The GPU ran out of memory at step {self.state.step + 1}. Lower batch_size or seq_len "
                f"(raise grad_accum to keep the effective batch), or pick a smaller preset."
            ) from None
        finally:
            if self.prefetch is not None:
                self.prefetch.close()

    def next_batch(self) -> tuple[Batch, DataPosition]:
        """The next micro-batch and the data position after it."""
        if self.prefetch is not None:
            return self.prefetch.next_batch()
        return self.stream.next_batch(), self.stream.position

    def train_step(self) -> None:
        cfg, model = self.config, self.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        for _ in range(cfg.grad_accum):
            batch, position = self.next_batch()
            n_tokens = batch.n_tokens
            batch = batch.to(self.device)
            with self.autocast:
                out = model(**batch.model_inputs())
            (out.loss / cfg.grad_accum).backward()
            self.record(out, batch, n_tokens)
        self.grad_norm = clip_gradients(model, cfg.clip_grad)
        self.lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        self.state.position = position

    def record(self, out: Any, batch: Batch, n_tokens: int) -> None:
        iv = self.interval
        iv.micro_batches += 1
        iv.tokens += n_tokens
        self.state.tokens_seen += n_tokens
        iv.add("loss", out.loss.detach().float())
        if out.mlm_loss is not None:
            iv.add("mlm_loss", out.mlm_loss.detach().float())
            iv.add("mlm_correct", (out.mlm_logits.detach().argmax(-1) == out.mlm_targets).sum())
            iv.add("mlm_total", out.mlm_targets.numel())
        if out.nsp_loss is not None:
            iv.add("nsp_loss", out.nsp_loss.detach().float())
            iv.add("nsp_correct", (out.nsp_logits.detach().argmax(-1) == batch.nsp_labels).sum())
            iv.add("nsp_total", out.nsp_logits.shape[0])

    def maybe_log(self) -> None:
        step = self.state.step
        if step != 1 and step % self.config.log_every and step != self.config.max_steps:
            return
        iv, n = self.interval, max(1, self.interval.micro_batches)
        loss = iv.get("loss") / n
        if not math.isfinite(loss):
            raise ConfigError(f"The loss became {loss} at step {step}: training diverged. "
                              f"Lower lr, raise warmup_steps or keep clip_grad on.")
        now = time.perf_counter()
        values = {"loss": loss, "mlm_loss": iv.get("mlm_loss") / n,
                  "mlm_acc": iv.get("mlm_correct") / max(1.0, iv.get("mlm_total"))}
        if self.config.uses_nsp:
            values["nsp_loss"] = iv.get("nsp_loss") / n
            values["nsp_acc"] = iv.get("nsp_correct") / max(1.0, iv.get("nsp_total"))
        done = step - self.first_step
        per_step = (now - self.session_start) / max(1, done)
        values.update(lr=self.lr, grad_norm=float(self.grad_norm),
                      tokens_per_s=iv.tokens / max(1e-9, now - iv.started),
                      memory_mb=memory_mb(self.device), progress=step / self.config.max_steps,
                      eta_s=per_step * (self.config.max_steps - step))
        self.state.train_metrics = values
        self.sink.metrics(step, "train", values)
        self.interval = _Interval()

    def maybe_eval(self, force: bool = False) -> None:
        step = self.state.step
        if not force and step % self.config.eval_every:
            return
        if step == self.last_eval_step or not self.valid:
            return
        started = time.perf_counter()
        values = self.evaluate()
        self.interval.started += time.perf_counter() - started  # tokens_per_s measures training only
        self.last_eval_step = step
        self.state.valid_metrics = values
        self.sink.metrics(step, "valid", values)
        text = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
        self.sink.log(f"Validation at step {step}: {text}.")

    def maybe_checkpoint(self, force: bool = False) -> None:
        step = self.state.step
        if (force or step % self.config.checkpoint_every == 0) and step != self.last_checkpoint_step:
            started = time.perf_counter()
            self.save_checkpoint()
            self.interval.started += time.perf_counter() - started

    # -- the pieces
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        model = self.model
        model.eval()
        mlm_loss = mlm_correct = mlm_total = nsp_loss = nsp_correct = nsp_total = 0.0
        for batch in self.valid:
            batch = batch.to(self.device)
            with self.autocast:
                out = model(**batch.model_inputs())
            n = out.mlm_targets.numel()
            mlm_loss += float(out.mlm_loss) * n
            mlm_correct += float((out.mlm_logits.argmax(-1) == out.mlm_targets).sum())
            mlm_total += n
            if out.nsp_loss is not None:
                b = batch.size
                nsp_loss += float(out.nsp_loss) * b
                nsp_correct += float((out.nsp_logits.argmax(-1) == batch.nsp_labels).sum())
                nsp_total += b
        model.train()
        mlm = mlm_loss / max(1.0, mlm_total)
        values = {"loss": mlm, "mlm_loss": mlm, "perplexity": math.exp(min(mlm, 50.0)),
                  "mlm_acc": mlm_correct / max(1.0, mlm_total)}
        if nsp_total:
            values["loss"] = mlm + nsp_loss / nsp_total
            values["nsp_acc"] = nsp_correct / nsp_total
        return values

    def save_checkpoint(self) -> Path:
        s = self.state
        elapsed = s.elapsed_s + time.perf_counter() - self.session_start
        metrics = {"train": s.train_metrics, "valid": s.valid_metrics}
        state = {"step": s.step, "tokens_seen": s.tokens_seen, "config": self.config.to_dict(),
                 "data_position": s.position.to_dict(), "epoch": s.position.epoch,
                 "elapsed_s": round(elapsed, 3), "metrics": metrics,
                 "architecture": self.config.architecture, "objectives": list(self.config.objectives)}
        opt_state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                     "rng": checkpoints.capture_rng_state(), "data_position": s.position.to_dict(),
                     "step": s.step}
        folder = checkpoints.save_checkpoint(self.out_dir, s.step, model=self.model, tokenizer_dir=self.data_dir,
                                             state=state, optimizer_state=opt_state)
        self.last_checkpoint, self.last_checkpoint_step = folder, s.step
        self.sink.checkpoint(s.step, folder, metrics)
        self.sink.log(f"Saved checkpoint {folder.name}.")
        return folder

    def cancel(self) -> TrainResult:
        step = self.state.step
        if step > 0 and step != self.last_checkpoint_step:
            self.save_checkpoint()
        self.sink.log(f"Cancelled at step {step}" + (f"; the last checkpoint is {self.last_checkpoint.name}."
                                                    if self.last_checkpoint else "."))
        return TrainResult(step, "cancelled", self.last_checkpoint)

    def finish(self) -> TrainResult:
        step = self.state.step
        if step > self.first_step:
            self.maybe_eval(force=True)
            self.maybe_checkpoint(force=True)
        took = time.perf_counter() - self.session_start
        self.sink.log(f"Finished at step {step} after {format_duration(took)} "
                      f"({self.state.tokens_seen:,} tokens seen, epoch {self.state.position.epoch}).")
        return TrainResult(step, "succeeded", self.last_checkpoint)

    def log_start(self) -> None:
        cfg = self.config
        n_params = sum(p.numel() for p in self.model.parameters())
        if self.resumed_from is not None:
            self.sink.log(f"Resuming from {self.resumed_from.name} (step {self.state.step}).")
        self.sink.log(
            f"Training {cfg.preset} ({n_params / 1e6:.2f}M parameters, vocabulary {self.model.config.vocab_size:,}) "
            f"with {' + '.join(o.upper() for o in cfg.objectives)} on {self.device} ({self.precision}): "
            f"{cfg.max_steps:,} steps of {cfg.batch_size} x {cfg.grad_accum} sequences of up to {cfg.seq_len} tokens; "
            f"{self.stream.epoch_size:,} training sequences per epoch, {len(self.valid)} validation batches."
        )


def memory_mb(device: str) -> float:
    """Peak CUDA memory allocated, or the process's resident memory on the CPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB

