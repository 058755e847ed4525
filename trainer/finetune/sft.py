"""Supervised fine-tuning (SFT) of a causal language model (GPT) on prompt/response pairs or chats.

Each example is a conversation (a prompt and its response are a user turn and an assistant
turn) written with the run's chat template (trainer.finetune.chat: `chat_template`, shown and
editable on the launch form). Each piece of the rendered text is tokenised on its own, without
special tokens, and the end-of-text token follows every assistant reply. The loss is the
model's next-token cross-entropy on the assistant replies and their end-of-text tokens only
(the labels are -100 everywhere else); the row is cut to max_length tokens.

Evaluation: the response perplexity, exp of the mean NLL per response token over the whole
split (trainer.finetune.metrics.sft_metrics), and for the first `samples_shown` examples the
reply the model writes greedily (up to max_target_length tokens, until end-of-text) from the
prompt: the turns before the last reply and that turn's opening, written to the log.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from trainer.errors import ConfigError
from trainer.finetune import chat
from trainer.finetune import metrics as metric_fns
from trainer.finetune.tasks import IGNORE_INDEX, EncodesAhead, Task
from trainer.finetune.settings import Setting
from trainer.finetune.text2text import GenerativeStep, _pad
from trainer.objectives.base import Batch, StepOutput

FAMILIES = ("gpt",)


@dataclass
class SFTBatch(Batch):
    labels: torch.Tensor         # (B, T) the token where it is learnt (a reply, its end-of-text), else -100
    prompts: list[list[int]]     # per row: the ids that ask for its last reply (for the samples)
    prompt_texts: list[str]      # the last user turn's text (for the log)
    responses: list[str]         # the last reply's text

    def model_inputs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "labels": self.labels}


@dataclass(frozen=True)
class EncodedChat:
    """One SFT example between encode and collate (EncodesAhead): its row's ids and labels, cut to
    max_length, and the ids of the prompt its samples are generated from. Its length (what
    length-grouped batches sort by) is its row's."""

    ids: np.ndarray
    labels: np.ndarray
    prompt: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


class SFTCollator(EncodesAhead):
    """Examples {"prompt", "response"} or {"messages"} -> an SFTBatch, right-padded. It encodes
    ahead (EncodesAhead: the train split is tokenised once; EncodedChat)."""

    def __init__(self, tokenizer: Any, max_length: int, config: Any, eos_id: int):
        self.tok = tokenizer.tok.__class__.from_str(tokenizer.tok.to_str())
        self.tok.no_padding()
        self.tok.no_truncation()
        self.pad_id, self.eos_id, self.seq_len = int(tokenizer.pad_id), int(eos_id), max_length
        self.template = chat.check_chat_template(getattr(config, "chat_template", chat.DEFAULT_CHAT_TEMPLATE))

    @property
    def needs_word_starts(self) -> bool:
        return False

    def encode_pieces(self, pieces: Sequence[chat.Piece]) -> tuple[list[int], list[int]]:
        """(ids, labels) of rendered pieces, uncut."""
        texts = [p.text for p in pieces]
        encoded = self.tok.encode_batch(texts, add_special_tokens=False) if texts else []
        ids: list[int] = []
        labels: list[int] = []
        for piece, enc in zip(pieces, encoded):
            ids += enc.ids
            labels += list(enc.ids) if piece.trained else [IGNORE_INDEX] * len(enc.ids)
            if piece.eos_after:
                ids.append(self.eos_id)
                labels.append(self.eos_id)
        return ids, labels

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.encode_pieces(chat.prompt_pieces(messages, self.template))[0]

    def encode(self, examples: Sequence[dict]) -> list[EncodedChat]:
        out = []
        for ex in examples:
            messages = chat.messages_of(ex)
            ids, labels = self.encode_pieces(chat.render(messages, self.template))
            out.append(EncodedChat(np.asarray(ids[: self.seq_len], dtype=np.int32),
                                   np.asarray(labels[: self.seq_len], dtype=np.int32),
                                   np.asarray(self.prompt_ids(messages), dtype=np.int32)))
        return out

    def collate(self, examples: Sequence[dict], encoded: Sequence[EncodedChat]) -> SFTBatch:
        asks, replies = [], []
        for ex in examples:
            messages = chat.messages_of(ex)
            last = chat.last_reply(messages)
            asked = [m["content"] for m in messages[:last] if m["role"] == "user"]
            asks.append(asked[-1] if asked else "")
            replies.append(messages[last]["content"])
        input_ids, attention_mask = _pad([e.ids for e in encoded], self.pad_id)
        labels, _ = _pad([e.labels for e in encoded], IGNORE_INDEX)
        return SFTBatch(input_ids, attention_mask, labels, [e.prompt.tolist() for e in encoded], asks, replies)


