"""Training throughput: our models against transformers' on the same configuration and batches.

    .venv/bin/python bench/train_throughput.py --model bert-mini --steps 20
    .venv/bin/python bench/train_throughput.py --model bert-base --device cuda --precision bf16
    .venv/bin/python bench/train_throughput.py --model gpt-mini --compile --only ours   # eager vs torch.compile

Both models start from the same weights (ours exported and loaded into transformers), see
the same random batches (15% of positions labelled for MLM, random NSP labels), and train
with AdamW. Steps alternate between the models so that machine noise hits all alike.
Prints tokens/s for each and the ratio ours/theirs, and MFU beside each: the family's FLOPs per
token (trainer/training/flops.py, the formula the trainer's dashboard uses) x tokens/s over the
device's peak (the GPU's datasheet figure, or a measured matmul peak on the CPU).
With --compile, a third model, ours under torch.compile (a copy with the same weights), trains
on the same batches too, and the compiled/eager ratio is printed; the warm-up steps (at least
one per distinct batch) include the compilation.

T5 trains on span-corruption-shaped batches (inputs of --seq-len tokens, targets of
114/512 of that, T5's own ratio at noise density 0.15 and mean span 3); its tokens/s count
encoder and decoder tokens. GPT trains causal LM on full rows. Both compare with
T5ForConditionalGeneration / GPT2LMHeadModel loaded from our exported weights.

XLNet trains the permutation LM on its shapes (T // 6 targets per row in a random factorisation
order, both streams, no memory) against XLNetLMHeadModel. Transformer-XL (transfo-xl-*) has no
transformers counterpart any more: ours alone is timed, each step reading the previous step's
memory.

A new family is one more `Entry` in ARCHITECTURES. ELECTRA has no joint
model in transformers; its counterpart is ElectraForMaskedLM + ElectraForPreTraining wired
together here the way ELECTRA trains (shared embeddings, sampled replacements, loss
mlm + 50 * rtd).
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the repo

from models_lib import hf  # noqa: E402
from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining  # noqa: E402
from models_lib.families.bert import BERT_PRESETS, BertConfig, BertForPreTraining  # noqa: E402
from models_lib.families.electra import ElectraForPreTraining  # noqa: E402
from models_lib.families.roberta import RobertaForPreTraining  # noqa: E402
from trainer.training import flops  # noqa: E402  (torch only: no Django needed)

Batch = dict[str, torch.Tensor]


@dataclass
class Entry:
    presets: dict                                     # preset name -> config fields
    build_ours: Callable[..., torch.nn.Module]  # (preset, vocab, **config overrides) -> our model
    build_theirs: Callable[[torch.nn.Module], torch.nn.Module]  # our model -> transformers model, same weights
    make_batch: Callable[[int, int, int, torch.Generator], Batch]  # (B, T, vocab, generator) -> batch
    ours_loss: Callable[[torch.nn.Module, Batch], torch.Tensor]
    theirs_loss: Callable[[torch.nn.Module, Batch], torch.Tensor]
    tokens_per_row: Callable[[int], int] = lambda T: T  # tokens one row of length T counts for tokens/s
    objectives: tuple[str, ...] = ("mlm", "nsp")      # the heads that train (for the FLOPs formula)


# --- BERT --------------------------------------------------------------------------------------

def bert_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    return BertForPreTraining(BertConfig.from_preset(preset, vocab_size=vocab, **overrides))


def theirs_from(ours: torch.nn.Module, class_name: str, **export) -> torch.nn.Module:
    """The transformers model `class_name` with our model's weights (through our exporter)."""
    import transformers

    with tempfile.TemporaryDirectory() as folder:
        hf.to_pretrained(ours, folder, **export)
        return getattr(transformers, class_name).from_pretrained(folder)


def bert_theirs(ours: torch.nn.Module) -> torch.nn.Module:
    return theirs_from(ours, "BertForPreTraining")


