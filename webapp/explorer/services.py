"""Ask checkpoints questions: fill-mask, next-sentence and pair-order scores, the same question to
several checkpoints side by side, text generation (T5 text-to-text, span filling, GPT and UniLM
generation, streamed or not), attention maps, ELMo word similarity, and a run's masked batches
(trainer.inference's capability modules and trainer.inference.inspection do the work). Which
tools a checkpoint gets is its family's (trainer.families: Family.explorer_kind).

Models are loaded and cached per process by trainer.inference.loading; here we only check what a
user can get wrong before it reaches the model.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any

from trainer import objectives as trained_objectives
from trainer.errors import InferenceError, UserError
from webapp.jobs.models import JobStatus
from webapp.runs.models import Checkpoint

MAX_TEXT_CHARS = 2000
MAX_TOP_K = 50
MAX_NEW_TOKENS = 128        # UniLM's seq2seq endpoint
MAX_GENERATE_TOKENS = 256   # /generate/, /fill-spans/ and the streaming socket (trainer.inference.generate's bound)
MAX_BEAMS = 8
ATTENTION_MAX_TOKENS = 128  # trainer.inference.attention.ATTENTION_MAX_TOKENS, said on the page
STRATEGIES = ("greedy", "beam", "sample")
STACKS = ("encoder", "decoder", "cross", "content", "query")  # content, query: XLNet's two streams

# T5's text-to-text task prefixes (Raffel et al. 2020, appendix D): value, label.
TASK_PREFIXES = (
    ("summarize: ", "summarize:"),
    ("translate English to German: ", "translate English to German:"),
    ("translate English to French: ", "translate English to French:"),
    ("translate English to Romanian: ", "translate English to Romanian:"),
    ("sst2 sentence: ", "sst2 sentence: (sentiment)"),
    ("cola sentence: ", "cola sentence: (acceptability)"),
    ("stsb sentence1: ", "stsb sentence1: … sentence2: (similarity)"),
    ("question: ", "question: … context: (reading comprehension)"),
)


def _folder(checkpoint: Checkpoint):
    """The checkpoint's folder, once its model_config.json reads; else InferenceError saying why."""
    from trainer.training.checkpoints import read_model_meta

    try:
        read_model_meta(checkpoint.folder)
    except UserError as e:
        raise InferenceError(str(e)) from None
    return checkpoint.folder


def checkpoint_problem(checkpoint: Checkpoint) -> str:
    """Why the explorer cannot ask this checkpoint anything (its files are gone or broken), or ""."""
    try:
        _folder(checkpoint)
    except UserError as e:
        return str(e)
    return ""


def _text(value: str, what: str = "The text") -> str:
    text = (value or "").strip()
    if not text:
        raise InferenceError(f"{what} is empty.")
    if len(text) > MAX_TEXT_CHARS:
        raise InferenceError(f"{what} is {len(text):,} characters long; the explorer takes at most {MAX_TEXT_CHARS:,}.")
    return text


def fill_mask(*, checkpoint: Checkpoint, text: str, top_k: int = 5) -> list[dict[str, Any]]:
    """For each [MASK] in `text`: its position and the top-k tokens with probabilities."""
    from trainer.inference import masked  # imports torch

    text = _text(text)
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InferenceError(f"top_k must be between 1 and {MAX_TOP_K}.")
    return masked.fill_mask(_folder(checkpoint), text, top_k=int(top_k))


def next_sentence(*, checkpoint: Checkpoint, text_a: str, text_b: str) -> dict[str, float]:
    """P(sentence B follows sentence A) as {"is_next": p, "not_next": 1 - p}."""
    from trainer.inference import masked  # imports torch

    text_a, text_b = _text(text_a, "Sentence A"), _text(text_b, "Sentence B")
    return masked.next_sentence(_folder(checkpoint), text_a, text_b)


def sentence_order(*, checkpoint: Checkpoint, text_a: str, text_b: str) -> dict[str, Any]:
    """The pair in both orders: {"ab", "ba", "head"} (P(in order) with an SOP head, else P(IsNext))."""
    from trainer.inference import masked  # imports torch

    text_a, text_b = _text(text_a, "Sentence A"), _text(text_b, "Sentence B")
    return masked.sentence_order(_folder(checkpoint), text_a, text_b)


def generate_seq2seq(*, checkpoint: Checkpoint, source: str, max_new_tokens: int = 32) -> dict[str, Any]:
    """A UniLM checkpoint writes a target for `source` (e.g. title → article, article → title):
    {"text", "tokens", "stopped": "end" | "length"}."""
    from trainer.inference import generate as generation  # imports torch

    source = _text(source, "The source")
    if not 1 <= int(max_new_tokens) <= MAX_NEW_TOKENS:
        raise InferenceError(f"max_new_tokens must be between 1 and {MAX_NEW_TOKENS}.")
    out = generation.generate_seq2seq(_folder(checkpoint), source, max_new_tokens=int(max_new_tokens))
    return {"text": out["text"], "tokens": out["tokens"], "stopped": out["stopped"]}


