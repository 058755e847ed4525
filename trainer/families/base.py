"""What a model family is, in one object: the `Family` every family module defines.

A Family says everything the rest of the project asks about one kind of model:

- its models: the models_lib preset table, config class and pre-training model class (import
  strings, loaded on first use so that reading the table imports no torch), the config fields
  the launch form shows (`model_fields`) and the special token ids the config takes;
- how it trains: its objectives (which it must train, which by default, which it refuses and
  why), tokenizer algorithms, masking units, packings, optimizer defaults and the RunConfig
  fields only it uses, plus hooks for what is its own (`seq_len_help`, `check_run`,
  `check_model_config`, a teacher for distillation, `prepare_model`);
- what a training step costs: the FLOPs formula MFU counts with (`flops_formula`; a family
  without one says why in `no_flops`) and the activations it keeps (`activation_bytes`, the
  transformer stack's estimate times `activation_factor` unless the family overrides it);
- its Hugging Face formats (`hf_model_types`, what an imported model learnt, the tokenizer
  roles a decoder's tokenizer lacks);
- what the explorer can ask it (`explorer_kind` picks the panels): how a text becomes its input
  ids, whether it fills masks, which attention stacks it has and how to record them, whether
  and how it generates, whether it fills T5's spans, compares word vectors, scores labels as a
  causal LM (in-context evaluation) or fills in by permutation, and the sentence the explorer
  shows for its checkpoints (`explorer_about`, `explorer_about_tuned`).

The defaults are an encoder's (BERT): a family module only sets what differs, and subclasses
Family where a hook does something else. trainer.families registers every family once.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.errors import ConfigError, InferenceError
from trainer.families import activations

if TYPE_CHECKING:
    from trainer.inference.loading import Loaded
    from trainer.config import RunConfig


@dataclass(frozen=True)
class ModelField:
    """A models_lib config field the launch form shows for one family; its value goes to
    model_overrides (its default is the preset's own value)."""

    name: str
    label: str
    help: str
    choices: tuple[str, ...] = ()
    choice_labels: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None
    boolean: bool = False  # a yes/no setting (ELMo's char_cnn)

    def check(self, value: Any, label: str) -> None:
        if self.boolean and not isinstance(value, bool):
            raise ConfigError(f"{self.name} must be true or false for {label}, not {value!r}.")
        if self.choices and value not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(repr(c) for c in self.choices)} for {label}, "
                              f"not {value!r}.")
        if self.bounds is not None:
            lo, hi = self.bounds
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(f"{self.name} must be between {lo:g} and {hi:g} for {label}, not {value!r}.")

    def as_json(self, default: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "help": self.help, "default": default}
        if self.boolean:
            out["type"] = "bool"
        if self.choices:
            out["choices"] = [[c, lab] for c, lab in zip(self.choices, self.choice_labels or self.choices)]
        if self.bounds is not None:
            out["min"], out["max"] = self.bounds
        return out


@dataclass(frozen=True)
class GenerationPrompt:
    """A text made ready for a generating model (Family.generation_prompt)."""

    input_ids: list[int]    # what the model's start_generation / generate reads
    skip: int               # leading ids of the output that are not generated (T5's start token, the prompt)
    max_new_tokens: int     # the request's, cut to the room the model's positions leave
    context: list[int] = field(default_factory=list)  # ids decoded before the new ones (GPT's prompt)