def mlm_nsp_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    input_ids = torch.randint(5, vocab, (B, T), generator=g)
    token_type_ids = torch.zeros(B, T, dtype=torch.long)
    token_type_ids[:, T // 2:] = 1  # segment B is the second half
    chosen = torch.rand(B, T, generator=g) < 0.15
    chosen[:, 0] = False  # never [CLS]
    mlm_labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
    return dict(input_ids=input_ids, attention_mask=torch.ones(B, T, dtype=torch.long),
                token_type_ids=token_type_ids, mlm_labels=mlm_labels,
                nsp_labels=torch.randint(0, 2, (B,), generator=g))


def bert_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], b["token_type_ids"],
                 mlm_labels=b["mlm_labels"], nsp_labels=b["nsp_labels"]).loss


def bert_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                 labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"]).loss


# --- RoBERTa (MLM only) ---------------------------------------------------------------------------

def roberta_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    return RobertaForPreTraining(presets.get(preset, vocab_size=vocab, **overrides))


def mlm_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    batch = mlm_nsp_batch(B, T, vocab, g)
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], mlm_labels=batch["mlm_labels"])


def roberta_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], mlm_labels=b["mlm_labels"]).loss


def roberta_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["mlm_labels"]).loss


# --- ALBERT (MLM + SOP) ----------------------------------------------------------------------------

def albert_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    return AlbertForPreTraining(presets.get(preset, vocab_size=vocab, **overrides))


def albert_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], b["token_type_ids"],
                 mlm_labels=b["mlm_labels"], sop_labels=b["nsp_labels"]).loss


def albert_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"],
                 labels=b["mlm_labels"], sentence_order_label=b["nsp_labels"]).loss


# --- ELECTRA (generator MLM + 50 * discriminator RTD) --------------------------------------------

def electra_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    return ElectraForPreTraining(presets.get(preset, vocab_size=vocab, **overrides))


class TransformersElectra(torch.nn.Module):
    """transformers' generator and discriminator trained jointly, as ELECTRA does."""

    def __init__(self, generator: torch.nn.Module, discriminator: torch.nn.Module):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        # Share the embeddings module and re-tie the generator's decoder to the shared table.
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask, token_type_ids, labels):
        gen = self.generator(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             labels=labels)
        selected = labels != -100
        with torch.no_grad():
            probs = torch.softmax(gen.logits[selected].float(), dim=-1)
            sampled = torch.multinomial(probs, 1).squeeze(1)
            corrupted = input_ids.masked_scatter(selected, sampled)
            rtd = (corrupted != torch.where(selected, labels, input_ids)).long()
        disc = self.discriminator(input_ids=corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                  labels=rtd)
        return gen.loss + 50.0 * disc.loss


def electra_theirs(ours: torch.nn.Module) -> torch.nn.Module:
    return TransformersElectra(theirs_from(ours, "ElectraForMaskedLM", part="generator"),
                               theirs_from(ours, "ElectraForPreTraining", part="discriminator"))


def electra_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], b["token_type_ids"], mlm_labels=b["mlm_labels"]).loss


def electra_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["mlm_labels"])


# --- T5 (span-corruption shapes) and GPT (causal LM) ------------------------------------------

T5_TARGET_RATIO = 114 / 512  # T5: 512 input tokens -> 114 target tokens at noise 0.15, mean span 3


def t5_target_len(T: int) -> int:
    return max(2, round(T * T5_TARGET_RATIO))


def t5_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config.from_preset(preset, vocab_size=vocab, **overrides))


def t5_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    L = t5_target_len(T)
    labels = torch.randint(5, vocab, (B, L), generator=g)
    return dict(input_ids=torch.randint(5, vocab, (B, T), generator=g),
                attention_mask=torch.ones(B, T, dtype=torch.long), labels=labels)


def seq2seq_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], labels=b["labels"]).loss


def seq2seq_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]).loss


def gpt_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel

    return GPTLMHeadModel(GPTConfig.from_preset(preset, vocab_size=vocab, **overrides))


def clm_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    ids = torch.randint(5, vocab, (B, T), generator=g)
    return dict(input_ids=ids, attention_mask=torch.ones(B, T, dtype=torch.long), labels=ids)


def clm_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    return model(b["input_ids"], b["attention_mask"], labels=b["labels"]).loss


# --- XLNet (permutation LM, both streams) and Transformer-XL (segments with memory) ----------------

def xlnet_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel

    # The batches carry no memory, so the model is timed without one; mem_len 0 tells the FLOPs
    # formula (which counts a full memory otherwise) the same, and MFU is then exact.
    overrides.setdefault("mem_len", 0)
    return XLNetLMHeadModel(XLNetConfig.from_preset(preset, vocab_size=vocab, **overrides))


def plm_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    """XLNet's training shapes: T // 6 targets per row (partial prediction, K = 6) last in a random
    factorisation order, every other token first; segments A | B and <cls> as type 2."""
    P = max(1, T // 6)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:] = 1
    types[:, -1] = 2
    perm = torch.zeros(B, T, T)
    mapping = torch.zeros(B, P, T)
    for b in range(B):
        targets = torch.randperm(T - 1, generator=g)[:P]  # in their factorisation order
        rank = torch.full((T,), -1)
        rank[targets] = torch.arange(P)
        is_target = rank >= 0
        perm[b] = (is_target[None, :] & (rank[None, :] >= rank[:, None])).float()
        mapping[b, torch.arange(P), targets] = 1.0
    labels = torch.einsum("bpt,bt->bp", mapping, ids.float()).long()
    return dict(input_ids=ids, token_type_ids=types, perm_mask=perm, target_mapping=mapping, labels=labels,
                target_positions=mapping.argmax(-1))


def xlnet_ours_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """As training calls it: the targets as positions (the query stream for the targets only)."""
    return model(b["input_ids"], token_type_ids=b["token_type_ids"], perm_mask=b["perm_mask"],
                 target_positions=b["target_positions"], labels=b["labels"]).loss


def xlnet_theirs_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """The same targets as one-hot target_mapping rows, no memory."""
    return model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], perm_mask=b["perm_mask"],
                 target_mapping=b["target_mapping"], labels=b["labels"], use_mems=False).loss


def transfo_xl_ours(preset: str, vocab: int, **overrides) -> torch.nn.Module:
    from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel

    return TransfoXLLMHeadModel(TransfoXLConfig.from_preset(preset, vocab_size=vocab, **overrides))


def no_counterpart(ours: torch.nn.Module) -> None:
    """transformers no longer ships Transformer-XL: ours alone is timed."""
    return None


def segment_batch(B: int, T: int, vocab: int, g: torch.Generator) -> Batch:
    stream = torch.randint(5, vocab, (B, T + 1), generator=g)
    return dict(input_ids=stream[:, :-1], labels=stream[:, 1:])


