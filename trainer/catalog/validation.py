"""Whether a run config can be trained: its family, preset, objectives, masking unit,
packing, family settings and seq_len fit together, and a tokenizer suits it.

Everything family-specific comes from the run's Family (trainer.families): its table of
objectives, units and packings, and its hooks (`check_run`, `check_model_config`,
`validate_teacher`). Every refusal is a ConfigError with a sentence saying what to change.
"""
from __future__ import annotations

import dataclasses

from typing import TYPE_CHECKING, Any

from trainer import families
from trainer import objectives
from trainer import settings_schema
from trainer.catalog.size import batch_of, check_model_size, overrides_of
from trainer.errors import ConfigError
from trainer.families import Family
from trainer.settings_schema import PRETRAIN

if TYPE_CHECKING:
    from trainer.config import RunConfig


def with_objectives(family: Family) -> Family:
    """The family with the objectives registered for it (Objective.families) added to those it
    lists itself: what the launch form offers and validation accepts."""
    extra = tuple(o.name for o in objectives.all() if family.name in o.families and o.name not in family.objectives)
    names = family.objectives + extra
    settings = tuple(s for o in names for s in objectives.get(o).settings if s not in family.config_fields)
    return dataclasses.replace(family, objectives=names, config_fields=family.config_fields + tuple(dict.fromkeys(settings)))


def validate(config: "RunConfig") -> None:
    """Raise ConfigError unless the config's family, preset, objectives, masking unit,
    packing, family settings and seq_len fit together. Reads no files: a DistilBERT teacher
    (a BERT checkpoint on disk that the student's shape fits) is checked by validate_teacher,
    which the engine, the CLI and the web app call before training, so that a stored config
    stays loadable after its teacher is deleted, and the web app can check that the teacher
    is the user's own before anything reads it."""
    family = with_objectives(families.get(config.family))
    presets = family.presets
    if config.preset not in presets:
        raise ConfigError(
            f"Unknown {family.label} preset {config.preset!r}; choose one of {', '.join(presets)}."
        )
    _check_objectives(family, config)
    _check_masking_and_packing(family, config)
    _check_family_fields(family, config)
    reserved = sorted(set(config.model_overrides) & {"vocab_size", "family", *family.token_fields})
    if reserved:
        raise ConfigError(f"model_overrides cannot set {', '.join(reserved)}: "
                          f"{'the family sets it' if reserved == ['family'] else 'it comes from the tokenizer'}.")
    try:
        model_cfg = family.preset_config(config.preset, vocab_size=1024, **config.model_overrides)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"model_overrides do not fit the {config.preset} preset: {_msg(e)}") from None
    for mf in family.model_fields:
        mf.check(getattr(model_cfg, mf.name), family.label)
    family.check_model_config(model_cfg)
    # The setting alone here: a stored config must read back whatever the machine's memory is now.
    # Launching (webapp) and the worker (training.steps) check against the memory too.
    check_model_size(model_cfg, training=True, fields=overrides_of(config), where="This run's model", memory=False)
    positions, cap = max_positions(model_cfg), int(settings_schema.get("seq_len", PRETRAIN).bounds.high)
    if positions >= cap:  # no position table (T5's relative buckets, ELMo's LSTMs): RunConfig's own bound
        if not 16 <= config.seq_len <= cap:
            raise ConfigError(f"seq_len must be between 16 and {cap:,} tokens, not {config.seq_len}.")
    elif not (16 <= config.seq_len <= positions):
        raise ConfigError(f"seq_len must be between 16 and the model's {positions} positions, not {config.seq_len}.")


def check_memory(config: "RunConfig", *, memory: int, memory_of: str, vocab_size: int = 1024,
                 processes: int = 1) -> None:
    """validate()'s size check against a worker's memory, with the activations of batch_size x
    seq_len in each of its `processes` (a CPU run): ConfigError naming the fields and the estimate.
    Kept out of validate(), which must not depend on a machine: the web app calls it at launch
    with what the workers advertise, the worker again before it allocates (training.steps)."""
    family = families.get(config.family)
    model_cfg = family.preset_config(config.preset, vocab_size=vocab_size, **config.model_overrides)
    check_model_size(model_cfg, training=True, fields=overrides_of(config), where="This run's model", memory=memory,
                     memory_of=memory_of, batch=batch_of(config, processes=processes))


def _check_objectives(family: Family, config: "RunConfig") -> None:
    for o in config.objectives:
        if o not in objectives.REGISTRY:
            raise ConfigError(f"Unknown objective {o!r}; known objectives are {', '.join(objectives.REGISTRY)}.")
        if o not in family.objectives:
            raise ConfigError(family.refusals.get(o) or f"{family.label} cannot be trained with {objectives.get(o).label}.")
    if family.one_objective and len(config.objectives) != 1:
        raise ConfigError(f"{family.label} trains one objective per run; choose one of "
                          f"{', '.join(family.objectives)}, not {' + '.join(config.objectives)}.")
    missing = [o for o in family.required_objectives if o not in config.objectives]
    if missing:
        names = " and ".join(objectives.get(o).label for o in missing)
        raise ConfigError(f"{family.label} needs the {names}{'' if 'objective' in names.lower() else ' objective'}.")
    if sorted(config.objectives) not in [sorted(s) for s in family.allowed_objective_sets()]:
        raise ConfigError(f"{family.label} cannot combine the objectives {', '.join(config.objectives)}.")
    try:
        objectives.resolve(config.objectives)  # one objective's collator and step must train the set
    except ConfigError:
        raise ConfigError(f"{family.label} cannot combine the objectives {', '.join(config.objectives)}: no "
                          f"objective trains them together.") from None


