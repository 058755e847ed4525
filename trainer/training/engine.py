"""The training loop: train(config, data_dir=..., out_dir=..., sink=...) -> TrainResult.

train() reads as a table of contents: load the tokenizer, build the model, the optimizer and
the data (or restore all of them from the latest checkpoint), then loop over steps with
maybe_log / maybe_eval / maybe_checkpoint. Everything random is seeded from config.seed:
weights and dropout through torch's generator (whose state is checkpointed), data order,
pairs and masks through explicit generators keyed by the data position, ELECTRA's sampling
through its own checkpointed generator. So N steps, a stop, and a resume give the same model
as one uninterrupted run.

What a run computes per batch is its objective's Step (trainer.objectives; a `Step` returns the loss, its
named parts and (hits, total) counts); the loop here only adds them up, so every family's
losses and accuracies are reported for training and validation alike.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from trainer.training import batch_workers, checkpoints, distributed, retention
from trainer import objectives
from trainer.training import flops, speedups, steps, tracker_sinks
from trainer.catalog import validation
from trainer.objectives.base import Batch, Step, StepOutput
from trainer.objectives.examples import SpecialIds
from trainer.config import RunConfig, resolve_device, resolve_precision
from trainer.training.data import (
    DataPosition, InThread, Prefetcher, TrainStream, build_train_stream, build_valid_batches,
)
from trainer.errors import ConfigError
from trainer.prep.tokenization import tokenizer_sha256 as _tokenizer_sha256, tokenizers_differ
from trainer.training.optim import build_optimizer, clip_gradients
from trainer.training.sinks import MetricsSink, NullSink, TeeSink, format_duration


PREFETCH_DEVICES = ("cuda",)  # where batches are collated on a background thread when no worker process
                              # builds them (on a CPU the thread would compete with the compute threads)


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
    out_dir/checkpoints/. Calls sink.close() when done, also on error.

    Started by torchrun as one of several processes, it trains with the others
    (trainer.training.distributed); only rank 0 reports to `sink` and writes checkpoints."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    reporter, mirrors = sink, []
    try:
        validation.validate(config)
        tokenizer = load_tokenizer(config, data_dir)
        device, precision = setup_runtime(config)
        ctx = distributed.init(device)
        if not ctx.is_main:
            reporter = NullSink()
        special = SpecialIds.from_tokenizer(tokenizer)
        stream = None
        if config.epochs:  # an epoch: the train split's sequences for these settings (the first epoch's)
            stream = build_train_stream(config, data_dir, special, shard=(ctx.rank, ctx.world_size))
            config = with_epochs(config, stream.epoch_size, config.batch_size * config.grad_accum * ctx.world_size,
                                 reporter, what="training sequences")
        if ctx.is_main and config.report_to:  # rank 0 also mirrors to the trackers (the config with its steps)
            mirrors = tracker_sinks.open_sinks(config.report_to, config.to_dict(), out_dir)
            reporter = TeeSink(sink, *mirrors)
            reporter.log(tracker_sinks.describe(config.report_to))
        resume_from = find_resume_point(out_dir, resume, reporter)
        reporter.log(describe_tokenizer(tokenizer))
        model, forward = steps.build(config, vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                                        device=device, data_dir=data_dir, tokenizer=tokenizer)
        # activation checkpointing, torch.compile: in place, on the model itself (before any wrapper)
        speedups.apply(model, config.runtime, reporter, device=device)
        ctx = ctx.with_strategy(distributed.choose_strategy(ctx, config.strategy, model, config.optimizer, device))
        model = distributed.wrap(ctx, model, forward, device=device, precision=precision)
        optimizer, scheduler = build_optimizer(model, config.optim, config.max_steps)
        state = TrainState()
        if resume_from is not None:
            state = restore(resume_from, config, data_dir, model, optimizer, scheduler, forward, ctx=ctx)
        if stream is None or state.position != stream.position:
            stream = build_train_stream(config, data_dir, special, state.position, shard=(ctx.rank, ctx.world_size))
        valid = build_valid_batches(config, data_dir, special)
        if not valid:
            reporter.log("The validation split gives no examples for these settings; training without validation.")
        loop = Loop(config, model=model, forward=forward, optimizer=optimizer, scheduler=scheduler, stream=stream,
                    valid=valid, state=state, sink=reporter, data_dir=data_dir, out_dir=out_dir,
                    device=device, precision=precision, resumed_from=resume_from, dist=ctx,
                    tokenizer_sha256=tokenizer.sha256)
        return loop.run(should_stop)
    finally:
        try:
            tracker_sinks.close_all(mirrors)
        finally:
            sink.close()


# ---------------------------------------------------------------------------- building
def with_epochs(config: Any, examples: int, per_step: int, sink: MetricsSink, *, what: str) -> Any:
    """The config with max_steps from its epochs (trainer.config.resolve_epochs), said in the log
    and told to a sink that asks (its run_length(max_steps, epochs): the web app's run row, the
    console's step counter); a config without epochs as it is."""
    from trainer.config import resolve_epochs

    if not config.epochs:
        return config
    config = resolve_epochs(config, examples, per_step)
    sink.log(f"{config.epochs:g} epochs of {examples:,} {what}, {per_step:,} a step: {config.max_steps:,} steps.")
    tell = getattr(sink, "run_length", None)
    if callable(tell):
        tell(config.max_steps, config.epochs)
    return config


def load_tokenizer(config: RunConfig, data_dir: Path) -> Any:
    from trainer.prep.tokenization import load_tokenizer as _load

    bundle = _load(data_dir)
    validation.validate_tokenizer(config, bundle.meta.get("algorithm", "wordpiece"), bundle.meta)
    return bundle


def describe_tokenizer(bundle: Any) -> str:
    """The log line that records which tokenizer a run reads, by content: a tokenizer trained again
    on the same corpus may have another vocabulary, and then ids mean other tokens."""
    return (f"Tokenizer: {bundle.meta.get('algorithm', 'wordpiece')}, {bundle.vocab_size:,} tokens, "
            f"sha256 {bundle.sha256 or 'unknown (no tokenizer.json)'}.")


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
            optimizer: torch.optim.Optimizer, scheduler: Any, forward: Step | None = None,
            ctx: distributed.Dist = distributed.Dist()) -> TrainState:
    """Load weights, optimizer, scheduler and RNG states from a checkpoint; return the rest.
    `model` may be wrapped for several processes (ctx); any checkpoint loads into any number."""
    from models_lib.checkpoint import read_model_config

    saved = read_model_config(folder)["config"]
    if saved != model.config.to_dict():
        changed = sorted(k for k in set(saved) | set(model.config.to_dict())
                         if saved.get(k) != model.config.to_dict().get(k))
        raise ConfigError(f"The checkpoint {folder.name} holds a different model ({', '.join(changed)} differ); "
                          f"resume with the preset and model_overrides the run started with.")
    if tokenizers_differ(folder, data_dir):
        raise ConfigError(f"The checkpoint {folder.name} was trained with another tokenizer than the one in "
                          f"{data_dir}; resume with the run's own tokenizer.")
    opt = checkpoints.read_optimizer_state(folder)
    distributed.load(ctx, model, optimizer, folder / "model.safetensors", opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    checkpoints.restore_rng_state(opt["rng"])
    if forward is not None:  # e.g. ELECTRA's sampler
        forward.load_state_dict(opt.get("family_state", {}))
    s = checkpoints.read_state(folder)
    metrics = s.get("metrics", {})
    return TrainState(step=int(s["step"]), tokens_seen=int(s.get("tokens_seen", 0)),
                      position=DataPosition.from_dict(s["data_position"]),
                      elapsed_s=float(s.get("elapsed_s", 0.0)),
                      train_metrics=metrics.get("train", {}), valid_metrics=metrics.get("valid", {}))


# ---------------------------------------------------------------------------- the loop
class _Interval:
    """Sums over the steps since the last log line (kept on the device: no sync per step)."""

    def __init__(self) -> None:
        self.micro_batches = 0
        self.sums: dict[str, torch.Tensor | float] = {}
        self.tokens = 0
        self.positions = 0  # positions computed, padding included
        self.started = time.perf_counter()

    def add(self, key: str, value: torch.Tensor | float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def get(self, key: str) -> float:
        v = self.sums.get(key, 0.0)
        return float(v.item() if isinstance(v, torch.Tensor) else v)


class Tally:
    """Named losses and ratios of StepOutputs, added up. weighted=False averages each loss over
    the micro-batches that had it (training, as BERT logs); weighted=True weights each batch's
    mean by what it is over, targets, sequences or tokens (validation). Ratios are always
    total hits / total count."""

    def __init__(self, *, weighted: bool) -> None:
        self.weighted = weighted
        self.losses: dict[str, list] = {}   # name -> [sum, weight]
        self.ratios: dict[str, list] = {}   # name -> [hits, total]

    def add(self, out: StepOutput) -> None:
        for name, value in out.losses.items():
            w = out.weights.get(name, 1.0) if self.weighted else 1.0
            acc = self.losses.setdefault(name, [0.0, 0.0])
            acc[0] = acc[0] + value * w
            acc[1] = acc[1] + w
        for name, (hits, total) in out.ratios.items():
            acc = self.ratios.setdefault(name, [0.0, 0.0])
            acc[0], acc[1] = acc[0] + hits, acc[1] + total

    def values(self) -> dict[str, float]:
        """{loss name: mean, ..., ratio name: hits / total} (one device sync per value)."""
        out = {name: _item(s) / max(_item(w), 1e-12) for name, (s, w) in self.losses.items()}
        out.update({name: _item(h) / max(_item(t), 1.0) for name, (h, t) in self.ratios.items()})
        return out


def _item(x: torch.Tensor | float) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


class Loop:
    def __init__(self, config: RunConfig, *, model: nn.Module, forward: Step,
                 optimizer: torch.optim.Optimizer, scheduler: Any,
                 stream: TrainStream, valid: list[Batch], state: TrainState, sink: MetricsSink, data_dir: Path,
                 out_dir: Path, device: str, precision: str, resumed_from: Path | None,
                 dist: distributed.Dist = distributed.Dist(), tokenizer_sha256: str | None = None):
        self.config, self.model, self.optimizer, self.scheduler = config, model, optimizer, scheduler
        self.dist = dist  # the processes training together (one by default)
        self.tokens_agreed = state.tokens_seen  # tokens_seen as last summed over the processes
        self.forward = forward  # batch -> StepOutput (the family's forward, loss and counts)
        self.stream, self.valid, self.state, self.sink = stream, valid, state, sink
        self.data_dir, self.out_dir, self.device, self.precision = data_dir, out_dir, device, precision
        self.resumed_from = resumed_from
        # recorded in every checkpoint's trainer_state.json: the loaded bundle's hash when the engine
        # has it (TokenizerBundle.sha256, already read for the log line), else hashed here
        self.tokenizer_sha256 = tokenizer_sha256 if tokenizer_sha256 is not None else _tokenizer_sha256(data_dir)
        self.first_step = state.step
        self.last_checkpoint: Path | None = resumed_from
        self.last_checkpoint_step = state.step if resumed_from is not None else -1
        self.last_log_step = state.step if resumed_from is not None else -1  # the last step whose loss was logged
        self.last_eval_step = -1
        self.session_start = time.perf_counter()
        self.interval = _Interval()
        self.tally = Tally(weighted=False)
        self.grad_norm: torch.Tensor | float = 0.0
        self.lr = 0.0
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16"
                         else contextlib.nullcontext())
        # MFU: the run's FLOPs per counted token (trainer.training.flops) over the device's peak
        model_config = getattr(distributed.unwrap(model), "config", None)
        self.flops_per_token = (flops.training_flops_per_token(model_config, flops.run_workload(config, model, forward,
                                                                                                stream))
                                if model_config is not None else None)
        probing = time.perf_counter()
        self.peak = flops.peak_for(device, precision) if self.flops_per_token else None
        # The peak's measurement (a second or two of matmuls, once a process) is set-up, not training:
        # the run's clock (elapsed_s, the ETA, "Finished after") starts after it; its time is kept apart.
        self.probe_s = time.perf_counter() - probing
        self.session_start = time.perf_counter()
        self._said_mfu = False
        # torch.compile: recompiles after warm-up go to the log; the batches' varying sizes are dynamic
        self.compile_watch = speedups.watch(distributed.unwrap(model), sink)
        self.interval = _Interval()  # after the peak's measurement
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()

    # -- the table of contents
    def run(self, should_stop: Callable[[], bool]) -> TrainResult:
        self.batches, why_in_process = self.open_batches()
        try:
            self.log_start()
            if why_in_process:
                self.sink.log(why_in_process)
            while self.state.step < self.config.max_steps and not self.should_end():
                if self.dist.any(should_stop()):  # every process stops at the same step
                    return self.cancel()
                self.train_step()
                if self.compile_watch is not None:
                    self.compile_watch.check(self.state.step)
                self.sink.heartbeat(self.state.step, self.state.tokens_seen)
                self.maybe_log()
                self.maybe_eval()
                self.maybe_checkpoint()
            return self.finish()
        except torch.cuda.OutOfMemoryError:
            raise ConfigError(
                f"The GPU ran out of memory at step {self.state.step + 1}. Lower batch_size or seq_len "
                f"(raise grad_accum to keep the effective batch), turn on activation_checkpointing, or pick a "
                f"smaller preset."
            ) from None
        except speedups.compile_errors() as e:
            raise speedups.compile_failed(e) from None
        finally:
            self.batches.close()

    def should_end(self) -> bool:
        """Whether to finish ("succeeded") before max_steps; never here (fine-tuning's early
        stopping says so in its subclass)."""
        return False

    def open_batches(self) -> tuple[Any, str]:
        """Where the run's batches are built (-> the source of next_batch(), and a log line
        saying why they stay in this process when data_workers asked for worker processes that
        cannot build them): by data_workers processes (trainer.training.batch_workers), else on a
        background thread on a GPU (it overlaps with the GPU's work), else on the training thread."""
        pin = self.device == "cuda"
        setting = int(getattr(self.config, "data_workers", 0))
        workers = batch_workers.resolve_workers(setting, self.device, self.dist.world_size)
        why = ""
        if workers > 0:
            try:
                return batch_workers.BatchWorkers(self.stream, workers, pin=pin), ""
            except batch_workers.CannotShare as e:
                why = (f"Batches are collated in the training process rather than by {workers} worker "
                       f"process{'es' if workers != 1 else ''}: {e}.")
        if self.device in PREFETCH_DEVICES:
            return Prefetcher(self.stream, pin=pin), why
        return InThread(self.stream), why

    def next_batch(self) -> tuple[Batch, DataPosition]:
        """The next micro-batch and the data position after it."""
        return self.batches.next_batch()

    def train_step(self) -> None:
        cfg, model = self.config, self.model
        model.train()
        self.optimizer.zero_grad(set_to_none=True)
        for i in range(cfg.grad_accum):
            batch, position = self.next_batch()
            n_tokens, n_positions = batch.n_tokens, batch.n_positions
            batch = batch.to(self.device)
            if self.compile_watch is not None:
                speedups.mark_dynamic(batch)
            with distributed.gradient_sync(self.dist, model, last=i == cfg.grad_accum - 1):
                with self.autocast:
                    out = self.forward(batch, train=True)
                (out.loss / cfg.grad_accum).backward()
            self.record(out, n_tokens, n_positions)
        self.grad_norm = clip_gradients(model, cfg.clip_grad)
        self.lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.state.step += 1
        self.state.position = position

    def record(self, out: StepOutput, n_tokens: int, n_positions: int) -> None:
        iv = self.interval
        iv.micro_batches += 1
        iv.tokens += n_tokens
        iv.positions += n_positions
        self.state.tokens_seen += n_tokens
        iv.add("loss", out.loss.detach().float())
        self.tally.add(out)

    def maybe_log(self) -> None:
        step = self.state.step
        if step != 1 and step % self.config.log_every and step != self.config.max_steps:
            return
        iv, tally = self.interval, self.tally.values() if not self.dist.enabled else self.summed(self.tally)
        summed = self.dist.sum_floats({"loss": iv.get("loss"), "n": iv.micro_batches, "tokens": iv.tokens,
                                       "positions": iv.positions})
        loss = summed["loss"] / max(1.0, summed["n"])
        self.agree_tokens()
        if not math.isfinite(loss):
            raise ConfigError(f"The loss became {loss} at step {step}: training diverged. "
                              f"Lower lr, raise warmup_steps or keep clip_grad on.")
        now = time.perf_counter()
        values = {"loss": loss, **_ordered(tally)}
        done = step - self.first_step
        per_step = (now - self.session_start) / max(1, done)
        values.update(lr=self.lr, grad_norm=float(distributed.full_value(self.grad_norm)),
                      tokens_per_s=summed["tokens"] / max(1e-9, now - iv.started),
                      fill=summed["tokens"] / max(1.0, summed["positions"]),  # real tokens / positions computed
                      memory_mb=memory_mb(self.device), progress=step / self.config.max_steps,
                      eta_s=per_step * (self.config.max_steps - step))
        # tokens/s is every process's; MFU is per device (each process has one, of the same kind)
        used = flops.utilisation(self.flops_per_token, values["tokens_per_s"] / self.dist.world_size, self.peak)
        mfu = flops.mfu(self.flops_per_token, values["tokens_per_s"] / self.dist.world_size, self.peak)
        if mfu is not None:
            values["mfu"] = mfu
        elif used is not None and not self._said_mfu:  # above 100%: the peak is wrong, not the run
            self._said_mfu = True
            self.sink.log(f"MFU is not shown: it would read {used:.0%}, above the {self.peak.flops / 1e12:.2f} "
                          f"TFLOP/s peak ({self.peak.source}), so that peak was measured too low (a busy machine).")
        if self.config.epochs:  # a run given in epochs: how far through them (the data position)
            values["epoch"] = self.epochs_done()
        self.state.train_metrics = values
        self.sink.metrics(step, "train", values)
        self.last_log_step = step
        self.interval = _Interval()
        self.tally = Tally(weighted=False)

    def summed(self, mine: Tally) -> dict[str, float]:
        """A Tally's values over the (micro-)batches of every process (collective)."""
        tally, parts = Tally(weighted=mine.weighted), {}
        for kind, table in (("loss", mine.losses), ("ratio", mine.ratios)):
            for name, (a, b) in table.items():
                parts[f"{kind}:{name}:0"], parts[f"{kind}:{name}:1"] = _item(a), _item(b)
        for key, value in self.dist.sum_floats(parts).items():
            kind, name, i = key.split(":")
            (tally.losses if kind == "loss" else tally.ratios).setdefault(name, [0.0, 0.0])[int(i)] = value
        return tally.values()

    def agree_tokens(self) -> None:
        """tokens_seen summed over the processes (each counts its own between two agreements)."""
        if self.dist.enabled:
            mine = self.state.tokens_seen - self.tokens_agreed
            self.state.tokens_seen = self.tokens_agreed + int(self.dist.sum_floats({"t": mine})["t"])
            self.tokens_agreed = self.state.tokens_seen

    def maybe_eval(self, force: bool = False) -> None:
        step = self.state.step
        if not force and step % self.config.eval_every:
            return
        if step == self.last_eval_step or not self.valid:
            return
        started = time.perf_counter()
        values = self.evaluate()
        if self.compile_watch is not None:
            self.compile_watch.check(step, validation=True)
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
    def evaluate(self, batches: list[Batch] | None = None) -> dict[str, float]:
        """score() over the fixed validation batches (or the test split's), shared out among the
        processes training together (validation_share)."""
        mine, extra, shared = self.validation_share(self.valid if batches is None else batches)  # or the test split
        return score(self.model, self.forward, mine, device=self.device, autocast=self.autocast, unscored=extra,
                     combine=self.summed if shared else None,
                     prepare=speedups.mark_dynamic if self.compile_watch is not None else None)

    def validation_share(self, batches: list[Batch]) -> tuple[list[Batch], list[Batch], bool]:
        """(the batches this process scores, those it runs unscored, whether the processes share
        them). With several processes each scores every N-th batch and evaluate() adds the sums
        up over the processes, which gives the one-process values; under FSDP2 a process with a
        batch fewer runs one more, unscored, so that every process gathers the weights as often.
        A Step that carries something from one validation batch to the next (a start_validation
        or finish_validation of its own: ELECTRA's sampler, Transformer-XL's memory) is validated
        whole by every process, as one process would."""
        ctx = self.dist
        if not ctx.enabled or not shares_validation(self.forward):
            return list(batches), [], False
        mine = list(batches[ctx.rank::ctx.world_size])
        rounds = -(-len(batches) // ctx.world_size)
        extra = list(batches[:rounds - len(mine)]) if ctx.strategy == "fsdp" else []
        return mine, extra, True

    def save_checkpoint(self) -> Path:
        """Every process calls this at the same step (FSDP2 gathers the shards); rank 0 writes."""
        self.agree_tokens()
        weights, optimizer_state = distributed.full_state(self.dist, self.model, self.optimizer)
        s = self.state
        elapsed = s.elapsed_s + time.perf_counter() - self.session_start
        metrics = {"train": s.train_metrics, "valid": s.valid_metrics}
        state = {"step": s.step, "tokens_seen": s.tokens_seen, "config": self.config.to_dict(),
                 "data_position": s.position.to_dict(), "epoch": s.position.epoch,
                 "elapsed_s": round(elapsed, 3), "probe_s": round(self.probe_s, 3), "metrics": metrics,
                 "valid_step": self.last_eval_step,  # the step the valid metrics were measured at (retention's best)
                 "family": self.config.family, "objectives": list(self.config.objectives),
                 "tokenizer_sha256": self.tokenizer_sha256,
                 # what the model card of an export says it was trained on, and on what (trainer.model_card)
                 "data_dir": str(Path(self.data_dir).resolve()), "hardware": self.hardware()}
        opt_state = {"optimizer": optimizer_state, "scheduler": self.scheduler.state_dict(),
                     "rng": checkpoints.capture_rng_state(), "data_position": s.position.to_dict(),
                     "step": s.step, "family_state": self.forward.state_dict()}
        folder = checkpoints.checkpoints_dir(self.out_dir) / checkpoints.checkpoint_name(s.step)
        if self.dist.is_main:
            folder = checkpoints.save_checkpoint(self.out_dir, s.step, model=distributed.unwrap(self.model),
                                                 tokenizer_dir=self.data_dir, state=state,
                                                 optimizer_state=opt_state, model_state=weights)
        self.dist.barrier()  # the checkpoint is whole before any process goes on (or ends)
        self.last_checkpoint, self.last_checkpoint_step = folder, s.step
        self.sink.checkpoint(s.step, folder, metrics)
        self.sink.log(f"Saved checkpoint {folder.name}.")
        if self.dist.is_main:
            self.retain()
        return folder

    def kept_besides(self) -> set[int]:
        """Steps retention keeps besides the last, the best by validation loss and the pinned ones
        (fine-tuning: early stopping's best)."""
        return set()

    def retain(self) -> None:
        """Retention after a save (trainer.training.retention): the older checkpoints it does not
        keep are removed and told to the sink (its optional checkpoints_removed(steps))."""
        try:
            done = retention.prune(self.out_dir, keep_last=int(getattr(self.config, "keep_last", 0)),
                                   also=self.kept_besides())
        except OSError as e:
            self.sink.log(f"Older checkpoints could not be removed ({e.strerror or e}); they stay on disk.")
            return
        if done.removed:
            tell = getattr(self.sink, "checkpoints_removed", None)
            if callable(tell):
                tell(done.removed)
            names = ", ".join(checkpoints.checkpoint_name(s) for s in done.removed)
            self.sink.log(f"Removed {names} (keep_last {self.config.keep_last}; the best and pinned ones stay).")

    def hardware(self) -> dict[str, Any]:
        """The device the run trains on, as the model card reports it: {"device", "name", "devices",
        "precision"} (the GPU's name, else the CPU's)."""
        name = torch.cuda.get_device_name() if self.device == "cuda" else flops._cpu_name()
        return {"device": self.device, "name": name, "devices": self.dist.world_size, "precision": self.precision}

    def cancel(self) -> TrainResult:
        """Stop with a checkpoint of this step, unless no loss was logged since the last checkpoint
        (stopped a step or a few after it, fewer than log_every): this one would repeat its losses
        beside it (issue 45, point 8: step 151 after 150), so the run keeps that one, and a resume
        trains those few steps again, to the same model."""
        step = self.state.step
        repeat = self.last_checkpoint is not None and self.last_log_step <= self.last_checkpoint_step
        if step > 0 and step != self.last_checkpoint_step and not repeat:
            self.save_checkpoint()
        since = step - self.last_checkpoint_step if self.last_checkpoint is not None else 0
        kept = (f"; the last checkpoint is {self.last_checkpoint.name}" if self.last_checkpoint else "")
        if since > 0 and repeat:
            kept += (f" ({since:,} step{'s' if since != 1 else ''} before, with the losses logged last; a resume "
                     f"trains {'them' if since != 1 else 'it'} again)")
        self.sink.log(f"Stopped at step {step}{kept}.")
        return TrainResult(step, "cancelled", self.last_checkpoint)

    def epochs_done(self) -> float:
        """Passes over the train split so far, from the data position (the metrics' "epoch")."""
        position = self.state.position
        return position.epoch + position.index / max(1, getattr(self.stream, "epoch_size", 0) or 1)

    def finish(self) -> TrainResult:
        step = self.state.step
        if step > self.first_step:
            self.maybe_eval(force=True)
            self.maybe_checkpoint(force=True)
        took = time.perf_counter() - self.session_start
        self.sink.log(f"Finished at step {step} after {format_duration(took)} "
                      f"({self.state.tokens_seen:,} tokens seen, {self.epochs_done():.2f} epochs).")
        return TrainResult(step, "succeeded", self.last_checkpoint)

    def log_start(self) -> None:
        cfg = self.config
        n_params = sum(p.numel() for p in self.model.parameters())
        if self.resumed_from is not None:
            self.sink.log(f"Resuming from {self.resumed_from.name} (step {self.state.step}).")
        names = " + ".join(o.upper() if len(o) <= 5 else objectives.get(o).label if o in objectives.REGISTRY else o
                           for o in cfg.objectives)
        target_len = getattr(self.stream.collator, "target_len", None)  # encoder-decoder objectives
        targets = f" (decoder targets up to {target_len})" if target_len else ""
        shared = (f" shared by the {self.dist.world_size} processes"
                  if self.dist.enabled and shares_validation(self.forward) else "")
        self.sink.log(
            f"Training {cfg.preset} ({n_params / 1e6:.2f}M parameters, vocabulary {self.model.config.vocab_size:,}) "
            f"with {names} on {self.where()}, {optimizer_label(cfg)}: "
            f"{cfg.max_steps:,} steps of {self.batch_label()} sequences of up to {cfg.seq_len} "
            f"tokens{targets}; {self.stream.epoch_size:,} training sequences per epoch, "
            f"{len(self.valid)} validation batches{shared}; {self.batches.label}."
        )
        if self.peak is not None and self.flops_per_token:
            self.sink.log(f"MFU counts {self.flops_per_token / 1e6:,.1f} MFLOP per token (forward and backward) "
                          f"against a peak of {self.peak.flops / 1e12:,.2f} TFLOP/s ({self.peak.source}).")
        elif not self.flops_per_token and (why := flops.missing_formula(self.model.config)):
            self.sink.log(f"MFU is not counted: {why}")


    def where(self) -> str:
        """"cpu (fp32)", or "2 cpu processes (fp32, DDP)" for several."""
        if not self.dist.enabled:
            return f"{self.device} ({self.precision})"
        return f"{self.dist.world_size} {self.device} processes ({self.precision}, {self.dist.strategy.upper()})"

    def batch_label(self) -> str:
        """"32 x 2" (batch x accumulation), with " x 4 processes = 256" when several train together."""
        cfg, n = self.config, self.dist.world_size
        label = f"{cfg.batch_size} x {cfg.grad_accum}"
        return label if n == 1 else f"{label} x {n} processes = {cfg.effective_batch(n):,}"


def shares_validation(step: Step) -> bool:
    """Whether processes may split a Step's validation batches: it scores each batch on its own
    (it keeps Step's start_validation and finish_validation)."""
    kind = type(step)
    return kind.start_validation is Step.start_validation and kind.finish_validation is Step.finish_validation


def optimizer_label(cfg: RunConfig) -> str:
    """E.g. "Adafactor at lr 0.01 (inverse_sqrt schedule)", for the start-of-training log line."""
    name = {"adamw": "AdamW", "adafactor": "Adafactor"}.get(cfg.optimizer, cfg.optimizer)
    return f"{name} at lr {cfg.lr:g} ({cfg.schedule} schedule)"


@torch.no_grad()
def score(model: nn.Module, forward: Step, batches: list[Batch], *, device: str,
          autocast: Any = contextlib.nullcontext(), unscored: Any = (),
          combine: Callable[[Tally], dict[str, float]] | None = None,
          prepare: Callable[[Batch], Batch] | None = None) -> dict[str, float]:
    """Every named loss of `forward` over `batches` (weighted per target / sequence / token), "loss"
    = their weighted sum as in training, the perplexities the family names (exp of the MLM or LM
    loss; ELMo's per direction), the ratios (accuracies, RTD precision and recall) and what the
    step adds at the end (a fine-tuning task's metrics). unscored: batches run but not counted
    (FSDP2: as many forwards as the other processes, each gathers the weights); combine: how a
    Tally becomes values over several processes (Loop.summed), else this process's own; prepare:
    what each batch goes through on its device first (a compiled model's mark_dynamic). The
    validation of a run (Loop.evaluate) and `python -m trainer evaluate` alike."""
    model.eval()
    forward.start_validation()
    tally = Tally(weighted=True)
    prepare = prepare or (lambda b: b)
    for batch in batches:
        batch = prepare(batch.to(device))
        with autocast:
            tally.add(forward(batch, train=False))
    for batch in unscored:
        with autocast:
            forward(prepare(batch.to(device)), train=False)
    model.train()
    parts = combine(tally) if combine is not None else tally.values()
    weights = forward.loss_weights
    values = {"loss": sum(weights.get(k, 1.0) * v for k, v in parts.items() if k.endswith("_loss"))}
    values.update(_ordered(parts))
    for name, source in forward.perplexities.items():
        if source in values:
            values[name] = math.exp(min(values[source], 50.0))
    values.update(forward.finish_validation())
    return values


def _ordered(values: dict[str, float]) -> dict[str, float]:
    """Losses first, then the ratios, each group in a fixed order (stable metric rows)."""
    losses = sorted((k for k in values if k.endswith("_loss")), key=_metric_rank)
    rest = sorted((k for k in values if not k.endswith("_loss")), key=_metric_rank)
    return {k: values[k] for k in losses + rest}


@functools.cache
def _metric_heads() -> tuple[str, ...]:
    """The metric families in the objectives' registered order: mlm, nsp, ..., lm, forward, backward."""
    return tuple(dict.fromkeys(name.split("_", 1)[0] for o in objectives.all() for name in o.metrics if "_" in name))


def _metric_rank(key: str) -> tuple[int, str]:
    head, heads = key.split("_", 1)[0], _metric_heads()
    return (heads.index(head) if head in heads else len(heads), key)


def memory_mb(device: str) -> float:
    """Peak CUDA memory allocated, or the process's resident memory on the CPU."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB

