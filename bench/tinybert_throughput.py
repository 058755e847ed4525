"""TinyBERT's distillation throughput: the student's training step under TinyBERT's two phases
(layer distillation; prediction-layer distillation) against the same student trained on plain
MLM, on the same random masked batches, so the ratio is what distilling costs over training the
student alone (the teacher's forward pass, the attention-score hooks and the losses).

    .venv/bin/python bench/tinybert_throughput.py                          # bert-mini teacher, 2-layer student
    .venv/bin/python bench/tinybert_throughput.py --teacher bert-base --student tinybert-4 --device cuda

transformers has no TinyBERT trainer, so there is no outside counterpart: the ratio is ours
against ours. Steps alternate between the three set-ups so that machine noise hits all alike.
Prints tokens/s for each and the ratios.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models_lib.families import presets  # noqa: E402
from models_lib.families.bert import BertForPreTraining  # noqa: E402
from models_lib.families.tinybert import TinyBertForPreTraining  # noqa: E402
from trainer.objectives.encoder import MaskedBatch  # noqa: E402
from trainer.objectives.tinybert import TinyBertStep  # noqa: E402


def batches(n: int, batch_size: int, seq_len: int, vocab: int, seed: int = 0) -> list[MaskedBatch]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, vocab, (batch_size, seq_len), generator=g)
        picked = torch.rand(batch_size, seq_len, generator=g) < 0.15
        labels = torch.where(picked, ids, torch.full_like(ids, -100))
        out.append(MaskedBatch(ids.masked_fill(picked, 4), torch.ones_like(ids), torch.zeros_like(ids), labels))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="bert-mini")
    p.add_argument("--student", default="tinybert-mini")
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    teacher = BertForPreTraining(presets.get(args.teacher, vocab_size=args.vocab)).to(args.device).eval()
    teacher.requires_grad_(False)
    wide = teacher.config.hidden_size
    student_cfg = presets.get(args.student, vocab_size=args.vocab, num_heads=teacher.config.num_heads,
                              teacher_hidden_size=wide)
    setups = {}
    for name, share in (("plain MLM", None), ("layer distillation", 0.0), ("prediction distillation", 1.0)):
        torch.manual_seed(1)
        model = TinyBertForPreTraining(student_cfg).to(args.device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step = None
        if share is not None:
            cfg = SimpleNamespace(grad_accum=1, max_steps=10**9, tinybert_prediction_share=share,
                                  tinybert_temperature=1.0)
            step = TinyBertStep(cfg, model, args.device, teacher)
        setups[name] = (model, optimizer, step)
    data = [b.to(args.device) for b in batches(4, args.batch_size, args.seq_len, args.vocab)]
    times: dict[str, list[float]] = {name: [] for name in setups}
    for i in range(args.warmup + args.steps):
        batch = data[i % len(data)]
        for name, (model, optimizer, step) in setups.items():
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = (model(batch.input_ids, batch.attention_mask, batch.token_type_ids, batch.mlm_labels).mlm_loss
                    if step is None else step(batch, train=True).loss)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
    tokens = args.batch_size * args.seq_len
    s = student_cfg
    t = teacher.config
    print(f"teacher {args.teacher} (L{t.num_layers} H{t.hidden_size} A{t.num_heads}), student {args.student} "
          f"(L{s.num_layers} H{s.hidden_size} A{s.num_heads} FFN{s.intermediate_size}), batch {args.batch_size} x "
          f"{args.seq_len}, {args.steps} steps on {args.device}, {torch.get_num_threads()} threads")
    base = tokens / statistics.median(times["plain MLM"])
    for name, ts in times.items():
        rate = tokens / statistics.median(ts)
        print(f"  {name:<26} {rate:10.0f} tokens/s   {rate / base:5.2f}x plain MLM")


if __name__ == "__main__":
    main()