@dataclass(frozen=True, kw_only=True)
class Family:
    """One model family. Attributes are data; methods are the hooks a family may override."""

    # ---- what it is
    name: str                          # the family key and models_lib's family (model_config.json)
    label: str                         # "BERT"
    about: str = ""                    # one line for the form

    # ---- its models ("module:NAME" import strings, loaded on demand)
    preset_table: str                  # "models_lib.families.bert:BERT_PRESETS"
    config_class: str                  # "models_lib.families.bert:BertConfig" (has .from_preset)
    model_class: str                   # "models_lib.families.bert:BertForPreTraining"
    default_preset: str = ""
    model_fields: tuple[ModelField, ...] = ()  # models_lib fields the form shows (model_overrides)
    # models_lib config field -> the tokenizer's special id it takes ("pad", "eos"; SpecialIds names)
    token_fields: dict[str, str] = field(default_factory=lambda: {"pad_token_id": "pad"})

    # ---- how it trains
    objectives: tuple[str, ...]        # compatible objectives (names in trainer.objectives.REGISTRY)
    required_objectives: tuple[str, ...]
    default_objectives: tuple[str, ...]
    one_objective: bool = False        # exactly one of `objectives` per run (T5's denoising objectives)
    refusals: dict[str, str] = field(default_factory=dict)  # objective -> why this family does not train it
    tokenizer_algorithms: tuple[str, ...]   # the first is the one to train for it
    masking_units: tuple[str, ...] = ("token", "word", "phrase", "ngram")  # the first is the default
    packings: tuple[str, ...] = ("full-sentences", "doc-sentences")
    optimizer_defaults: dict[str, Any] = field(default_factory=dict)
    config_fields: tuple[str, ...] = ()       # RunConfig fields only this family uses
    hidden_fields: tuple[str, ...] = ()       # RunConfig fields that do nothing for it (the form hides them)
    teacher_families: tuple[str, ...] = ()    # families whose checkpoints it distils (DistilBERT: BERT)
    recomputes_blocks: bool = True            # its model's stacks take activation_checkpointing (models_lib.core.recompute)

    # ---- what a training step costs
    # "module:function" (models_lib config, trainer.training.flops.Workload) -> training FLOPs per
    # counted token; required, so that a family chooses it. "" only with `no_flops`, why MFU is not counted.
    flops_formula: str
    no_flops: str = ""
    activation_factor: float = 1.0            # blocks' worth each layer keeps (XLNet's two streams: 2)

    # ---- Hugging Face formats
    hf_model_types: tuple[str, ...] = ()      # config.json model_types that import as this family
    hf_objective: str = ""                    # what an imported model's one output layer learnt ("clm")
    # our tokenizer role -> the spellings to look for, when the model's tokenizer has no [CLS]/[MASK]
    hf_tokenizer_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hf_export_refusal: str = ""               # why its checkpoints have no Hugging Face export ("" = they do)
    hf_token_types: bool = True               # its exported tokenizer gives token_type_ids (if the model has
                                              # token types); False where transformers' tokenizer for its
                                              # model_type gives none (RoBERTa, DistilBERT, GPT-2, T5)

    # ---- the explorer
    explorer_kind: str = "encoder"            # which panels apply: encoder | unilm | t5 | gpt | elmo
    cls_sep_inputs: bool = True               # inputs are "[CLS] text [SEP]" (the tokenizer's template)
    not_masked_lm: str = ""                   # why it cannot fill in [MASK]s ("" = it can)
    attention_stacks: tuple[str, ...] = ("encoder",)  # "encoder", "decoder" (causal), "cross"
    no_attention: str = ""                    # why there is no attention to show (when it has no stacks)
    attention_reads_target: bool = False      # its decoder-side stacks read a target text (T5)
    generates: bool = False                   # writes text (generate, stream_generate)
    # its prompts of different lengths decode together, left-padded with an attention mask (the model
    # server batches concurrent requests: trainer.serve.engine); False: one prompt at a time
    batched_generation: bool = False
    fills_spans: bool = False                 # fills T5's sentinel spans
    word_vectors: bool = False                # compares a word's contextual vectors (ELMo)
    causal_lm: bool = False                   # scores a label's tokens after a prompt (in-context evaluation)
    sentence_vectors: bool = True             # an encoder's sentence embeddings (nearest neighbours in a dataset)
    permutation_fill: bool = False            # fills chosen positions in a chosen order (XLNet)
    # What the explorer offers its checkpoints, in one sentence; the fine-tuned one ("{task}": the
    # task's title) says only what a checkpoint with a task head still does ("": `explorer_about`
    # and "Fine-tuned for {task}.").
    explorer_about: str = "An encoder: fill in masks, score sentence pairs, look at its attention."
    explorer_about_tuned: str = (
        "An encoder fine-tuned for {task}: ask it what it was fine-tuned for below, compare sentences by their "
        "vectors, look at its attention. Its task head replaced the pre-training heads, so it no longer fills in "
        "masks or scores sentence pairs.")

    def __post_init__(self) -> None:
        if not self.flops_formula and not self.no_flops:
            raise TypeError(f"The {self.name} family names no flops_formula; give one, or say in no_flops why "
                            f"its MFU is not counted.")

    # ------------------------------------------------------------------ models
    @property
    def family(self) -> str:
        """models_lib's family name (the one model_config.json holds): the family's own name."""
        return self.name

    @property
    def presets(self) -> list[str]:
        return list(load(self.preset_table))

    def preset_config(self, preset: str, **overrides: Any) -> Any:
        """The models_lib config object for a preset (vocab_size etc. as overrides)."""
        return load(self.config_class).from_preset(preset, **overrides)

    def build_model(self, model_cfg: Any) -> Any:
        """A freshly initialised pre-training model (an nn.Module) for a models_lib config."""
        return load(self.model_class)(model_cfg)

    def prepare_model(self, model: Any, tokenizer: Any) -> None:
        """Give a freshly built model what it reads from the run's tokenizer (a TokenizerBundle)
        before training; nothing for most families."""

    # ------------------------------------------------------------------ cost
    def flops_per_token(self, model_cfg: Any, workload: Any) -> float | None:
        """Training FLOPs (forward and backward) per counted token of a models_lib config under a
        trainer.training.flops.Workload; None for a family with no formula (`no_flops`)."""
        return load(self.flops_formula)(model_cfg, workload) if self.flops_formula else None

    def activation_bytes(self, model_cfg: Any, batch: Any) -> int:
        """Bytes of activations a training step keeps for its backward pass, per process
        (batch: a trainer.catalog.size.Batch): a transformer stack's estimate, its layers scaled by
        `activation_factor`. A family whose layers are no transformer blocks overrides this."""
        return activations.transformer_activation_bytes(model_cfg, batch, factor=self.activation_factor)

    # ------------------------------------------------------------------ training
    @property
    def default_masking_unit(self) -> str:
        """The first masking unit; "token" (a placeholder the collators ignore) for families
        that mask nothing the MLM way."""
        return self.masking_units[0] if self.masking_units else "token"

    @property
    def masks_tokens(self) -> bool:
        """Whether its objectives mask tokens the MLM way (masking units and packings apply)."""
        return bool(self.masking_units)

    @property
    def needs_teacher(self) -> bool:
        return "teacher_checkpoint" in self.config_fields

    def allowed_objective_sets(self) -> list[list[str]]:
        """Every objective set we accept: the required ones plus any of the optional ones (for a
        one-objective family: each objective alone)."""
        if self.one_objective:
            return [[o] for o in self.objectives]
        optional = [o for o in self.objectives if o not in self.required_objectives]
        sets = []
        for mask in range(1 << len(optional)):
            extra = [o for i, o in enumerate(optional) if mask >> i & 1]
            sets.append(list(self.required_objectives) + extra)
        return sets

    def seq_len_help(self) -> str:
        """What seq_len means for this family, for the form ("" = the field's own help)."""
        return ""

    def check_run(self, config: "RunConfig") -> None:
        """Refuse (ConfigError) a run config this family cannot train, beyond what the table says."""

    def check_model_config(self, model_cfg: Any) -> None:
        """Refuse (ConfigError) a models_lib config (preset + model_overrides) this family cannot train."""

    def validate_teacher(self, config: "RunConfig") -> dict[str, Any]:
        """For a family that distils: the teacher's model_config.json after checking it fits."""
        if not config.teacher_checkpoint:
            raise ConfigError(f"{self.label} has no teacher to check: teacher_checkpoint is empty.")
        raise ConfigError(f"{self.label} trains without a teacher; leave teacher_checkpoint out.")

    def student_overrides(self, teacher_config: dict[str, Any]) -> dict[str, Any]:
        """For a family that distils: the model_overrides a teacher's config dict asks of the student."""
        raise ConfigError(f"{self.label} trains without a teacher, so no teacher sets its shape.")

    # ------------------------------------------------------------------ Hugging Face
    def hf_roles(self, hf_config: dict[str, Any], tokenizer: Any) -> dict[str, tuple[str, ...]] | None:
        """Where our tokenizer roles (pad, unk, cls, sep, mask) come from in an imported model's
        tokenizer.json (a tokenizers.Tokenizer) that lacks them; None when it has them itself."""
        return dict(self.hf_tokenizer_roles) or None

    # ------------------------------------------------------------------ explorer
    @property
    def masked_lm(self) -> bool:
        return not self.not_masked_lm

    def prompt_ids(self, tokenizer: Any, text: str) -> list[int]:
        """A text as the model's input ids, laid out as training laid it out ("[CLS] text [SEP]"
        for an encoder; the tokenizer is a TokenizerBundle)."""
        if self.cls_sep_inputs:
            return tokenizer.tok.encode(text).ids
        return tokenizer.tok.encode(text, add_special_tokens=False).ids

    def fill_mask_model(self, model: Any) -> tuple[Any, str]:
        """The module that answers fill-mask, and a note when it is not the model itself."""
        return model, ""

    def generation_prompt(self, loaded: "Loaded", text: str, max_new_tokens: int) -> GenerationPrompt:
        """A prompt made ready for generate (InferenceError when the text does not fit)."""
        raise InferenceError(f"A {self.label} model does not generate text. Pick a checkpoint of a T5, GPT or UniLM "
                             "run (or an imported T5 or GPT-2 model).")

    def generate_kwargs(self, tokenizer: Any) -> dict[str, Any]:
        """Extra keyword arguments of the model's generate / start_generation."""
        return {}

    def attention_stack(self, module_name: str, module: Any) -> str:
        """Which stack an attention module (named as in model.named_modules()) belongs to."""
        return self.attention_stacks[0]

    def attention_forward(self, model: Any, input_ids: Any, decoder_ids: list[int]) -> None:
        """One forward pass that calls every attention module whose weights the explorer shows
        (input_ids: a (1, T) tensor; decoder_ids: the decoder's side, for a model that reads a target)."""
        model.encode(input_ids)

    def checkpoint_about(self, task_title: str = "") -> str:
        """The explorer's sentence for one of its checkpoints, fine-tuned for the task titled
        `task_title` ("" for a pre-trained one)."""
        if not task_title:
            return self.explorer_about
        if self.explorer_about_tuned:
            return self.explorer_about_tuned.format(task=task_title)
        return f"{self.explorer_about} Fine-tuned for {task_title}."


def load(ref: str) -> Any:
    """The object an import string "package.module:NAME" names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
