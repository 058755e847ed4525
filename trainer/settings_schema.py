"""Every setting a person chooses for a run, declared once: pre-training's (RunConfig) and
fine-tuning's (FinetuneConfig), side by side, with the bounds their configs check, the label and
help the forms and the API show, and where the forms place them.

A setting both kinds of run take (max_steps, lr, seed, ...) is one `Setting` with
`kinds=BOTH`; where the two differ on purpose (fine-tuning accepts a smaller lr, shows seed in
the "advanced" fold, does not offer grad_accum) its `per_kind` says so in the same declaration.

Who reads it:
- RunConfig and FinetuneConfig validate their numbers against `bounds(kind)` (RunConfig adds each
  objective's own settings, trainer.objectives' `Objective.settings`: see trainer.config.bounds);
  a value out of bounds is refused with `Bounds.refusal`, the sentence the web app's form and API
  fields give too (webapp/runs/fields.py turns a setting's JSON into both);
- trainer.catalog.schema (pre-training) and trainer.catalog.finetune (fine-tuning) serve each
  setting as `Setting.as_json` to the web app: the launch and fine-tuning forms, the API's
  serializers and the sweeps' search spaces are generated from that.

A fine-tuning task places its own settings on the form (QA's doc_stride, SFT's chat_template: the
Task's `settings`, in its module, with its own label and help); their bounds are `TASK_BOUNDS`.

No torch and no Django: the web process and the CLI read it.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from trainer import trackers

PRETRAIN, FINETUNE = "pretrain", "finetune"
BOTH = (PRETRAIN, FINETUNE)


def number(x: float) -> str:
    """A bound or a value as messages write it: 10,000,000 and 1e-08, 0.5 and 0."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, int) or (float(x).is_integer() and abs(x) >= 1):
        return f"{int(x):,}"
    return f"{x:g}"


@dataclass(frozen=True)
class Bounds:
    """A number's allowed range: low to high, both included, unless `min_exclusive` (the value must
    be above `low`: llrd, a factor that 0 would freeze every layer with)."""

    low: float
    high: float
    min_exclusive: bool = False

    def admits(self, value: float) -> bool:
        above = value > self.low if self.min_exclusive else value >= self.low
        return above and value <= self.high

    def refusal(self, name: str, value: float) -> str:
        """The one sentence a config, a form field and an API field refuse `value` of `name` with."""
        if self.min_exclusive:
            return f"{name} must be above {number(self.low)} and at most {number(self.high)}, not {number(value)}."
        return f"{name} must be between {number(self.low)} and {number(self.high)}, not {number(value)}."

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"min": self.low, "max": self.high}
        if self.min_exclusive:
            out["min_exclusive"] = True
        return out

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> "Bounds | None":
        """The bounds of a setting's JSON entry (as_json), None when it has none."""
        if "min" not in entry or "max" not in entry:
            return None
        return cls(entry["min"], entry["max"], bool(entry.get("min_exclusive")))