class SFTStep(GenerativeStep):
    """The model's own next-token loss on the reply tokens; the perplexity over them at validation."""

    def __init__(self, config: Any, model: Any, device: str, *, task: Task, labels: Sequence[str]):
        super().__init__(config, model, device, task=task, labels=labels)
        if config.label_smoothing:
            raise ConfigError("label_smoothing is for classification and text to text; SFT learns the plain "
                              "next-token loss (set label_smoothing to 0).")
        self.nll_sums: list[float] = []
        self.counts: list[int] = []

    def start_validation(self) -> None:
        super().start_validation()
        self.nll_sums, self.counts = [], []

    def __call__(self, batch: SFTBatch, *, train: bool) -> StepOutput:
        out = self.model(**batch.model_inputs())
        n = int((batch.labels[:, 1:] != IGNORE_INDEX).sum())  # the model predicts labels[t + 1] at t
        if not train:
            self.nll_sums.append(float(out.loss) * n)
            self.counts.append(n)
            self.sample(batch)
        return StepOutput(out.loss, {"task_loss": out.loss.detach().float()}, {"task_loss": float(n)})

    def sample(self, batch: SFTBatch) -> None:
        """Greedy replies to the first samples_shown prompts of the split."""
        config = self.model.config
        for i in range(batch.size):
            if len(self.samples) >= self.samples_shown:
                return
            prompt = batch.prompts[i][-(self.model.max_positions - 1):]  # keep room for one token at least
            ids = torch.tensor([prompt], dtype=torch.long, device=batch.input_ids.device)
            out = self.model.generate(ids, max_new_tokens=self.max_new_tokens, num_beams=self.num_beams,
                                      eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
            self.samples.append((batch.prompt_texts[i], self.decode(out[:, len(prompt):])[0], batch.responses[i]))

    def finish_validation(self) -> dict[str, float]:
        if not self.counts:
            return {}
        self.log_samples("prompt")
        return metric_fns.sft_metrics(self.nll_sums, self.counts)


@dataclass(frozen=True)
class SFTTask(Task):
    """Trains the checkpoint's own causal LM (GPT)."""

    def build_model(self, base: Any, labels: Sequence[str], config: Any = None) -> Any:
        from models_lib.families.gpt import GPTLMHeadModel

        if not isinstance(base, GPTLMHeadModel):
            raise ValueError(f"SFT trains a GPT model (a causal language model), not a {type(base).__name__}")
        if config is not None and config.max_length > base.max_positions:
            raise ConfigError(f"max_length {config.max_length} is more than this GPT model's {base.max_positions} "
                              f"positions; lower it.")
        return base.float()

    def build_collator(self, tokenizer: Any, labels: Sequence[str], max_length: int, config: Any = None) -> Any:
        from models_lib.checkpoint import read_model_config

        eos = read_model_config(config.checkpoint).get("config", {}).get("eos_token_id") if config else None
        return SFTCollator(tokenizer, max_length, config, tokenizer.sep_id if eos is None else int(eos))

    def num_labels(self, labels: Sequence[str]) -> int:
        return 0

    @property
    def has_classes(self) -> bool:
        return False


SFT = SFTTask("sft", "Supervised fine-tuning (GPT: prompt/response or chats, the loss on the replies only)", "",
              None, SFTCollator, SFTStep, "sft", families=FAMILIES, generates=True, explorer_action="chat", chats=True,
              no_baseline="Supervised fine-tuning is scored by perplexity, which only a language model gives: it "
                          "has no baseline.", settings=(
                  Setting("chat_template", "Chat template", "How each chat turn is written: {role} is system, user "
                          "or assistant, {content} the message; the model learns the assistant's content.",
                          section="task", textarea=True, keep_if_empty=True),
                  Setting("max_target_length", "Reply length (tokens)", "Tokens of the sample replies written at "
                          "each validation.", advanced=True, section="task"),
                  Setting("samples_shown", "Samples shown", "Validation prompts whose reply each evaluation writes "
                          "to the log.", advanced=True, section="task"),
              ))
