"""How to fine-tune one checkpoint on one labelled dataset: a flat record like RunConfig (YAML
and the API store it as it is), read by the code in setting groups (OptimArgs for the optimizer).

The training loop (trainer.training.engine.Loop) reads the same names from it as from a
pre-training RunConfig: max_steps, grad_accum, clip_grad, the eval/log/checkpoint intervals, the
optimizer fields, and `family` / `preset` / `objectives` / `to_dict()` for checkpoints and logs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from trainer import settings_schema, trackers
from trainer.config import AUTO_WORKERS, FlatRecord, OptimArgs, is_auto
from trainer.errors import ConfigError
from trainer.finetune.chat import DEFAULT_CHAT_TEMPLATE, check_chat_template
from trainer.prep.labelled.tasks import TASKS as DATASET_TASKS
from trainer.settings_schema import FINETUNE

# Each setting's bounds, choices, label and help: trainer.settings_schema (with pre-training's).
CHOICES = settings_schema.choices(FINETUNE)


@dataclass
class FinetuneConfig(FlatRecord):
    """Fine-tune `checkpoint` (a pre-training or fine-tuned checkpoint folder) on `dataset` (a
    folder written by trainer.prep.labelled.ingest) for `task` (empty: the dataset's)."""

    WHAT = "fine-tuning"
    RECORD = "fine-tuning config"

    checkpoint: str = ""
    dataset: str = ""
    task: str = ""
    max_length: int = 128
    max_steps: int = 300
    epochs: float = 0.0
    batch_size: int = 16
    grad_accum: int = 1
    optimizer: str = "adamw"
    lr: float = 5e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1  # of max_steps (rounded up, as transformers does), then the schedule's decay
    schedule: str = "linear"
    clip_grad: float = 1.0
    label_smoothing: float = 0.0
    # Extractive QA (trainer.finetune.qa); the other tasks ignore these.
    doc_stride: int = 0
    """Context tokens that consecutive windows of a long context share. 0 = a third of max_length (128 at 384, the published SQuAD setting)."""
    max_answer_length: int = 30
    """The longest answer, in tokens, that prediction considers."""
    n_best: int = 20
    """How many of the highest start logits and of the highest end logits of each window are paired into candidate answers."""
    null_score_threshold: float = 0.0
    """SQuAD 2.0: predict "no answer" when the [CLS] score (its start + end logit) beats the best answer's score by more than this."""
    eval_every: int = 50
    checkpoint_every: int = 100
    keep_last: int = 3  # checkpoints kept besides the best and the pinned (trainer.training.retention); 0 = all
    log_every: int = 10
    report_to: list = field(default_factory=list)
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    num_threads: int = 0
    data_workers: int = AUTO_WORKERS
    # Filled in from the checkpoint by trainer.finetune.engine (what the loop's logs and checkpoints name).
    family: str = ""
    preset: str = field(default="", repr=False)
    label_words: list = field(default_factory=list, repr=False)
    """Classification as text to text (T5, trainer/finetune/text_classify.py): the dataset's labels, the words the model writes (filled in by the engine)."""
    # Techniques (trainer/finetune/techniques.py; checked by check_techniques below).
    llrd: float = 1.0  # layer-wise lr decay: the head lr, the layer below lr * llrd, ...; 1 = off
    freeze_embeddings: bool = False
    freeze_layers: int = 0  # the bottom k encoder layers never train
    gradual_unfreeze_every: int = 0  # steps; ULMFiT: the head first, one layer group more each time; 0 = off
    early_stopping_patience: int = 0  # evaluations without a better primary metric; 0 = off
    class_weights: str = "none"  # "balanced": n_samples / (n_classes * count) from the train split
    group_by_length: bool = True
    """Put training examples of similar length in the same batch (each epoch still shuffled), so that dynamic padding pads little (every task but multi-task mixing). A resumed run keeps the order it started with."""
    batch_order: str = field(default="", repr=False)
    """Filled in by trainer.finetune.engine: the order the run's training examples are drawn in, "length_grouped" or "shuffled"; a resumed run goes on in the order its checkpoint records."""
    # Generative tasks: text to text (T5, UniLM; trainer/finetune/text2text.py) and SFT (GPT;
    # trainer/finetune/sft.py). The other tasks ignore these; check_generation checks them.
    source_prefix: str = ""
    """Text to text, and classification or regression on T5 (the label written as a word): put before every input (T5's task prefix, e.g. "summarize: ", "sst2 sentence: ")."""
    max_target_length: int = 64
    """Text to text: target tokens kept for training and generated at evaluation; SFT: tokens generated for the samples."""
    target_mask_prob: float = 0.7
    """UniLM: the share of target tokens masked and predicted in each training example (0.7 in Dong et al. 2019)."""
    num_beams: int = 1
    """Beams when generating for evaluation (1: greedy)."""
    samples_shown: int = 3
    """Validation examples whose generated text each evaluation writes to the log."""
    chat_template: str = DEFAULT_CHAT_TEMPLATE
    """SFT: how one chat turn is written; {role} is the speaker (system, user, assistant), {content} the text. The model learns an assistant's content and the end-of-text token after it."""
    aux_lm_weight: float = 0.5
    """GPT-1's classifier (trainer/finetune/gpt1.py): the weight of the auxiliary language-model loss (0.5 in the paper; 0: off)."""
    # T5 multi-task mixing (trainer/finetune/mixing.py): text to text over several datasets at once.
    extra_datasets: list = field(default_factory=list)
    """Text to text: more datasets trained in the same run, each {dataset: folder, prefix: "classify: ", name: optional}; classification datasets become text with the label as the target word."""
    task_name: str = ""
    """Multi-task: the main dataset's task name in the metric keys (empty: from source_prefix)."""
    mixing: str = "proportional"
    """Multi-task: how often each task's examples are drawn: proportional (to its size, capped at mixing_limit), temperature (those rates to the power 1/mixing_temperature, renormalised) or equal."""
    mixing_limit: int = 0
    """Multi-task: the artificial limit K on a task's size in proportional and temperature mixing (0: none)."""
    mixing_temperature: float = 2.0
    """Multi-task: T of temperature mixing (1: proportional; large: nearly equal; 2 in the T5 study)."""
    # LoRA (trainer/finetune/lora.py): 0 = off; otherwise only the adapters and the head train.
    lora_r: int = 0
    """LoRA's rank r (Hu et al. 2021: 1 to 64); 0 turns LoRA off."""
    lora_alpha: float = 16.0
    """LoRA's alpha: the update is scaled by alpha / r."""
    lora_dropout: float = 0.05
    """Dropout on the adapters' input."""
    lora_targets: str = "query,value"
    """The projections LoRA adapts, comma-separated: query, key, value, output, ffn_up, ffn_down."""
    # Bottleneck adapters (trainer/finetune/adapters.py): 0 = off; otherwise only the adapters, the
    # layer norms and the head train.
    adapter_size: int = 0
    """The adapters' bottleneck size d (Houlsby et al. 2019; the T5 study tried 32 to 2048); 0 turns them off."""

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)  # type: ignore[assignment]
        if is_auto(self.data_workers):
            self.data_workers = AUTO_WORKERS
        self._check_numbers()
        for name in ("schedule", "device", "precision"):
            if getattr(self, name) not in CHOICES[name]:
                raise ConfigError(f"{name} must be one of {', '.join(CHOICES[name])}, not {getattr(self, name)!r}.")
        if self.optimizer != "adamw":
            raise ConfigError(f"Fine-tuning uses AdamW; optimizer {self.optimizer!r} is not offered here.")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"betas must be two numbers in [0, 1), like [0.9, 0.999], not {list(self.betas)}.")
        if self.doc_stride and self.doc_stride >= self.max_length // 2:
            raise ConfigError(f"doc_stride must be less than half of max_length ({self.max_length // 2}), so that "
                              f"each window moves on past the last; 0 picks a third of max_length.")
        if not self.checkpoint:
            raise ConfigError("Name the checkpoint to fine-tune (checkpoint: its folder).")
        if not self.dataset:
            raise ConfigError("Name the labelled dataset to fine-tune on (dataset: its folder).")
        check_techniques(self)
        check_generation(self)
        self.report_to = trackers.check(self.report_to)

    def _check_numbers(self) -> None:
        """Every number against its bounds (trainer.settings_schema, fine-tuning's); a whole-number
        field given as 3.0 (YAML, JSON) is kept as 3."""
        for name, bound in settings_schema.bounds(FINETUNE).items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a number, not {value!r}.")
            if isinstance(self.__dataclass_fields__[name].default, int):
                if value != int(value):
                    raise ConfigError(f"{name} must be a whole number, not {value!r}.")
                value = int(value)
                setattr(self, name, value)
            if name == "max_steps" and value == 0 and self.epochs:
                continue  # set from the epochs when the run starts (trainer.config.resolve_epochs)
            if not bound.admits(value):
                raise ConfigError(bound.refusal(name, value))

    # -- what the training loop reads like a RunConfig's
    @property
    def seq_len(self) -> int:
        return self.max_length

    @property
    def objectives(self) -> list[str]:
        return [self.task]

    @property
    def warmup_steps(self) -> int:
        """warmup_ratio of max_steps, rounded up as transformers' TrainingArguments.get_warmup_steps
        does (math.ceil), so that the same ratio warms up for the same steps in both."""
        return math.ceil(self.max_steps * self.warmup_ratio)

    @property
    def multi_task(self) -> bool:
        """Whether the run mixes several datasets (trainer.finetune.mixing)."""
        return bool(self.extra_datasets)

    @property
    def optim(self) -> OptimArgs:
        return OptimArgs(optimizer=self.optimizer, lr=self.lr, betas=tuple(self.betas), eps=self.eps,
                         weight_decay=self.weight_decay, warmup_steps=self.warmup_steps, schedule=self.schedule,
                         clip_grad=self.clip_grad)


# -------------------------------------------------------------------------- techniques
CLASS_WEIGHTS = ("none", "balanced")
BATCH_ORDERS = ("", "length_grouped", "shuffled")  # trainer.finetune.engine.batch_order


def check_techniques(config: FinetuneConfig) -> None:
    """ConfigError with a sentence for a technique setting that is not one (the numbers' bounds
    are the schema's, checked before). What depends on the model or the dataset (freeze_layers
    against the layer count, class weights against the task) is checked by
    trainer.finetune.techniques once they are loaded."""
    for name in ("freeze_embeddings", "group_by_length"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name} must be true or false, not {getattr(config, name)!r}.")
    if config.batch_order not in BATCH_ORDERS:
        raise ConfigError(f"batch_order must be one of {', '.join(BATCH_ORDERS[1:])} (or empty), not "
                          f"{config.batch_order!r}.")
    if config.class_weights not in CLASS_WEIGHTS:
        raise ConfigError(f"class_weights must be one of {', '.join(CLASS_WEIGHTS)}, not {config.class_weights!r}.")


MAX_PREFIX = 500


def check_generation(config: FinetuneConfig) -> None:
    """ConfigError with a sentence for a generative task's setting that cannot work (the numbers'
    bounds are the schema's; what depends on the model is checked once it is loaded)."""
    if not isinstance(config.source_prefix, str) or len(config.source_prefix) > MAX_PREFIX:
        raise ConfigError(f"source_prefix must be a text of at most {MAX_PREFIX} characters, such as "
                          f"\"summarize: \".")
    check_chat_template(config.chat_template)
    check_lora(config)
    check_adapters(config)
    check_mixing(config)