def transfo_xl_loss(model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """Each step reads the previous step's memory (mem_len states per layer), as training does."""
    mems = getattr(model, "bench_mems", None)
    out = model(b["input_ids"], labels=b["labels"], mems=mems, use_mems=True)
    model.bench_mems = out.mems
    return out.loss


def _lazy_presets(module: str, table: str) -> dict:
    import importlib

    try:
        return getattr(importlib.import_module(module), table)
    except ImportError:
        return {}


ARCHITECTURES: dict[str, Entry] = {
    "bert": Entry(BERT_PRESETS, bert_ours, bert_theirs, mlm_nsp_batch, bert_ours_loss, bert_theirs_loss),
    "roberta": Entry(presets.ROBERTA_PRESETS, roberta_ours, lambda m: theirs_from(m, "RobertaForMaskedLM"),
                     mlm_batch, roberta_ours_loss, roberta_theirs_loss, objectives=("mlm",)),
    "albert": Entry(presets.ALBERT_PRESETS, albert_ours, lambda m: theirs_from(m, "AlbertForPreTraining"),
                    mlm_nsp_batch, albert_ours_loss, albert_theirs_loss, objectives=("mlm", "sop")),
    "electra": Entry(presets.ELECTRA_PRESETS, electra_ours, electra_theirs, mlm_nsp_batch, electra_ours_loss,
                     electra_theirs_loss, objectives=("mlm", "rtd")),
    "t5": Entry(_lazy_presets("models_lib.families.t5", "T5_PRESETS"), t5_ours,
                lambda m: theirs_from(m, "T5ForConditionalGeneration"), t5_batch, seq2seq_ours_loss,
                seq2seq_theirs_loss, tokens_per_row=lambda T: T + t5_target_len(T), objectives=("span_corruption",)),
    "gpt": Entry(_lazy_presets("models_lib.families.gpt", "GPT_PRESETS"), gpt_ours, lambda m: theirs_from(m, "GPT2LMHeadModel"),
                 clm_batch, clm_ours_loss, seq2seq_theirs_loss, objectives=("clm",)),
    "xlnet": Entry(_lazy_presets("models_lib.families.xlnet", "XLNET_PRESETS"), xlnet_ours,
                   lambda m: theirs_from(m, "XLNetLMHeadModel"), plm_batch, xlnet_ours_loss,
                   xlnet_theirs_loss),
    "transfo_xl": Entry(_lazy_presets("models_lib.families.transfo_xl", "TRANSFO_XL_PRESETS"), transfo_xl_ours,
                        no_counterpart, segment_batch, transfo_xl_loss, transfo_xl_loss),
}


# --- harness -----------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bert-mini", help="a preset name, e.g. bert-mini, bert-base")
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=20, help="timed steps per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: autocast (CUDA); fp32 runs with TF32 matmuls on CUDA, as the trainer does")
    p.add_argument("--bf16", action="store_true", help="the same as --precision bf16")
    p.add_argument("--compile", action="store_true",
                   help="also train a torch.compile'd copy of ours on the same batches; print compiled/eager")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--peak-flops", type=float, default=None,
                   help="device peak FLOP/s for MFU (default: the GPU's datasheet figure, or measured on the CPU)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = leave as is)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["ours", "theirs"], help="time one implementation only (with --compile, "
                   "--only ours compares eager and compiled without transformers)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timed steps, N more steps of ours (ours compiled with --compile) under "
                        "torch.profiler: device time per step by category, the top kernels (ops on the CPU), "
                        "counts of casts and cats; also $OUT/profile-MODEL-eager|compiled.json when $OUT is set")
    p.add_argument("--profile-trace", type=Path, default=None, metavar="PATH",
                   help="with --profile: write the profiled steps' Chrome trace there (.json, or .json.gz)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set version=1.1 (integers and true/false parse; the rest is text)")
    args = p.parse_args()
    if args.bf16:
        args.precision = "bf16"
    args.bf16 = args.precision == "bf16"
    if args.profile < 0 or (args.profile and args.only == "theirs"):
        p.error("--profile N profiles N (> 0) steps of ours: not with --only theirs")
    if args.profile_trace and not args.profile:
        p.error("--profile-trace needs --profile N")
    return args


