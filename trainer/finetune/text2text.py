"""Text to text as a fine-tuning task: an input text and the text to produce (summaries,
translations, any task written as text), for the two families that write text from text.

T5 (Raffel et al. 2020). The encoder reads "prefix input </s>" (`source_prefix`, T5's task
prefix such as "summarize: "), cut to max_length; the decoder is trained by teacher forcing on
"target </s>" (cut to max_target_length), its inputs the target shifted right behind the decoder
start token, cross-entropy on every target token (label smoothing applies).

UniLM (Dong et al. 2019, section 2.3 and 3.2). One encoder reads "[CLS] input [SEP] target [SEP]"
under the seq2seq self-attention mask (models_lib.core.masks.seq2seq): the source sees the whole
source, each target token the source and the target up to itself; segment ids 0 for the source,
1 for the target. As in the paper's fine-tuning, a share of the target tokens (target_mask_prob,
0.7 there; at least one per example; the final [SEP] may be one, so the model learns to stop)
is replaced by [MASK] and predicted. The target gets max_target_length tokens (its [SEP]
included) and the source what is left of max_length, at training and at generation alike.

Evaluation. Each validation (and the test split) generates every example's output (greedy, or
beam search with num_beams) up to max_target_length tokens, with the family's own decoding
(T5's encoder-decoder cache, UniLM's appended [MASK]), decodes it with the checkpoint's
tokenizer and scores it against the reference texts (trainer.finetune.metrics.text_to_text_metrics:
ROUGE-1/2/L, BLEU, exact match); the first `samples_shown` examples' outputs go to the log.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from trainer.errors import ConfigError
from trainer.finetune import baselines as baseline_fns
from trainer.finetune import metrics as metric_fns
from trainer.finetune.settings import Setting
from trainer.finetune.tasks import IGNORE_INDEX, EncodesAhead, Task, TaskStep
from trainer.objectives.base import Batch, StepOutput

FAMILIES = ("t5", "unilm")

# The settings text to text offers (trainer.finetune.settings); T5's label-word classification and
# regression (text_classify) generate too, so they share them all.
SOURCE_PREFIX = Setting("source_prefix", "Task prefix", "Put before every input, as T5's task prefixes "
                        "(“summarize: ”, “sst2 sentence: ”).", section="task")
TEXT_SETTINGS = (
    SOURCE_PREFIX,
    Setting("max_target_length", "Target length (tokens)", "Target tokens kept for training and generated when "
            "scoring.", advanced=True, section="task"),
    Setting("target_mask_prob", "Masked target share", "UniLM: the share of target tokens masked and predicted per "
            "example (0.7 in the paper).", advanced=True, section="task", families=("unilm",)),
    Setting("num_beams", "Beams", "Beam search width when generating for the scores (1: greedy).", advanced=True,
            section="task"),
    Setting("samples_shown", "Samples shown", "Validation examples whose generated text each evaluation writes to "
            "the log.", advanced=True, section="task"),
)
UNILM_SOURCE_ROOM = 4  # the fewest source tokens UniLM's max_length must leave beside the target
SAMPLE_CHARS = 160


# ---------------------------------------------------------------------------- batches
@dataclass
class T5Batch(Batch):
    """Encoder inputs and the decoder's targets."""

    labels: torch.Tensor   # (B, L) "target </s>" ids, -100 on padding
    sources: list[str]     # the input texts (as the dataset has them), for the log's samples
    targets: list[str]     # the reference texts
    tasks: list[str]       # each example's task in a multi-task run (trainer.finetune.mixing); "" otherwise

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum()) + int((self.labels != IGNORE_INDEX).sum())

    @property
    def n_positions(self) -> int:
        return int(self.input_ids.numel()) + int(self.labels.numel())


@dataclass
class UniLMSeq2SeqBatch(Batch):
    """"[CLS] source [SEP] target [SEP]" with masked target tokens, and the sources alone for generation."""

    token_type_ids: torch.Tensor  # (B, T) 0 source, 1 target
    mlm_labels: torch.Tensor      # (B, T) the original token where a target token is masked, else -100
    source_lengths: torch.Tensor  # (B,) tokens of "[CLS] source [SEP]"
    source_ids: torch.Tensor      # (B, S) "[CLS] source [SEP]", padded
    source_mask: torch.Tensor     # (B, S) 1/0
    sources: list[str]
    targets: list[str]
    tasks: list[str]

    def model_inputs(self) -> dict[str, torch.Tensor]:
        from models_lib.core import masks

        return {"input_ids": self.input_ids, "attention_mask": masks.seq2seq(self.attention_mask, self.source_lengths),
                "token_type_ids": self.token_type_ids, "mlm_labels": self.mlm_labels}