# ---------------------------------------------------------------------------- generation
def generate_target(*, checkpoint: Checkpoint, source: str, decoding: dict[str, Any] | None = None) -> dict[str, Any]:
    """A UniLM checkpoint writes a target for `source`, decoded as `decoding` says (the panel's
    answer without JavaScript; `generate`'s keys); other families get a sentence."""
    from trainer.inference import generate as generation  # imports torch

    source = _text(source, "The source")
    return generation.generate_target(_folder(checkpoint), source, **_decoding(decoding))


def _decoding(decoding: dict[str, Any] | None) -> dict[str, Any]:
    """The decoding fields a request gave (None = default); trainer.inference.generate checks them."""
    fields = ("strategy", "max_new_tokens", "num_beams", "temperature", "top_k", "top_p", "seed")
    return {k: v for k, v in (decoding or {}).items() if k in fields and v is not None and v != ""}


def generate(*, checkpoint: Checkpoint, prompt: str, decoding: dict[str, Any] | None = None,
             chat: bool = False) -> dict[str, Any]:
    """A T5 (text-to-text), GPT (continuation) or UniLM (seq2seq) checkpoint writes text:
    {"family", "text", "tokens", "ids", "stopped", "prompt_tokens", "decoding"}. `chat`: an SFT
    checkpoint answers the prompt as a user turn of its chat template."""
    from trainer.inference import generate as generation  # imports torch

    prompt = _text(prompt, "The prompt")
    return generation.generate(_folder(checkpoint), prompt, chat=bool(chat), **_decoding(decoding))


def fill_spans(*, checkpoint: Checkpoint, text: str, decoding: dict[str, Any] | None = None) -> dict[str, Any]:
    """T5 fills each <extra_id_N> of `text`: {"spans", "filled", "output", "stopped", "decoding"}."""
    from trainer.inference import generate as generation  # imports torch

    text = _text(text)
    return generation.fill_spans(_folder(checkpoint), text, **_decoding(decoding))


def stream_generate(*, checkpoint: Checkpoint, prompt: str, decoding: dict[str, Any] | None = None,
                    chat: bool = False) -> Generator[str, None, dict[str, Any]]:
    """`generate` as a generator of text pieces (its return value is generate's answer). The
    request is checked now; advancing it runs the model, so do that off the event loop."""
    from trainer.inference import generate as generation  # imports torch

    prompt = _text(prompt, "The prompt")
    return generation.stream_generate(_folder(checkpoint), prompt, chat=bool(chat), **_decoding(decoding))


def attention(*, checkpoint: Checkpoint, text: str, target: str | None = None, stack: str | None = None,
              layer: int | None = None) -> dict[str, Any]:
    """Attention weights per layer and head (trainer.inference.attention.attention_maps)."""
    from trainer.inference import attention as viewer  # imports torch

    text = _text(text)
    if target:
        target = _text(target, "The target")
    return viewer.attention_maps(_folder(checkpoint), text, target=target or None, stack=stack or None,
                                 layer=layer)


def permutation_fill(*, checkpoint: Checkpoint, text: str, order: list[int], top_k: int = 5) -> dict[str, Any]:
    """XLNet: predict the chosen token positions in the given order, step by step
    (trainer.inference.permutation.fill_by_permutation)."""
    from trainer.inference import permutation  # imports torch

    return permutation.fill_by_permutation(_folder(checkpoint), _text(text), list(order), top_k=int(top_k))


def permutation_tokens(*, checkpoint: Checkpoint, text: str) -> dict[str, Any]:
    """XLNet: the text's tokens, to pick the positions to predict among."""
    from trainer.inference import permutation  # imports torch

    return permutation.text_tokens(_folder(checkpoint), _text(text))


def word_similarity(*, checkpoint: Checkpoint, sentence_a: str, sentence_b: str, word: str) -> dict[str, Any]:
    """Cosine of an ELMo checkpoint's vectors of `word` in two sentences, per layer."""
    from trainer.inference import similarity  # imports torch

    a, b = _text(sentence_a, "Sentence A"), _text(sentence_b, "Sentence B")
    word = _text(word, "The word")
    return similarity.word_similarity(_folder(checkpoint), a, b, word)


# ---------------------------------------------------------------------------- fine-tuned checkpoints
MAX_SENTENCES = 8  # trainer.inference.downstream.MAX_SENTENCES
MAX_N_BEST = 20
MAX_CHOICES = 8  # trainer.inference.downstream.MAX_CHOICES
POOLINGS = ("mean", "cls")


