"""The batches that fine-tuning's collators made before they encoded ahead (each batch tokenised
on its own, in the collator's __call__), kept as the reference that collate(examples,
encode(examples)) must equal tensor for tensor. Each function takes today's collator for its
settings and helpers (windows, ids, sources, pair, choice_row, encode_pieces: unchanged) and
builds the batch the way the old __call__ did."""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

IGNORE_INDEX = -100


def _pad(rows: Sequence[Sequence[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), value, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, :len(r)] = 1
    return ids, mask


def qa(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.qa import QABatch

    rows, row_example = [], []
    for i, ex in enumerate(examples):
        windows = c.windows(ex["question"], ex["context"], ex.get("answers") or ())
        rows += windows
        row_example += [i] * len(windows)
    T = max(len(w.ids) for w in rows)
    ids = torch.full((len(rows), T), c.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    types = torch.zeros((len(rows), T), dtype=torch.long)
    for r, w in enumerate(rows):
        ids[r, : len(w.ids)] = torch.tensor(w.ids)
        mask[r, : len(w.ids)] = 1
        types[r, : len(w.ids)] = torch.tensor(w.type_ids)
    starts = torch.tensor([w.start_position for w in rows], dtype=torch.long)
    ends = torch.tensor([w.end_position for w in rows], dtype=torch.long)
    return QABatch(ids, mask, types, starts, ends, row_example, [w.offsets for w in rows],
                   [ex["context"] for ex in examples], [[a["text"] for a in ex.get("answers") or ()] for ex in examples])


def t5(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.text2text import T5Batch

    sources = [ids[: c.seq_len - 1] + [c.eos_id] for ids in c.ids(c.source_texts(examples))]
    targets = [ids[: c.max_target - 1] + [c.eos_id] for ids in c.ids([ex["target"] for ex in examples])]
    input_ids, attention_mask = _pad(sources, c.pad_id)
    labels, _ = _pad(targets, IGNORE_INDEX)
    return T5Batch(input_ids, attention_mask, labels, [ex["input"] for ex in examples],
                   [ex["target"] for ex in examples], [ex.get("task", "") for ex in examples])


def label_words(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.mixing import as_text
    from trainer.finetune.text2text import T5Batch
    from trainer.finetune.text_classify import LabelWordBatch

    batch = t5(c, [as_text(ex, c.task) for ex in examples])
    gold = [float(ex["label"]) if c.task == "regression" else str(ex["label"]) for ex in examples]
    return LabelWordBatch(**{f.name: getattr(batch, f.name) for f in dataclasses.fields(T5Batch)}, gold=gold)


def unilm(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.text2text import UniLMSeq2SeqBatch

    sources = c.sources(examples)
    targets = [ids[: c.max_target - 1] + [c.sep_id] for ids in c.ids([ex["target"] for ex in examples])]
    rows, labels = [], []
    for source, target in zip(sources, targets):
        n = len(target)
        picked = c.rng.random(n) < c.mask_prob
        if not picked.any():
            picked[c.rng.integers(n)] = True
        masked = [c.mask_id if p else t for t, p in zip(target, picked)]
        rows.append(source + masked)
        labels.append([IGNORE_INDEX] * len(source) + [t if p else IGNORE_INDEX for t, p in zip(target, picked)])
    input_ids, attention_mask = _pad(rows, c.pad_id)
    mlm_labels, _ = _pad(labels, IGNORE_INDEX)
    lengths = torch.tensor([len(s) for s in sources], dtype=torch.long)
    types = (torch.arange(input_ids.shape[1])[None, :] >= lengths[:, None]).long() * attention_mask
    source_ids, source_mask = _pad(sources, c.pad_id)
    return UniLMSeq2SeqBatch(input_ids, attention_mask, types, mlm_labels, lengths, source_ids, source_mask,
                             [ex["input"] for ex in examples], [ex["target"] for ex in examples],
                             [ex.get("task", "") for ex in examples])


def sft(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune import chat
    from trainer.finetune.sft import SFTBatch

    rows, prompts, asks, replies = [], [], [], []
    for ex in examples:
        messages = chat.messages_of(ex)
        ids, labels = c.encode_pieces(chat.render(messages, c.template))
        rows.append((ids[: c.seq_len], labels[: c.seq_len]))
        prompts.append(c.prompt_ids(messages))
        last = chat.last_reply(messages)
        asked = [m["content"] for m in messages[:last] if m["role"] == "user"]
        asks.append(asked[-1] if asked else "")
        replies.append(messages[last]["content"])
    T = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), T), c.pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), T), dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE_INDEX, dtype=torch.long)
    for i, (ids, row_labels) in enumerate(rows):
        input_ids[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, :len(ids)] = 1
        labels[i, :len(ids)] = torch.tensor(row_labels, dtype=torch.long)
    return SFTBatch(input_ids, attention_mask, labels, prompts, asks, replies)


def _gpt1_tensors(rows: list[list[list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    K, T = len(rows[0]), max(len(r) for row in rows for r in row)
    ids = torch.zeros((len(rows), K, T), dtype=torch.long)
    mask = torch.zeros((len(rows), K, T), dtype=torch.long)
    for i, row in enumerate(rows):
        for k, r in enumerate(row):
            ids[i, k, :len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, k, :len(r)] = 1
    return ids, mask


def gpt1(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.gpt1 import GPT1Batch

    if "text" in examples[0]:
        rows = [[[c.start, *ids[: c.seq_len - 2], c.extract]] for ids in c.ids([ex["text"] for ex in examples])]
    else:
        first, second = c.ids([ex["sentence1"] for ex in examples]), c.ids([ex["sentence2"] for ex in examples])
        if c.problem == "regression":
            rows = [[c.pair(a, b), c.pair(b, a)] for a, b in zip(first, second)]
        else:
            rows = [[c.pair(a, b)] for a, b in zip(first, second)]
    ids, mask = _gpt1_tensors(rows)
    if len(rows[0]) == 1:
        ids, mask = ids[:, 0], mask[:, 0]
    return GPT1Batch(ids, mask, c.labels_of(examples))


def gpt1_choice(c: Any, examples: Sequence[dict]) -> Any:
    from trainer.finetune.gpt1 import GPT1Batch

    k = len(examples[0]["choices"])
    firsts = c.ids([" ".join(ex[key] for key in ("context", "question") if key in ex) for ex in examples])
    choices = c.ids([ch for ex in examples for ch in ex["choices"]])
    rows = [[c.choice_row(first, choices[i * k + j]) for j in range(k)] for i, first in enumerate(firsts)]
    ids, mask = _gpt1_tensors(rows)
    return GPT1Batch(ids, mask, torch.tensor([int(ex["label"]) for ex in examples], dtype=torch.long))