def _pad(rows: Sequence[Sequence[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), right-padded to the longest row (rows: lists or arrays of ids)."""
    T = max(len(r) for r in rows)
    ids = np.full((len(rows), T), value, dtype=np.int64)
    mask = np.zeros((len(rows), T), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


@dataclass(frozen=True)
class EncodedText:
    """One text-to-text example between encode and collate (EncodesAhead): its source and target
    ids as the batch holds them (T5: "prefix input </s>" and "target </s>"; UniLM: "[CLS] prefix
    input [SEP]" and "target [SEP]", before masking).

    Its length, what length-grouped batches sort by, is source + target tokens. For UniLM that is
    its row. For T5 the encoder's inputs and the decoder's targets are padded apart (pad_rows),
    so a batch costs its longest source plus its longest target per row; sorting by the sum puts
    examples of similar total work together and, as the targets of most datasets vary far less
    than the inputs (label words, short summaries), sorts by the input where that is what varies."""

    source: np.ndarray
    target: np.ndarray
    one_row: bool = False  # UniLM: source and target are one row

    def __len__(self) -> int:
        return len(self.source) + len(self.target)

    @property
    def pad_rows(self) -> tuple[tuple[int, ...], ...]:
        if self.one_row:
            return ((len(self),),)
        return (len(self.source),), (len(self.target),)


# ---------------------------------------------------------------------------- collators
class _TextCollator(EncodesAhead):
    """Tokenises texts without special tokens (they are placed here) and without truncation; it
    encodes ahead (EncodesAhead: the train split is tokenised once; EncodedText)."""

    def __init__(self, tokenizer: Any, max_length: int, config: Any):
        self.tok = tokenizer.tok.__class__.from_str(tokenizer.tok.to_str())
        self.tok.no_padding()
        self.tok.no_truncation()
        self.pad_id = int(tokenizer.pad_id)
        self.seq_len = max_length
        self.prefix = str(getattr(config, "source_prefix", "") or "")
        self.max_target = int(getattr(config, "max_target_length", 64))

    @property
    def needs_word_starts(self) -> bool:
        return False

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def source_texts(self, examples: Sequence[dict]) -> list[str]:
        """Each input behind its task prefix: the example's own in a multi-task run, else source_prefix."""
        return [ex.get("prefix", self.prefix) + ex["input"] for ex in examples]


class T5Collator(_TextCollator):
    """Examples {"input", "target"} -> a T5Batch ("prefix input </s>" and "target </s>")."""

    def __init__(self, tokenizer: Any, max_length: int, config: Any):
        super().__init__(tokenizer, max_length, config)
        self.eos_id = int(tokenizer.sep_id)  # T5's </s> (trainer.families.t5)
        if max_length < 2:
            raise ConfigError("max_length must leave room for at least one input token and </s>.")

    def encode(self, examples: Sequence[dict]) -> list[EncodedText]:
        if not examples:
            return []
        sources = [ids[: self.seq_len - 1] + [self.eos_id] for ids in self.ids(self.source_texts(examples))]
        targets = [ids[: self.max_target - 1] + [self.eos_id] for ids in self.ids([ex["target"] for ex in examples])]
        return [EncodedText(np.asarray(s, dtype=np.int32), np.asarray(t, dtype=np.int32))
                for s, t in zip(sources, targets)]

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedText]) -> T5Batch:
        input_ids, attention_mask = _pad([e.source for e in encoded], self.pad_id)
        labels, _ = _pad([e.target for e in encoded], IGNORE_INDEX)
        return T5Batch(input_ids, attention_mask, labels, [ex["input"] for ex in examples],
                       [ex["target"] for ex in examples], [ex.get("task", "") for ex in examples])


class UniLMSeq2SeqCollator(_TextCollator):
    """Examples {"input", "target"} -> a UniLMSeq2SeqBatch; masks target_mask_prob of each target
    (its [SEP] included) with a generator seeded by config.seed, advanced batch by batch."""

    def __init__(self, tokenizer: Any, max_length: int, config: Any):
        super().__init__(tokenizer, max_length, config)
        self.cls_id, self.sep_id, self.mask_id = int(tokenizer.cls_id), int(tokenizer.sep_id), int(tokenizer.mask_id)
        self.mask_prob = float(getattr(config, "target_mask_prob", 0.7))
        self.source_room = max_length - self.max_target - 2  # [CLS] and the source's [SEP]
        if self.source_room < UNILM_SOURCE_ROOM:
            raise ConfigError(f"max_length {max_length} leaves {max(self.source_room, 0)} source tokens beside a "
                              f"target of max_target_length {self.max_target} (and [CLS], [SEP]); raise max_length "
                              f"to at least {self.max_target + 2 + UNILM_SOURCE_ROOM} or lower max_target_length.")
        self.rng = np.random.default_rng([int(getattr(config, "seed", 0)), 0x5E25E0])

    def sources(self, examples: Sequence[dict]) -> list[list[int]]:
        """"[CLS] prefix input [SEP]" per example, the input cut to leave the target its room."""
        return [[self.cls_id, *ids[: self.source_room], self.sep_id] for ids in self.ids(self.source_texts(examples))]

    def encode(self, examples: Sequence[dict]) -> list[EncodedText]:
        if not examples:
            return []
        sources = self.sources(examples)
        targets = [ids[: self.max_target - 1] + [self.sep_id] for ids in self.ids([ex["target"] for ex in examples])]
        return [EncodedText(np.asarray(s, dtype=np.int32), np.asarray(t, dtype=np.int32), one_row=True)
                for s, t in zip(sources, targets)]

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedText]) -> UniLMSeq2SeqBatch:
        """Masks each target afresh (the collator's generator moves on batch by batch)."""
        sources = [e.source for e in encoded]
        rows, labels = [], []
        for e in encoded:
            n = len(e.target)
            picked = self.rng.random(n) < self.mask_prob
            if not picked.any():
                picked[self.rng.integers(n)] = True  # every example predicts at least one token
            rows.append(np.concatenate([e.source, np.where(picked, self.mask_id, e.target)]))
            learnt = np.where(picked, e.target, IGNORE_INDEX)
            labels.append(np.concatenate([np.full(len(e.source), IGNORE_INDEX), learnt]))
        input_ids, attention_mask = _pad(rows, self.pad_id)
        mlm_labels, _ = _pad(labels, IGNORE_INDEX)
        lengths = torch.tensor([len(s) for s in sources], dtype=torch.long)
        types = (torch.arange(input_ids.shape[1])[None, :] >= lengths[:, None]).long() * attention_mask
        source_ids, source_mask = _pad(sources, self.pad_id)
        return UniLMSeq2SeqBatch(input_ids, attention_mask, types, mlm_labels, lengths, source_ids, source_mask,
                                 [ex["input"] for ex in examples], [ex["target"] for ex in examples],
                                 [ex.get("task", "") for ex in examples])