def classify(*, checkpoint: Checkpoint, text: str, text_b: str = "") -> dict[str, Any]:
    """A sequence classifier's label probabilities (or value) for a text or a pair."""
    from trainer.inference import downstream  # imports torch

    text = _text(text)
    text_b = _text(text_b, "Sentence B") if (text_b or "").strip() else ""
    return downstream.classify(_folder(checkpoint), text, text_b or None)


def choose(*, checkpoint: Checkpoint, context: str, choices: list[str]) -> dict[str, Any]:
    """A GPT-1 multiple-choice model's probability for each choice (one pass per choice)."""
    from trainer.inference import downstream  # imports torch

    return downstream.choose(_folder(checkpoint), _text(context, "The context"), list(choices))


def tag(*, checkpoint: Checkpoint, text: str) -> dict[str, Any]:
    """A token classifier's tag per word and its entities (character offsets into the text)."""
    from trainer.inference import downstream  # imports torch

    return downstream.tag(_folder(checkpoint), _text(text))


def answer(*, checkpoint: Checkpoint, question: str, context: str, n_best: int = 5) -> dict[str, Any]:
    """An extractive QA model's answer span in the context, with the n best candidates."""
    from trainer.inference import downstream  # imports torch

    question, context = _text(question, "The question"), _text(context, "The context")
    if not 1 <= int(n_best) <= MAX_N_BEST:
        raise InferenceError(f"n_best must be between 1 and {MAX_N_BEST}.")
    return downstream.answer(_folder(checkpoint), question, context, n_best=int(n_best))


def embed(*, checkpoint: Checkpoint, sentences: list[str], pooling: str = "mean") -> dict[str, Any]:
    """Cosine similarities of the sentence embeddings of any encoder checkpoint."""
    from trainer.inference import downstream  # imports torch

    texts = [_text(s, f"Sentence {i + 1}") for i, s in enumerate(sentences) if (s or "").strip()]
    if not 2 <= len(texts) <= MAX_SENTENCES:
        raise InferenceError(f"Give from 2 to {MAX_SENTENCES} sentences (one per line) to compare; "
                             f"there {'is' if len(texts) == 1 else 'are'} {len(texts)}.")
    if pooling not in POOLINGS:
        raise InferenceError(f"pooling must be one of {', '.join(POOLINGS)}, not {pooling!r}.")
    return downstream.embed(_folder(checkpoint), texts, pooling=pooling)


def checkpoint_about(family: str, task: str) -> str:
    """What the explorer can do with a checkpoint of this family, fine-tuned for `task` ("" if not),
    in the family's own words (trainer.families: Family.explorer_about, explorer_about_tuned): only
    what it still supports (a fine-tuned encoder answers its task, not fill-mask). "" for a family
    nobody registered."""
    from trainer import families

    found = families.find(family)
    if found is None:
        return ""
    if not task:
        return found.checkpoint_about()
    from trainer.prep.labelled.tasks import TASKS

    return found.checkpoint_about(TASKS[task].title.lower() if task in TASKS else task.replace("_", " "))


def checkpoint_prefix(checkpoint: Checkpoint) -> str:
    """The task prefix (source_prefix) a text-to-text fine-tuning run put before its inputs: what the
    explorer's text-to-text box starts with for its checkpoints; "" for any other."""
    run = checkpoint.run if checkpoint.run_id is not None else None
    if run is None or not run.is_finetune:
        return ""
    return str((run.config or {}).get("source_prefix") or "")


def checkpoint_task(checkpoint: Checkpoint) -> str:
    """The fine-tuning task of a fine-tuning run's checkpoint ("classification", "token_classification",
    ...), or "" for a pre-training run's or an imported model's."""
    run = checkpoint.run if checkpoint.run_id is not None else None
    if run is None or not run.is_finetune:
        return ""
    return str((run.objectives or [""])[0])


def checkpoint_tool(checkpoint: Checkpoint) -> str:
    """The explorer tool a fine-tuning run's checkpoint answers with, as its task declares it
    (trainer.finetune: Task.explorer_action, e.g. "classify", "tag", "answer", "choose", "chat");
    "" for a pre-training run's or an imported model's."""
    from trainer import finetune

    task = checkpoint_task(checkpoint)
    return finetune.explorer_action(task) if task else ""


# ---------------------------------------------------------------------------- what a checkpoint is
def checkpoint_family(checkpoint: Checkpoint) -> str:
    """models_lib's family of the checkpoint's model ("bert", "t5", "gpt", "elmo", ...): what the
    checkpoint's model_config.json says, else its run's family or its import's family."""
    from trainer.training.checkpoints import checkpoint_family as family_on_disk

    family = family_on_disk(checkpoint.folder)
    if not family:
        if checkpoint.run_id is not None:
            family = checkpoint.run.family
        else:
            from trainer.inference.importing import read_import_info  # reads a small JSON; no torch

            family = read_import_info(checkpoint.folder).get("family")
    return str(family or "bert")