MAX_EXTRA_DATASETS = 16
STRATEGIES = ("proportional", "temperature", "equal")  # trainer.finetune.mixing.mixing_rates
MIX_TASK = "text_to_text"  # the task a multi-task run trains: every dataset written as text
MIX_LABELS = ("classes", "number")  # the kinds of label (TaskSpec.labels) mixing.as_text writes as a target word
# the dataset tasks a multi-task run mixes: its own, and those whose label it writes as text
MIX_DATASET_TASKS = (MIX_TASK, *(name for name, spec in DATASET_TASKS.items() if spec.labels in MIX_LABELS))


def task_name(prefix: str, fallback: str) -> str:
    """A short name for metric keys: the prefix's words joined by "_" ("summarize: " -> summarize)."""
    words = re.findall(r"[A-Za-z0-9]+", prefix.lower())
    return "_".join(words)[:40] or fallback


def mix_task_names(config: dict) -> list[str]:
    """The tasks of a multi-task run, from its config dict (the main dataset's first; [] for a
    single-dataset run): what its metric keys `exact_match/<task>` name. No torch."""
    extras = config.get("extra_datasets") or []
    if not isinstance(extras, (list, tuple)) or not extras:
        return []
    main = str(config.get("task_name") or "") or task_name(str(config.get("source_prefix") or ""), "task1")
    names = [main]
    for i, spec in enumerate(extras, 2):
        spec = spec if isinstance(spec, dict) else {}
        names.append(str(spec.get("name") or "") or task_name(str(spec.get("prefix") or ""), f"task{i}"))
    return names