# ---------------------------------------------------------------------------- steps
def lowercases(tokenizer: Any) -> bool:
    """Whether the tokenizer lowercases its input (then its model never writes a capital)."""
    normalizer = tokenizer.tok.normalizer
    return normalizer is not None and normalizer.normalize_str("A") == "a"


def shorten(text: str, limit: int = SAMPLE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class GenerativeStep(TaskStep):
    """A loss per batch; at validation, each example's generated text as its prediction."""

    def __init__(self, config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]):
        super().__init__(config, model, device, task=task, labels=labels)
        from trainer.prep.tokenization import load_tokenizer

        self.tokenizer = load_tokenizer(Path(config.checkpoint))
        self.max_new_tokens, self.num_beams = int(config.max_target_length), int(config.num_beams)
        self.samples_shown = int(config.samples_shown)
        self.samples: list[tuple[str, str, str]] = []  # (input, generated, reference)

    def start_validation(self) -> None:
        super().start_validation()
        self.samples = []

    def decode(self, rows: torch.Tensor) -> list[str]:
        return [self.tokenizer.decode(row.tolist()).strip() for row in rows]

    def keep_samples(self, sources: Sequence[str], generated: Sequence[str], references: Sequence[str]) -> None:
        """A batch's (input, generated, reference) triples, up to samples_shown in all."""
        room = self.samples_shown - len(self.samples)
        self.samples += list(zip(sources, generated, references))[:max(room, 0)]

    def log_samples(self, what: str = "input") -> None:
        if self.sink is None:
            return
        for i, (source, generated, reference) in enumerate(self.samples, 1):
            self.sink.log(f"Sample {i}: {what} «{shorten(source)}» → generated «{shorten(generated)}» "
                          f"(reference «{shorten(reference)}»).")


class Text2TextStep(GenerativeStep):
    def __init__(self, config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]):
        super().__init__(config, model, device, task=task, labels=labels)
        self.lowercase = lowercases(self.tokenizer)
        self.tasks: list[str] = []  # each validation example's task (multi-task runs)

    def start_validation(self) -> None:
        super().start_validation()
        self.tasks: list[str] = []

    def gather(self, generated: list[str], batch: Any) -> None:
        self.predictions += generated
        self.references += list(batch.targets)
        self.tasks += list(batch.tasks)
        self.keep_samples(batch.sources, generated, batch.targets)

    def finish_validation(self) -> dict[str, float]:
        if not self.references:
            return {}
        self.log_samples()
        values = metric_fns.text_to_text_metrics(self.predictions, self.references, lowercase=self.lowercase)
        if any(self.tasks):  # a multi-task run: each task's scores and their mean
            from trainer.finetune.mixing import per_task_metrics

            values.update(per_task_metrics(self.tasks, self.predictions, self.references, lowercase=self.lowercase))
        return values