def _check_masking_and_packing(family: Family, config: "RunConfig") -> None:
    unit = config.masking_unit
    if not family.masks_tokens:
        if unit != family.default_masking_unit:
            raise ConfigError(f"masking_unit applies to masked-LM objectives; {family.label} masks no words or spans "
                              f"that way, so leave it out (not {unit!r}).")
        if config.packing not in family.packings:
            raise ConfigError(f"packing applies to the encoder family's single segments; {family.label} reads the "
                              f"corpus as one stream cut into pieces of seq_len tokens, so leave it out "
                              f"(not {config.packing!r}).")
        return
    if unit not in family.masking_units:
        if unit == "span":
            raise ConfigError(f"Span masking (masking_unit \"span\") belongs to SpanBERT's span boundary objective "
                              f"(SBO); choose the SpanBERT family, or another masking unit for {family.label} "
                              f"({', '.join(family.masking_units)}).")
        if family.masking_units == ("span",):
            raise ConfigError(f"{family.label}'s span boundary objective (SBO) needs span masking: masking_unit must "
                              f"be \"span\", not {unit!r}.")
        raise ConfigError(f"{family.label} cannot use {unit!r} masking; choose one of "
                          f"{', '.join(family.masking_units)}.")
    if config.packing not in family.packings:
        raise ConfigError(f"{family.label} cannot use {config.packing!r} packing; choose one of "
                          f"{', '.join(family.packings)}.")
    pairs = [o for o in config.objectives if objectives.get(o).pair_examples]
    if config.packing == "doc-sentences" and pairs:
        label = objectives.get(pairs[0]).label
        raise ConfigError(f"packing \"doc-sentences\" applies to single-segment inputs, but {label} trains on "
                          f"sentence pairs it makes itself; keep packing \"full-sentences\" or train without it.")


def _check_family_fields(family: Family, config: "RunConfig") -> None:
    """A setting of another family is refused when it differs from its default, so that nobody
    believes it had an effect. (A models_lib field another family lacks, e.g. generator_size
    for BERT, is refused by the preset's config class.) Then the family's own checks."""
    from trainer.config import field_defaults

    defaults = field_defaults()
    for other in families.all():
        if other.name == family.name:
            continue
        for name in with_objectives(other).config_fields:
            if name not in family.config_fields and getattr(config, name) != defaults[name]:
                raise ConfigError(f"{name} applies to {other.label} only; leave it out for {family.label}.")
    if getattr(config, "activation_checkpointing", False) and not family.recomputes_blocks:
        raise ConfigError(f"activation_checkpointing recomputes transformer blocks (the encoder families, T5 and "
                          f"GPT), and {family.label}'s model does not offer it; turn it off for {family.label}.")
    family.check_run(config)


def validate_teacher(config: "RunConfig") -> dict[str, Any]:
    """For a family that distils (DistilBERT): the teacher's model_config.json ({"family",
    "config", ...}), after the family checked that the folder holds a checkpoint its student's
    preset fits. ConfigError otherwise. The engine and the web app call this before training."""
    return families.get(config.family).validate_teacher(config)


def validate_tokenizer(config: "RunConfig", algorithm: str, meta: dict[str, Any] | None = None) -> None:
    """Raise ConfigError when a tokenizer trained with `algorithm` does not suit the family,
    or (given its tokenizer_meta.json as `meta`) lacks the T5 sentinel tokens the objective reads.
    The collator checks the number of sentinels against seq_len again when training starts."""
    family = families.get(config.family)
    needs = [o for o in config.objectives if o in objectives.REGISTRY and objectives.get(o).needs_sentinels]
    if algorithm not in family.tokenizer_algorithms:
        raise ConfigError(f"{family.label} needs a {' or '.join(family.tokenizer_algorithms)} tokenizer"
                          f"{' with T5 sentinel tokens (extra_ids, 100 in T5)' if needs else ''}; "
                          f"this one is {algorithm}.")
    if meta is not None:
        if needs and int(meta.get("extra_ids", 0) or 0) < 1:
            raise ConfigError(f"{objectives.get(needs[0]).label} replaces each noise span by a sentinel token "
                              f"(<extra_id_0>, <extra_id_1>, ...), and this tokenizer has none; train a "
                              f"{algorithm_label(family.tokenizer_algorithms[0])} tokenizer with 100 sentinel "
                              f"tokens (extra_ids), as T5 does, or choose another objective.")


def algorithm_label(name: str) -> str:
    from trainer.prep.tokenization import ALGORITHMS

    return ALGORITHMS[name].label if name in ALGORITHMS else name


def max_positions(model_cfg: Any) -> int:
    """Usable positions of a models_lib config (position_offset rows are not usable)."""
    n = getattr(model_cfg, "max_positions", None)
    if n is None:
        n = getattr(model_cfg, "max_position_embeddings") - getattr(model_cfg, "position_offset", 0)
    return int(n)


def _msg(e: BaseException) -> str:
    return str(e.args[0]) if e.args else type(e).__name__