def family_kind(family: str) -> str:
    """Which explorer panels a family gets (its Family's explorer_kind): "t5", "gpt", "elmo" and
    "unilm" each have their own tools; the encoders, and a family name nobody registered, get
    "encoder" (fill-mask, sentence pairs). A Hugging Face model type ("gpt2") names its family."""
    from trainer import families

    found = families.find(family)
    return found.explorer_kind if found is not None else "encoder"


def embeds_sentences(family: str) -> bool:
    """Whether a family's checkpoints give sentence embeddings (Family.sentence_vectors: the
    encoders and UniLM); a family name nobody registered counts as an encoder, as in family_kind."""
    from trainer import families

    found = families.find(family)
    return found.sentence_vectors if found is not None else True


# ---------------------------------------------------------------------------- comparison
def compare(*, checkpoints: list[Checkpoint], task: str, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The same question to several checkpoints, one column each, in the order given:
    [{"checkpoint", "label", "result" (what the single-checkpoint endpoint answers, without
    "checkpoint") or None, "error" (a sentence) or None}]. `task` is a tool's Comparison.task
    (webapp.explorer.tools.comparisons). A question every checkpoint refuses for the same reason
    (e.g. no [MASK] in the text) raises that reason instead."""
    from webapp.explorer import tools

    found = tools.comparisons()
    if task not in found:
        raise InferenceError(f"Unknown task {task!r}; choose one of {', '.join(found)}.")
    columns = []
    for ckpt in checkpoints:
        try:
            columns.append({"checkpoint": str(ckpt.id), "label": ckpt.label, "result": found[task].ask(ckpt, inputs),
                            "error": None})
        except UserError as e:
            columns.append({"checkpoint": str(ckpt.id), "label": ckpt.label, "result": None, "error": str(e)})
    errors = {c["error"] for c in columns}
    if len(errors) == 1 and None not in errors:
        raise InferenceError(errors.pop())
    return columns


# ---------------------------------------------------------------------------- what a checkpoint knows
def checkpoint_objectives(checkpoint: Checkpoint) -> list[str]:
    """What the model learnt: its run's objectives, or the heads an import brought weights for."""
    if checkpoint.run_id is not None:
        return list(checkpoint.run.objectives or [])
    from trainer.inference.importing import read_import_info  # reads a small JSON; no torch

    return list(read_import_info(checkpoint.folder).get("objectives", []))


def pair_head(objectives: list[str]) -> str:
    """The sentence-pair head the sentence-order tool asks ("sop", "nsp"), or "" for none: the
    pair objectives' own (trainer.objectives.pair_heads), an order-judging one first."""
    heads = trained_objectives.pair_heads(objectives)
    return heads[0].pairs.head if heads else ""


def judges_next_sentence(objectives: list[str]) -> bool:
    """Whether the model learnt a head that tells a following segment from a random one (NSP),
    which the next-sentence tool asks."""
    return any(o.pairs.random_next for o in trained_objectives.pair_heads(objectives))


def fills_masks(objectives: list[str]) -> bool:
    """Whether the model learnt to predict masked tokens (the fill-mask tool): an objective says so."""
    return trained_objectives.fills_masks(objectives)


# ---------------------------------------------------------------------------- masking inspector
def inspect_run(*, run, seed: int = 0, n_examples: int = 4) -> dict[str, Any]:
    """A real collated batch of the run's training data (trainer.inference.inspection.sample_batch), with the
    run's objective settings for the page's caption."""
    from trainer.inference.inspection import sample_batch  # imports torch

    tokenizer = run.tokenizer
    if tokenizer is None:  # a fine-tuning run: its examples are a labelled dataset's, not masked text
        raise InferenceError("The masking inspector shows pre-training batches; this is a fine-tuning run. Its "
                             "dataset's examples are on the dataset's page.")
    if tokenizer.status != JobStatus.READY:
        raise InferenceError("This run's tokenizer is not ready, so there is no data to show yet.")
    if not (tokenizer.folder / "shards" / "train").is_dir():
        raise InferenceError("This run's token shards are no longer on disk, so there is no data to show.")
    latest = run.checkpoints.order_by("-step").first()
    examples = sample_batch(run.config, tokenizer.folder, n_examples=n_examples, seed=seed,
                            checkpoint_dir=latest.folder if latest and latest.folder.is_dir() else None)
    config = run.config or {}
    return {
        "run": str(run.id),
        "seed": seed,
        "objectives": list(run.objectives or []),
        "masking": config.get("masking", ""),
        "masking_unit": config.get("masking_unit") or "token",
        "mask_prob": config.get("mask_prob"),
        "examples": examples,
    }