class T5Step(Text2TextStep):
    """Teacher forcing: cross-entropy of every target token given the ones before it."""

    def gather_generated(self, generated: torch.Tensor, batch: T5Batch) -> None:
        """A validation batch's generated ids (B, n), the decoder start token left out."""
        self.gather(self.decode(generated), batch)

    def __call__(self, batch: T5Batch, *, train: bool) -> StepOutput:
        from models_lib.families.t5 import shift_right

        c = self.model.config
        decoder_input_ids = shift_right(batch.labels, c.decoder_start_token_id, c.pad_token_id)
        out = self.model(batch.input_ids, batch.attention_mask, decoder_input_ids=decoder_input_ids)
        loss = F.cross_entropy(out.logits.flatten(0, 1).float(), batch.labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=float(self.config.label_smoothing))
        if not train:
            generated = self.model.generate(batch.input_ids, batch.attention_mask, max_new_tokens=self.max_new_tokens,
                                            num_beams=self.num_beams)
            self.gather_generated(generated[:, 1:], batch)  # after the decoder start token
        n = float((batch.labels != IGNORE_INDEX).sum())
        return StepOutput(loss, {"task_loss": loss.detach().float()}, {"task_loss": n})


class UniLMStep(Text2TextStep):
    """The masked target tokens predicted under the seq2seq mask."""

    def __call__(self, batch: UniLMSeq2SeqBatch, *, train: bool) -> StepOutput:
        out = self.model(**batch.model_inputs())
        loss = out.loss
        if self.config.label_smoothing:
            loss = F.cross_entropy(out.mlm_logits.float(), out.mlm_targets,
                                   label_smoothing=float(self.config.label_smoothing))
        if not train:
            width = batch.source_ids.shape[1]
            generated = self.model.generate(batch.source_ids, batch.source_mask, mask_token_id=self.tokenizer.mask_id,
                                            eos_token_id=self.tokenizer.sep_id, pad_token_id=self.tokenizer.pad_id,
                                            max_new_tokens=self.max_new_tokens, num_beams=self.num_beams)
            self.gather(self.decode(generated[:, width:]), batch)
        n = float((batch.mlm_labels != IGNORE_INDEX).sum())
        return StepOutput(loss, {"task_loss": loss.detach().float()}, {"task_loss": n})


def text_to_text_step(config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]) -> Text2TextStep:
    """The step of the checkpoint's family (what Task.step is called as): the task's per_family entry."""
    _, step = task.of_family(config.family)
    return step(config, model, device, task=task, labels=labels)


# ---------------------------------------------------------------------------- the task
@dataclass(frozen=True)
class TextToTextTask(Task):
    """Trains the checkpoint's own model (T5's encoder-decoder, UniLM's encoder with its MLM head);
    the collator and the step follow its family: `per_family` holds (family, collator, step)."""

    per_family: tuple = ()

    def of_family(self, family: str) -> tuple[type, Any]:
        """(collator class, step) of a `family` checkpoint; ConfigError for a family it does not train."""
        for name, collator, step in self.per_family:
            if name == family:
                return collator, step
        from trainer import families

        trained = " or ".join(families.get(name).label for name, _, _ in self.per_family)
        raise ConfigError(f"Text to text trains {trained}, not {family or 'an unknown family'}.")

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.t5 import T5ForConditionalGeneration
        from models_lib.families.unilm import UniLMForPreTraining

        if isinstance(base, T5ForConditionalGeneration):
            return base.float()
        if isinstance(base, UniLMForPreTraining):
            if config is not None and config.max_length > base.max_positions:
                raise ConfigError(f"max_length {config.max_length} is more than this UniLM model's "
                                  f"{base.max_positions} positions; lower it.")
            return base.float()
        raise ValueError(f"text to text trains a T5 model or a UniLM model with its language-model head, "
                         f"not a {type(base).__name__}")

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        collator, _ = self.of_family(getattr(config, "family", ""))
        return collator(tokenizer, max_length, config)

    def num_labels(self, labels: Sequence[str]) -> int:
        return 0

    @property
    def has_classes(self) -> bool:
        return False


TEXT_TO_TEXT = TextToTextTask("text_to_text", "Text to text (T5: teacher forcing with a task prefix; UniLM: the "
                              "seq2seq attention mask)", "", None, T5Collator, text_to_text_step, "text_to_text",
                              families=FAMILIES, generates=True, settings=TEXT_SETTINGS,
                              baselines=baseline_fns.TEXT_TO_TEXT, references=baseline_fns.target_references,
                              per_family=(("t5", T5Collator, T5Step), ("unilm", UniLMSeq2SeqCollator, UniLMStep)))