def config_overrides(pairs: list[str]) -> dict:
    """--set FIELD=VALUE pairs as config overrides: integers and true/false parse, anything else
    (e.g. version=1.1, T5's version string) stays text."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set takes FIELD=VALUE, not {pair!r}")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        out[name] = parsed if isinstance(parsed, (bool, int)) else value
    return out


def find_entry(preset: str) -> Entry:
    for entry in ARCHITECTURES.values():
        if preset in entry.presets:
            return entry
    names = [n for e in ARCHITECTURES.values() for n in e.presets]
    raise SystemExit(f"unknown model {preset!r}; choose one of {', '.join(names)}")


class Runner:
    """One model with its optimizer; `step(batch)` trains once and returns (seconds, loss)."""

    def __init__(self, name: str, model: torch.nn.Module, loss_fn, args: argparse.Namespace):
        self.name, self.model, self.loss_fn, self.args = name, model.to(args.device).train(), loss_fn, args
        # fused AdamW on CUDA, as the trainer's (trainer/training/optim.py)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                                           fused=True if args.device == "cuda" else None)
        self.params = sum(p.numel() for p in model.parameters())  # shared/tied tensors counted once
        self.seconds = 0.0
        self.losses: list[float] = []

    def sync(self) -> None:
        if self.args.device == "cuda":
            torch.cuda.synchronize()

    def train(self, batch: Batch) -> torch.Tensor:
        """Forward, backward, optimizer step: what a step times (and --profile profiles)."""
        with torch.autocast(self.args.device, dtype=torch.bfloat16, enabled=self.args.bf16):
            loss = self.loss_fn(self.model, batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def step(self, batch: Batch, timed: bool) -> None:
        self.sync()
        start = time.perf_counter()
        loss = self.train(batch)
        self.sync()
        if timed:
            self.seconds += time.perf_counter() - start
        self.losses.append(loss.item())


def profile(runner: Runner, batches: list[Batch], first_step: int, args: argparse.Namespace) -> dict:
    """args.profile more steps of `runner` under torch.profiler (CUDA kernels on a GPU, CPU ops
    otherwise), after one profiled warm-up step that is left out (the profiler's own start-up lands
    there); prints the time per step by category, the top kernels and the counts, and returns them."""
    from torch.profiler import ProfilerActivity, schedule
    from torch.profiler import profile as torch_profile

    import kernel_profile

    n = args.profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    runner.sync()
    with torch_profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=n, repeat=1)) as prof:
        for k in range(n + 1):
            if k == 1:  # the recorded steps start here
                start = time.perf_counter()
            torch.manual_seed(args.seed + first_step + k)
            runner.train(batches[(first_step + k) % len(batches)])
            if k == n:
                runner.sync()
                wall_ms = (time.perf_counter() - start) / n * 1000
            prof.step()
    if args.profile_trace:
        prof.export_chrome_trace(str(args.profile_trace))
    summary = kernel_profile.summarise(kernel_profile.units_from_events(prof.events(), args.device), n)
    unit = "kernel" if args.device == "cuda" else "op"
    timed_ms = runner.seconds / args.steps * 1000 if args.steps else None
    total = summary["total_ms_per_step"]
    print(f"profile of {runner.name}: {n} steps under torch.profiler (after 1 left out), "
          f"{'CUDA kernels: device time' if args.device == 'cuda' else 'CPU ops: their own time'} per step")
    print(f"  {total:.2f} ms/step of {unit}s = {total / wall_ms:.0%} of the {wall_ms:.2f} ms wall per profiled step"
          f"{f' (timed without the profiler: {timed_ms:.2f} ms/step)' if timed_ms else ''}")
    for line in kernel_profile.format_summary(summary, unit):
        print(line)
    if summary["unrecognised"]:
        print(f"  names the classifier does not know ({len(summary['unrecognised'])}, in \"other\"): "
              + "; ".join(kernel_profile.short_name(n, 60) for n in summary["unrecognised"][:10]))
    return {**summary, "unit": unit, "wall_ms_per_step": wall_ms, "timed_ms_per_step": timed_ms}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # both implementations get the same setting
        torch.backends.cudnn.allow_tf32 = True
    entry = find_entry(args.model)

    torch.manual_seed(args.seed)
    ours = entry.build_ours(args.model, args.vocab, **config_overrides(args.set))
    theirs = entry.build_theirs(ours) if args.only != "ours" else None  # built on the CPU, same weights
    compiled = None
    if args.compile:
        logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # graph-break notes, not results
        compiled = copy.deepcopy(ours)  # the same weights, compiled in place (its own optimizer)
        compiled.compile(backend=args.compile_backend)
        args.warmup = max(args.warmup, 5)  # compiling (and recompiling for each batch shape) is not timed
    runners = []
    if args.only != "theirs":
        runners.append(Runner("ours", ours, entry.ours_loss, args))
    if compiled is not None:
        runners.append(Runner("ours compiled", compiled, entry.ours_loss, args))
    if theirs is not None:
        runners.append(Runner("transformers", theirs, entry.theirs_loss, args))
    flops_per_token = flops.training_flops_per_token(ours.config, flops.Workload(
        seq_len=args.seq_len, target_len=t5_target_len(args.seq_len) if entry is ARCHITECTURES["t5"] else 0,
        predicted=0.15 * (args.seq_len - 1) / args.seq_len, objectives=entry.objectives))
    peak = (flops.Peak(args.peak_flops, "--peak-flops") if args.peak_flops
            else flops.peak_for(args.device, args.precision))

    g = torch.Generator().manual_seed(args.seed + 1)
    batches = [{k: v.to(args.device) for k, v in entry.make_batch(args.batch_size, args.seq_len, args.vocab, g).items()}
               for _ in range(4)]
    print(f"{args.model}: {runners[0].params / 1e6:.1f}M parameters, batch {args.batch_size} x {args.seq_len}"
          f"{f' (+ {t5_target_len(args.seq_len)} target tokens)' if entry is ARCHITECTURES['t5'] else ''}, "
          f"vocab {args.vocab}, device {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''} {args.precision}, "
          f"threads {torch.get_num_threads()}, {args.warmup} warmup + {args.steps} timed steps each")
    if flops_per_token:
        print(f"MFU: {flops_per_token / 1e6:,.1f} MFLOP per token (trainer/training/flops.py) over a peak of "
              f"{peak.flops / 1e12:,.2f} TFLOP/s ({peak.source})")
    else:
        print(f"MFU: trainer/training/flops.py has no FLOPs formula for {ours.config.family}")

    for i in range(args.warmup + args.steps):
        batch = batches[i % len(batches)]
        # Alternate who goes first, so neither always runs on a cache the other warmed.
        for runner in (runners if i % 2 == 0 else runners[::-1]):
            torch.manual_seed(args.seed + i)  # same dropout stream for both
            runner.step(batch, timed=i >= args.warmup)

    tokens = args.steps * args.batch_size * entry.tokens_per_row(args.seq_len)
    rates = {}
    for r in runners:
        rates[r.name] = tokens / r.seconds
        mfu = flops.mfu(flops_per_token, rates[r.name], peak)
        print(f"{r.name:>13}: {rates[r.name]:10.0f} tokens/s  MFU {'n/a' if mfu is None else f'{mfu:.1%}':>6}  ({r.seconds / args.steps * 1000:.0f} ms/step; "
              f"loss first {r.losses[0]:.3f} last {r.losses[-1]:.3f})")
    if "ours" in rates and "transformers" in rates:
        print(f"ratio ours/transformers: {rates['ours'] / rates['transformers']:.2f}x")
    if "ours" in rates and "ours compiled" in rates:
        print(f"ratio compiled/eager (ours): {rates['ours compiled'] / rates['ours']:.2f}x")
    if args.profile:
        runner = next(r for r in runners if r.name == ("ours compiled" if compiled is not None else "ours"))
        figures = profile(runner, batches, args.warmup + args.steps, args)
        if os.environ.get("OUT"):
            path = Path(os.environ["OUT"]) / f"profile-{args.model}-{'compiled' if compiled is not None else 'eager'}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({
                "model": args.model, "batch_size": args.batch_size, "seq_len": args.seq_len, "vocab": args.vocab,
                "device": args.device, "device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                "precision": args.precision, "compiled": compiled is not None,
                "compile_backend": args.compile_backend if compiled is not None else None,
                "torch": torch.__version__, "set": args.set, **figures}, indent=1), encoding="utf-8")
            print(f"profile figures written to {path}")


if __name__ == "__main__":
    main()