@dataclass(frozen=True)
class Setting:
    """One setting as the forms and the API offer it. A fine-tuning task declares its own with the
    first fields only (name, label, help, and where it applies)."""

    name: str                     # the config field
    label: str                    # what the form calls it ("Learning rate", not "Lr")
    help: str                     # what it does, and its usual values
    advanced: bool = False        # in the form's "advanced" fold
    section: str = "training"     # the form's card (below)
    families: tuple[str, ...] = ()  # fine-tuning: the checkpoint families it applies to; () = every family
    task_flag: str = ""           # fine-tuning: a Task attribute that must be true for it to apply
    choices: tuple[tuple[str, str], ...] = ()  # (value, label) when it is a choice
    textarea: bool = False        # a long text (a chat template)
    keep_if_empty: bool = False   # an empty text keeps the default the form showed
    multiple: bool = False        # a list of choices (check boxes), none ticked by default
    kinds: tuple[str, ...] = (FINETUNE,)  # the runs whose config has it: PRETRAIN, FINETUNE or BOTH
    bounds: Bounds | None = None  # a number's range, as the configs check it
    technique: str = ""           # fine-tuning: the technique whose choice shows it (LoRA's rank)
    offered: bool = True          # on the form and the API (False: the config checks it, YAML may set it)
    # what one kind changes ({FINETUNE: {"bounds": ..., "advanced": True}}): one declaration, its differences said
    per_kind: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False, hash=False)

    def for_kind(self, kind: str) -> "Setting":
        """This setting as `kind`'s runs take it (per_kind applied)."""
        changes = self.per_kind.get(kind)
        return dataclasses.replace(self, per_kind={}, **changes) if changes else self

    def applies_to(self, family: str, task: Any = None) -> bool:
        """Fine-tuning: whether it applies to a `family` checkpoint and `task` (a Task, or None)."""
        if self.families and family not in self.families:
            return False
        return not self.task_flag or bool(task is not None and getattr(task, self.task_flag, False))

    def as_json(self, default: Any, bounds: Bounds | None = None,
                choices: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The entry the catalog serves: `default` is the config's, `bounds` what its config checks,
        `choices` the values when another module owns them (the masking units), labelled from
        `self.choices` where it names them."""
        out: dict[str, Any] = {"name": self.name, "label": self.label, "help": self.help, "advanced": self.advanced,
                               "section": self.section, "families": list(self.families), "type": type_of(default),
                               "default": list(default) if isinstance(default, tuple) else default}
        if bounds is not None:
            out.update(bounds.as_json())
        labels = dict(self.choices)
        values = tuple(labels) if choices is None else choices
        if values:
            out["choices"] = [[v, labels.get(v, v)] for v in values]
        for flag in ("textarea", "keep_if_empty", "multiple"):
            if getattr(self, flag):
                out[flag] = True
        return out


def type_of(default: Any) -> str:
    """A setting's type in its JSON entry, from its config default."""
    if isinstance(default, (list, tuple)):
        return "list"
    if isinstance(default, dict):
        return "mapping"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "float"
    return "text"


# Sections: pre-training's form has "model" (family, preset, objectives: chosen by their own
# widgets), "training" (main and advanced), "objective", "optimizer" and "family" (one family's
# settings, shown for it); fine-tuning's cards are "training", "techniques", "task" and "multitask".
DEVICES = (("auto", "Auto"), ("cpu", "CPU"), ("cuda", "CUDA GPU"))
TRACKERS = tuple(trackers.LABELS.items())  # report_to's experiment trackers (trainer.trackers)
MAX_STEPS = 10_000_000
MIN_SEQ_LEN = 16

# In the forms' order: within a section, main settings first as listed, then the advanced ones.
SETTINGS: tuple[Setting, ...] = (
    # --- what to train (pre-training; the launch form's own widgets)
    Setting("family", "Family", "Model family: bert, roberta, albert, spanbert, electra, distilbert, unilm, t5, gpt "
            "or elmo.", section="model", kinds=(PRETRAIN,)),
    Setting("preset", "Preset", "Named model size of that family (e.g. \"bert-tiny\", \"bert-base\").",
            section="model", kinds=(PRETRAIN,)),
    Setting("model_overrides", "Model overrides", "Model config fields that replace the preset's values (e.g. "
            "{\"num_layers\": 4, \"hidden_dropout\": 0.0}).", section="model", kinds=(PRETRAIN,)),
    Setting("objectives", "Objectives", "Pre-training objectives: \"mlm\" (masked language modelling), \"nsp\" (next "
            "sentence prediction).", section="model", kinds=(PRETRAIN,)),

    # --- length, batches, schedule, bookkeeping, hardware
    Setting("max_steps", "Training steps", "Optimizer updates in all (or give epochs instead).", kinds=BOTH,
            bounds=Bounds(1, MAX_STEPS)),  # 0 while `epochs` has not been turned into steps (resolve_epochs)
    Setting("epochs", "Epochs (instead of steps)", "Passes over the train split instead of max_steps (0 or empty: "
            "train for max_steps). An epoch is the train split's sequences for these settings (what the run's first "
            "log line counts), so a run trains ceil(epochs x sequences / (batch_size x grad_accum x devices)) steps.",
            kinds=BOTH, bounds=Bounds(0, 100_000), per_kind={FINETUNE: {
                "help": "Passes over the train split instead of steps: ceil(epochs × train examples / batch size) "
                        "steps (0 or empty: train for the steps)."}}),
    Setting("batch_size", "Batch size", "Examples (sequences) per forward pass, per micro-batch.", kinds=BOTH,
            bounds=Bounds(1, 8192)),
    Setting("seq_len", "Sequence length (tokens)", "Maximum sequence length in tokens, special tokens included.",
            kinds=(PRETRAIN,), bounds=Bounds(MIN_SEQ_LEN, 8192)),  # the real upper bound: the model's positions
    Setting("max_length", "Maximum length (tokens)", "Tokens per example; longer inputs are cut (dynamic padding "
            "per batch).", advanced=True, bounds=Bounds(8, 8192)),
    Setting("lr", "Learning rate", "Peak learning rate, reached at the end of warm-up (BERT's fine-tuning recipes: "
            "2e-5 to 5e-5).", kinds=BOTH, bounds=Bounds(1e-7, 1.0),
            per_kind={FINETUNE: {"bounds": Bounds(1e-8, 1.0)}}),  # fine-tuning goes lower
    Setting("warmup_steps", "Warm-up steps", "Steps of linear warm-up from 0 to lr; with \"inverse_sqrt\", the steps "
            "at constant lr before the decay.", kinds=(PRETRAIN,), bounds=Bounds(0, MAX_STEPS)),
    Setting("warmup_ratio", "Warm-up share", "Share of the training steps over which the learning rate climbs from "
            "0, then decays linearly.", advanced=True, bounds=Bounds(0.0, 1.0)),
    Setting("grad_accum", "Gradient accumulation", "Micro-batches per update: each one's loss is divided by "
            "grad_accum, so the update is their mean (as one batch of batch_size x grad_accum).", kinds=BOTH,
            bounds=Bounds(1, 1024), per_kind={FINETUNE: {"offered": False}}),
    Setting("eval_every", "Validate every (steps)", "Steps between validation passes (and one at the end); "
            "fine-tuning computes the task's metrics there.", kinds=BOTH, bounds=Bounds(1, MAX_STEPS),
            per_kind={FINETUNE: {"advanced": True}}),
    Setting("checkpoint_every", "Checkpoint every (steps)", "Save a checkpoint every this many steps (and at the "
            "end).", kinds=BOTH, bounds=Bounds(1, MAX_STEPS), per_kind={FINETUNE: {"offered": False}}),
    Setting("keep_last", "Checkpoints kept", "How many of the newest checkpoints stay on disk; older ones are "
            "removed after each save, except the best by validation loss and those pinned on the run page. Only "
            "the newest keeps the optimizer state (what a resume needs); the others keep the weights. 0 keeps "
            "every checkpoint whole (retention off).", advanced=True, kinds=BOTH, bounds=Bounds(0, 100_000)),
    Setting("masking", "Masking", "\"dynamic\": new masks every time a sequence is fed; \"static\": 10 masks per "
            "sequence, fixed up front.", kinds=(PRETRAIN,), choices=(("dynamic", "Dynamic"), ("static", "Static"))),
    Setting("seed", "Random seed", "Seeds the initial weights, the data order, masks and dropout: the same seed and "
            "settings train the same run again.", kinds=BOTH, bounds=Bounds(0, 2**31 - 1),
            per_kind={FINETUNE: {"advanced": True}}),
    Setting("device", "Device", "Auto: a CUDA GPU when the worker has one, else the CPU. A CUDA GPU run goes to the "
            "gpu queue (a worker with a GPU), a CPU run to the cpu queue, Auto to the default queue.", kinds=BOTH,
            choices=DEVICES),
    Setting("devices", "Devices", "Processes that train the run together, one per GPU (torchrun): a number, or "
            "\"all\" (every GPU of the machine; one process on a CPU-only machine). On the CPU, 2 or more run that "
            "many processes over gloo. The effective batch is batch_size x grad_accum x devices.",
            kinds=(PRETRAIN,), bounds=Bounds(1, 1024)),  # or "all"
    Setting("mask_prob", "Mask probability", "Share of (non-special) tokens chosen for masked-token prediction; for "
            "T5, the noise density of span corruption (15%, spans of mean length 3), token dropping and its "
            "BERT-style objective.", advanced=True, kinds=(PRETRAIN,), bounds=Bounds(0.01, 0.5)),
    Setting("schedule", "Learning-rate schedule", "Learning-rate shape after warm-up: \"linear\" decay to 0, "
            "\"cosine\" decay to 0, \"constant\", or \"inverse_sqrt\" (T5: lr x sqrt(warmup_steps / step) after "
            "warmup_steps steps at lr; T5 itself used lr 0.01 for 10^4 steps, i.e. 1/sqrt(max(step, 10^4))).",
            advanced=True, kinds=BOTH, per_kind={FINETUNE: {"offered": False}},
            choices=(("linear", "Linear decay"), ("cosine", "Cosine decay"), ("constant", "Constant"),
                     ("inverse_sqrt", "Inverse square root (T5)"))),
    Setting("weight_decay", "Weight decay", "Decoupled weight decay (not applied to biases and normalization "
            "weights).", advanced=True, kinds=BOTH, bounds=Bounds(0.0, 1.0), per_kind={FINETUNE: {"offered": False}}),
    Setting("clip_grad", "Gradient clipping", "Clip the global gradient norm to this value (0 = no clipping).",
            advanced=True, kinds=BOTH, bounds=Bounds(0.0, 1000.0), per_kind={FINETUNE: {"offered": False}}),
    Setting("eval_batches", "Validation batches", "Validation batches per evaluation (the same batches every time).",
            advanced=True, kinds=(PRETRAIN,), bounds=Bounds(1, 10_000)),
    Setting("log_every", "Log every (steps)", "Report training metrics every this many steps (and at step 1).",
            advanced=True, kinds=BOTH, bounds=Bounds(1, 100_000), per_kind={FINETUNE: {"offered": False}}),
    Setting("precision", "Precision", "\"auto\" (bf16 autocast on CUDA, fp32 on CPU), \"fp32\" or \"bf16\" (CUDA "
            "only).", advanced=True, kinds=BOTH, per_kind={FINETUNE: {"offered": False}},
            choices=(("auto", "Auto"), ("fp32", "fp32"), ("bf16", "bf16 (GPU only)"))),
    Setting("num_threads", "CPU threads", "CPU threads the run's PyTorch uses (0: PyTorch's default, one per core).",
            advanced=True, kinds=BOTH, bounds=Bounds(0, 1024)),
    Setting("data_workers", "Data worker processes", "Processes that build the training batches beside the training "
            "process, so that steps do not wait for them: -1 = auto (one per CPU core the training threads leave "
            "free, at most 4; none on a 1-core machine), 0 = none (batches built in the training process). The "
            "batches, their order and a resumed run are the same whatever the number.", advanced=True, kinds=BOTH,
            bounds=Bounds(-1, 64)),  # -1: trainer.config.AUTO_WORKERS
    Setting("strategy", "Multi-device strategy", "How several devices share the work: \"ddp\" (each holds the whole "
            "model and averages gradients), \"fsdp\" (FSDP2: weights, gradients and optimizer state sharded across "
            "them, for models that do not fit on one), or \"auto\" (FSDP2 when the weights and optimizer state would "
            "not fit in one device's free memory, else DDP).", advanced=True, kinds=(PRETRAIN,),
            choices=(("auto", "Auto (FSDP2 when the model does not fit one device)"), ("ddp", "DDP (replicated)"),
                     ("fsdp", "FSDP2 (sharded)"))),
    Setting("compile", "Compile the model (torch.compile)", "Compile the model with torch.compile before training: "
            "faster steps, after a first step that spends a minute or more compiling. \"auto\" compiles on a CUDA GPU "
            "and not on the CPU; \"on\" or \"off\" (true and false mean the same). Needs a C++ compiler on the CPU "
            "(Triton on a GPU); a run that cannot compile stops with the reason.", advanced=True, kinds=(PRETRAIN,),
            choices=(("auto", "Auto (on a GPU)"), ("on", "On"), ("off", "Off"))),
    Setting("activation_checkpointing", "Activation checkpointing", "Recompute each transformer block's activations "
            "in the backward pass instead of keeping them: about a third more compute for far less memory, so a "
            "larger preset, batch or seq_len fits (the encoder families, T5 and GPT; not ELMo).", advanced=True,
            kinds=(PRETRAIN,)),
    Setting("report_to", "Mirror the metrics to", "Experiment trackers that also get every metric, the settings and "
            "(fine-tuning) the test report, written into the run's folder with no server or network; the run's page "
            "then says where. Each needs its package installed where the run trains (pip install tensorboard, mlflow "
            "or wandb). Empty = none.", advanced=True, kinds=BOTH, choices=TRACKERS, multiple=True),
    Setting("group_by_length", "Group examples by length", "Batch training examples of similar length together "
            "(each epoch still shuffled), so that little of each batch is padding.", advanced=True),

    # --- pre-training: the objectives' details, the optimizer, one family's settings
    Setting("masking_unit", "Masking unit", "What one mask covers: \"token\" (BERT), \"word\" (whole-word masking, "
            "BERT-wwm), \"phrase\" (ERNIE phrase masking), \"ngram\" (ALBERT, 1- to 3-grams of words) or \"span\" "
            "(SpanBERT, with its span boundary objective). Empty = the family's default (ALBERT \"ngram\", SpanBERT "
            "\"span\", otherwise \"token\").", section="objective", kinds=(PRETRAIN,),
            choices=(("token", "Tokens (BERT)"), ("word", "Whole words (BERT-wwm)"), ("phrase", "Phrases (ERNIE)"),
                     ("ngram", "N-grams of words (ALBERT)"), ("span", "Spans (SpanBERT)"))),
    Setting("packing", "Packing", "How single-segment inputs are filled (RoBERTa): \"full-sentences\" (whole "
            "sentences up to seq_len, across documents, with a separator between them) or \"doc-sentences\" (never "
            "across a document boundary). Sentence-pair objectives (NSP, SOP, UniLM) make their own pairs and take "
            "\"full-sentences\".", section="objective", kinds=(PRETRAIN,),
            choices=(("full-sentences", "Full sentences, across documents"),
                     ("doc-sentences", "Sentences of one document"))),
    Setting("optimizer", "Optimizer", "\"adamw\" or \"adafactor\" (T5's: PyTorch's Adafactor, steps relative to each "
            "weight's size; lr caps that step; betas and eps do not apply). Empty = the family's (T5 Adafactor, "
            "otherwise AdamW).", section="optimizer", kinds=BOTH, per_kind={FINETUNE: {"offered": False}},
            choices=(("adamw", "AdamW"), ("adafactor", "Adafactor (T5)"))),
    Setting("betas", "AdamW betas", "AdamW beta1 and beta2 (Adafactor ignores them).", section="optimizer",
            kinds=BOTH, per_kind={FINETUNE: {"offered": False}}),
    Setting("eps", "AdamW epsilon", "AdamW epsilon (Adafactor ignores it).", section="optimizer", kinds=BOTH,
            bounds=Bounds(1e-12, 1e-2), per_kind={FINETUNE: {"offered": False}}),
    # (their bounds are their objectives' own: trainer.objectives' Objective.settings)
    Setting("rtd_weight", "RTD loss weight", "ELECTRA: weight of the discriminator's replaced-token-detection loss; "
            "loss = MLM(generator) + rtd_weight x RTD(discriminator). The paper uses 50.", section="family",
            kinds=(PRETRAIN,)),
    Setting("teacher_checkpoint", "Teacher checkpoint", "DistilBERT: folder of a trained BERT checkpoint "
            "(model_config.json + model.safetensors, trained with the same tokenizer). The student gets half its "
            "layers, initialised from every other teacher layer.", section="family", kinds=(PRETRAIN,)),
    Setting("distill_temperature", "Temperature", "DistilBERT: softmax temperature of the soft targets (teacher and "
            "student logits are divided by it).", section="family", kinds=(PRETRAIN,)),
    Setting("distill_soft_weight", "Soft-target loss weight", "DistilBERT: weight of the soft-target loss, "
            "KL(teacher || student) at the temperature, times temperature squared.", section="family",
            kinds=(PRETRAIN,)),
    Setting("distill_mlm_weight", "MLM loss weight", "DistilBERT: weight of the student's own masked-LM loss on the "
            "true tokens.", section="family", kinds=(PRETRAIN,)),
    Setting("distill_cos_weight", "Cosine loss weight", "DistilBERT: weight of the cosine loss between the student's "
            "and the teacher's final hidden states (real tokens).", section="family", kinds=(PRETRAIN,)),
    Setting("plm_k", "Partial prediction K (1/K predicted)", "XLNet: partial prediction, about 1/K of the tokens (the "
            "last 1/K of each factorisation order) are predicted, in spans of 1 to 5 tokens. The paper uses K = 6 "
            "(base) and 7 (large).", section="family", kinds=(PRETRAIN,)),
    Setting("tinybert_temperature", "Prediction-layer temperature", "TinyBERT: temperature of the prediction-layer "
            "distillation (soft cross-entropy of the student's MLM logits against the teacher's). The paper uses 1.",
            section="family", kinds=(PRETRAIN,)),
    Setting("tinybert_prediction_share", "Share of steps on prediction-layer distillation", "TinyBERT: share of "
            "max_steps, at the end of the run, spent on prediction-layer distillation; the steps before it distil "
            "the embedding, attention and hidden-state layers (0 = layers only, 1 = predictions only).",
            section="family", kinds=(PRETRAIN,)),

    # --- fine-tuning techniques (trainer/finetune/techniques.py)
    Setting("llrd", "Layer-wise learning-rate decay", "The head trains at the learning rate, each layer below at the "
            "one above's times this factor. 1 turns it off; 0.8 to 0.95 is usual.", advanced=True,
            section="techniques", bounds=Bounds(0.0, 1.0, min_exclusive=True)),
    Setting("freeze_embeddings", "Freeze the embeddings", "Keep the embeddings exactly as pre-trained.",
            advanced=True, section="techniques"),
    Setting("freeze_layers", "Frozen bottom layers", "Freeze the bottom k encoder layers (0: none).", advanced=True,
            section="techniques", bounds=Bounds(0, 1000)),
    Setting("gradual_unfreeze_every", "Gradual unfreezing (steps)", "ULMFiT: train the head alone, then unfreeze "
            "one more layer group from the top every n steps (0: off).", advanced=True, section="techniques",
            bounds=Bounds(0, MAX_STEPS)),
    Setting("early_stopping_patience", "Early-stopping patience", "Stop after this many validations without a "
            "better primary metric; the best checkpoint is restored before the test split (0: off).",
            advanced=True, section="techniques", bounds=Bounds(0, 1000)),
    Setting("class_weights", "Class weights", "Balanced: weigh each class's loss by how rare it is in the train "
            "split.", advanced=True, section="techniques", task_flag="balances_classes",
            choices=(("none", "none"), ("balanced", "balanced"))),
    # LoRA (trainer/finetune/lora.py) and bottleneck adapters (trainer/finetune/adapters.py): shown when chosen
    Setting("lora_r", "LoRA rank r", "The adapters' size (1 to 64 is usual).", section="techniques",
            technique="lora", bounds=Bounds(0, 1024)),
    Setting("lora_alpha", "LoRA alpha", "The update is scaled by alpha / r.", section="techniques",
            technique="lora", bounds=Bounds(0.0, 100_000.0)),
    Setting("lora_dropout", "LoRA dropout", "Dropout on the adapters' input.", advanced=True, section="techniques",
            technique="lora", bounds=Bounds(0.0, 0.9)),
    Setting("lora_targets", "LoRA targets", "The projections LoRA adapts, comma-separated: query, key, value, "
            "output, ffn_up, ffn_down.", section="techniques", technique="lora", keep_if_empty=True),
    Setting("adapter_size", "Adapter size", "The adapters' bottleneck size d (the T5 study tried 32 to 2048).",
            section="techniques", technique="adapters", bounds=Bounds(0, 8192)),

    # --- T5 multi-task mixing (trainer/finetune/mixing.py): beside a checkpoint that trains text to text
    Setting("task_name", "Main task's name", "The main dataset's task in the metric names (exact_match/<task>); "
            "empty: from its prefix.", section="multitask", advanced=True),
    Setting("mixing", "Mixing", "How often each task's examples are drawn: in proportion to its size (capped at K), "
            "those rates to the power 1/T renormalised, or equally.", section="multitask", keep_if_empty=True,
            choices=(("proportional", "examples-proportional (cap K)"), ("temperature", "temperature-scaled (T)"),
                     ("equal", "equal"))),
    Setting("mixing_limit", "Size cap K", "The most examples a task counts as in proportional and temperature "
            "mixing (0: no limit).", section="multitask", advanced=True, bounds=Bounds(0, 2**40)),
    Setting("mixing_temperature", "Temperature T", "T of temperature mixing (1: proportional; large: nearly equal; "
            "2 in the T5 study).", section="multitask", advanced=True, bounds=Bounds(0.01, 1000.0)),
)

# The bounds of the settings fine-tuning tasks place themselves (trainer.finetune's task modules:
# Task.settings), as FinetuneConfig checks them whichever task shows them.
TASK_BOUNDS: dict[str, Bounds] = {
    "label_smoothing": Bounds(0.0, 0.5),
    # extractive QA (trainer.finetune.qa)
    "doc_stride": Bounds(0, 4096),
    "max_answer_length": Bounds(1, 8192),
    "n_best": Bounds(1, 100),
    "null_score_threshold": Bounds(-100.0, 100.0),
    # generative tasks (trainer.finetune.text2text, trainer.finetune.sft, trainer.finetune.gpt1)
    "max_target_length": Bounds(1, 8192),
    "target_mask_prob": Bounds(0.01, 1.0),
    "num_beams": Bounds(1, 16),
    "samples_shown": Bounds(0, 50),
    "aux_lm_weight": Bounds(0.0, 10.0),
}


def settings(kind: str) -> list[Setting]:
    """The settings of `kind`'s runs (offered or not), as that kind takes them, in the forms' order."""
    return [s.for_kind(kind) for s in SETTINGS if kind in s.kinds]


def offered(kind: str) -> list[Setting]:
    """The settings `kind`'s form and API offer."""
    return [s for s in settings(kind) if s.offered]


def get(name: str, kind: str) -> Setting:
    """One setting of `kind`'s runs, by name (KeyError for another)."""
    found = next((s for s in settings(kind) if s.name == name), None)
    if found is None:
        raise KeyError(name)
    return found


def bounds(kind: str) -> dict[str, Bounds]:
    """{name: bounds} of every number `kind`'s config checks (for pre-training, each objective's
    own settings come on top: trainer.config.bounds)."""
    out = {s.name: s.bounds for s in settings(kind) if s.bounds is not None}
    if kind == FINETUNE:
        out.update(TASK_BOUNDS)
    return out


def choices(kind: str) -> dict[str, tuple[str, ...]]:
    """{name: its allowed values} of every setting of `kind` with a fixed set of values."""
    return {s.name: tuple(v for v, _ in s.choices) for s in settings(kind) if s.choices and not s.multiple}