def check_mixing(config: FinetuneConfig) -> None:
    """The multi-task settings (trainer.finetune.mixing): a list of {dataset, prefix, name}."""
    if config.mixing not in STRATEGIES:
        raise ConfigError(f"mixing must be one of {', '.join(STRATEGIES)}, not {config.mixing!r}.")
    if isinstance(config.mixing_limit, bool) or not isinstance(config.mixing_limit, int):
        raise ConfigError(f"mixing_limit must be a whole number of examples (0: no limit), not {config.mixing_limit!r}.")
    if not isinstance(config.task_name, str) or len(config.task_name) > 40:
        raise ConfigError("task_name must be a text of at most 40 characters.")
    extras = config.extra_datasets
    if not isinstance(extras, (list, tuple)) or len(extras) > MAX_EXTRA_DATASETS:
        raise ConfigError(f"extra_datasets must be a list of at most {MAX_EXTRA_DATASETS} datasets, each "
                          "{dataset: folder, prefix: \"classify: \"}.")
    for i, spec in enumerate(extras, 1):
        if not isinstance(spec, dict) or not isinstance(spec.get("dataset"), str) or not spec["dataset"]:
            raise ConfigError(f"extra_datasets entry {i} must be {{dataset: folder, prefix: \"classify: \"}}, "
                              f"not {spec!r}.")
        unknown = sorted(set(spec) - {"dataset", "prefix", "name", "id"})  # id: the web app's dataset row
        if unknown:
            raise ConfigError(f"extra_datasets entry {i} has unknown field(s) {', '.join(unknown)}; "
                              "it takes dataset, prefix and name.")
        for key in ("prefix", "name"):
            value = spec.get(key, "")
            if not isinstance(value, str) or len(value) > (MAX_PREFIX if key == "prefix" else 40):
                raise ConfigError(f"extra_datasets entry {i}: {key} must be a short text, not {value!r}.")
    names = mix_task_names(config.to_dict())
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise ConfigError(f"Two tasks of the mix are both called {twice!r}; give them different prefixes or names.")
    if extras and config.task and config.task != MIX_TASK:
        raise ConfigError("Multi-task mixing (extra_datasets) trains text to text; set task to text_to_text "
                          "or leave it empty.")


# The projections LoRA can adapt (models_lib.core.lora.TARGETS; kept here so that reading a config
# imports no torch).
LORA_TARGETS = ("query", "key", "value", "output", "ffn_up", "ffn_down")


def check_lora(config: FinetuneConfig) -> None:
    if isinstance(config.lora_r, bool) or not isinstance(config.lora_r, int):
        raise ConfigError(f"lora_r must be a whole number (0: LoRA off), not {config.lora_r!r}.")
    if not isinstance(config.lora_targets, str):
        raise ConfigError(f"lora_targets must be names joined by commas, such as \"query,value\"; "
                          f"not {config.lora_targets!r}.")
    targets = [t.strip() for t in config.lora_targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in LORA_TARGETS]
    if unknown or not targets:
        raise ConfigError(f"lora_targets must name some of {', '.join(LORA_TARGETS)}, joined by commas; "
                          f"{', '.join(unknown) or 'it names none'} {'is' if len(unknown) == 1 else 'are'} not one.")
    if config.lora_r and config.lora_alpha <= 0:
        raise ConfigError("lora_alpha must be above 0 (the update is scaled by alpha / r).")
    if config.lora_r and config.gradual_unfreeze_every:
        raise ConfigError("LoRA trains only its adapters and the head, and gradual unfreezing would unfreeze whole "
                          "layers: set lora_r or gradual_unfreeze_every to 0.")


def check_adapters(config: FinetuneConfig) -> None:
    if isinstance(config.adapter_size, bool) or not isinstance(config.adapter_size, int):
        raise ConfigError(f"adapter_size must be a whole number (0: adapters off), not {config.adapter_size!r}.")
    if config.adapter_size and config.lora_r:
        raise ConfigError("Adapters and LoRA both train a few added weights in place of the model's own; choose "
                          "one: set adapter_size or lora_r to 0.")
    if config.adapter_size and config.gradual_unfreeze_every:
        raise ConfigError("Adapters train only themselves, the layer norms and the head, and gradual unfreezing "
                          "would unfreeze whole layers: set adapter_size or gradual_unfreeze_every to 0.")
