"""The registered pre-training objectives: one table, one line each.

    from trainer import objectives
    objectives.get("mlm")                     # the Objective (trainer.objectives.base)
    objectives.all()                          # every Objective, in the form's order
    lead = objectives.resolve(["mlm", "nsp"])  # the objective whose collator and step train the set
    collator = objectives.build_collator(["mlm", "nsp"], special=..., seq_len=128)
    objectives.pair_heads(["mlm", "nsp"])    # [NSP]: the sentence-pair head the explorer asks

Adding an objective: write its module (its collator, batch type, step and `Objective`), add
one line to `REGISTRY`, and list it in the objectives of the families that train it.
Modules are imported on first use, so importing this package imports no torch (the launch
form's validation and schema read it in the web process).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Sequence

from trainer.errors import ConfigError

if TYPE_CHECKING:
    from trainer.objectives.base import Objective

# name -> "module:ATTRIBUTE" of its Objective, in the order the launch form lists them.
REGISTRY: dict[str, str] = {
    "mlm": "trainer.objectives.encoder:MLM",
    "nsp": "trainer.objectives.encoder:NSP",
    "sop": "trainer.objectives.encoder:SOP",
    "sbo": "trainer.objectives.encoder:SBO",
    "rtd": "trainer.objectives.electra:RTD",
    "distill": "trainer.objectives.distill:DISTILL",
    "tinybert": "trainer.objectives.tinybert:TINYBERT",
    "unilm": "trainer.objectives.encoder:UNILM",
    "span_corruption": "trainer.objectives.denoising:SPAN_CORRUPTION",
    "prefix_lm": "trainer.objectives.denoising:PREFIX_LM",
    "t5_mlm": "trainer.objectives.denoising:T5_MLM",
    "deshuffle": "trainer.objectives.denoising:DESHUFFLE",
    "drop_tokens": "trainer.objectives.denoising:DROP_TOKENS",
    "text_infilling": "trainer.objectives.denoising:TEXT_INFILLING",
    "sentence_permutation": "trainer.objectives.denoising:SENTENCE_PERMUTATION",
    "clm": "trainer.objectives.lm:CLM",
    "bilm": "trainer.objectives.lm:BILM",
    "xl_lm": "trainer.objectives.memory:XL_LM",
    "plm": "trainer.objectives.memory:PLM",
}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Objective:
    try:
        ref = REGISTRY[name]
    except KeyError:
        raise ConfigError(f"Unknown objective {name!r}; choose one of {', '.join(REGISTRY)}.") from None
    module, _, attr = ref.partition(":")
    objective = getattr(importlib.import_module(module), attr)
    if objective.name != name:
        raise RuntimeError(f"objective registry: {ref} is named {objective.name!r}, not {name!r}")
    return objective


def all() -> list[Objective]:  # noqa: A001 - the registry's own vocabulary: objectives.all()
    return [get(n) for n in REGISTRY]


def combinations() -> list[tuple[str, ...]]:
    """Every set of objectives that trains together, each with its lead objective last:
    ("mlm",), ("mlm", "nsp"), ("unilm",), ("span_corruption",), ..."""
    out: list[tuple[str, ...]] = []
    for o in all():
        if not o.requires:
            out.append((o.name,))
        out.extend((base, o.name) for base in o.combines)
    return out


def resolve(objective_names: Sequence[str]) -> Objective:
    """The objective that trains a set: the one that extends the others (NSP in MLM + NSP), or
    the only one. ConfigError for a set that does not train together."""
    wanted = list(dict.fromkeys(objective_names))
    chosen = [get(n) for n in wanted]
    leads = [o for o in chosen if not o.base]
    lead = leads[0] if len(leads) == 1 else chosen[0] if len(chosen) == 1 else None
    if lead is None or not set(wanted) <= {lead.name, *lead.combines} or not set(lead.requires) <= set(wanted):
        known = "; ".join(" + ".join(sorted(c)) for c in combinations())
        raise ConfigError(f"No collator for the objectives {' + '.join(wanted) or '(none)'}; known sets: {known}.")
    return lead


def build_collator(objective_names: Sequence[str], **options: Any) -> Any:
    """The collator that trains a set of objectives (see Objective.build_collator for the options)."""
    return resolve(objective_names).build_collator(**options)


def charts_for(objective_names: Sequence[str] | None) -> list[dict]:
    """The dashboard's charts for a run with these objectives (trainer.charts.charts_for over the
    common series and each objective's own, in the registered order; unknown names, e.g. of
    an older version, are skipped)."""
    from trainer import charts

    chosen = _chosen(objective_names)
    return charts.charts_for([m for o in chosen for m in o.charts], [c for o in chosen for c in o.chart_specs])


def stats_for(objective_names: Sequence[str] | None) -> list[dict]:
    """The numbers above the charts for a run with these objectives (trainer.charts.stats_for)."""
    from trainer import charts

    return charts.stats_for([s for o in _chosen(objective_names) for s in o.stats])


def per_token_metrics(objective_names: Sequence[str] | None) -> frozenset[str]:
    """The metric keys of a run with these objectives that count tokens of its tokenizer: every
    series the tables draw on a per-token chart (trainer.charts.ChartSpec.per_token), also where
    the run shows it only as a number above the charts (MLM's validation perplexity)."""
    from trainer import charts

    every = all()
    known = {**charts.CHARTS, **{c.id: c for o in every for c in o.chart_specs}}
    per_token = {m.name for m in (*charts.COMMON_METRICS, *charts.LM_METRICS, *(m for o in every for m in o.charts))
                 if known[m.chart].per_token}
    recorded = {m.name for m in charts.COMMON_METRICS}
    for objective in _chosen(objective_names):
        recorded |= {*objective.metrics, *(m.name for m in objective.charts), *objective.step.perplexities}
    return frozenset(per_token & recorded)


def pair_heads(objective_names: Sequence[str] | None = None) -> list[Objective]:
    """The sentence-pair objectives among these (None: every registered one) whose model has a pair
    head (SentencePairs.head), those that judge order (SOP) before those that judge random pairs
    (NSP): the explorer's sentence-order tool asks the first, the masking inspector shows its
    meanings."""
    chosen = all() if objective_names is None else _chosen(objective_names)
    heads = [o for o in chosen if o.pairs is not None and o.pairs.head]
    return sorted(heads, key=lambda o: not o.pairs.judges_order)


def fills_masks(objective_names: Sequence[str] | None) -> bool:
    """Whether a model trained with these objectives predicts masked tokens (the explorer's fill-mask tool)."""
    return any(o.fills_masks for o in _chosen(objective_names))


def _chosen(objective_names: Sequence[str] | None) -> list[Objective]:
    wanted = set(objective_names or ())
    return [get(n) for n in REGISTRY if n in wanted]
