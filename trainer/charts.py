"""What a run's dashboard draws: its charts, the metric series on each, and the headline numbers.

The run page (webapp/runs/views.py) hands `charts_for(objectives)` and `stats_for(objectives)`
to static/js/run_dashboard.js, which builds every chart and number from those lists; no metric
name lives in the page. A metric key here is one the trainer records (`MetricsSink.metrics`,
see trainer/training/engine.py and each objective's Step in trainer/objectives/), per split: "train" points every `log_every`
steps, "valid" points at each validation.

Tables:
  CHARTS             chart id -> ChartSpec (title, axis scale, legend style, order on the page)
  COMMON_METRICS     the series every run has (loss, learning rate, gradient norm, throughput, MFU, memory)
  LM_METRICS         the series of the language-model objectives (T5's, GPT's)
  COMMON_STATS, LM_STATS  the numbers above the charts, the same way
Each objective lists the series and numbers it adds (`Objective.charts`, `Objective.stats`, and
any chart of its own in `Objective.chart_specs`); trainer.objectives.charts_for / stats_for
collect them for a run. Imports neither Django nor torch.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import KW_ONLY, dataclass

SPLITS = ("train", "valid")
SPLIT_LABELS = {"train": "train", "valid": "validation"}
TRAIN = ("train",)
VALID = ("valid",)

# How the y axis reads: "linear"; "log"; "percent" (fractions 0..1 as %, from zero); "scientific" (1e-4).
SCALES = ("linear", "log", "percent", "scientific")
# What a series is called in the legend and the hover box (SPLIT_LABELS names the split):
#   "split"         the split alone: "train", "validation" (a chart of one quantity)
#   "metric_split"  "<label> (train)", "<label> (validation)"
#   "metric"        "<label>" for train, "<label> (validation)" for validation
LEGENDS = ("split", "metric_split", "metric")
# What the page draws instead of the logged value: "exp" turns a loss into a perplexity.
TRANSFORMS = ("", "exp")
AXES = ("y", "y2")  # "y2": the right-hand axis (ChartSpec.y2_title names it)
STAT_FORMATS = ("fixed", "percent", "integer")  # 0.1234 / 12.3% / 12,345


@dataclass(frozen=True)
class ChartSpec:
    """One chart on the dashboard (the page's element is `chart-<id>`)."""

    id: str
    title: str
    _: KW_ONLY
    unit: str = ""  # of the y axis; informative (titles already name it where it matters)
    order: int  # position on the page, ascending
    scale: str = "linear"  # SCALES
    legend: str = "split"  # LEGENDS
    y2_title: str = ""  # a second y axis on the right, for series with axis="y2"
    # Its values are per token of the run's tokenizer (a language model's loss, perplexity, token
    # accuracy, throughput): runs with different tokenizers count different units of text, so the
    # compare page says so when it overlays them (webapp.runs.results).
    per_token: bool = False

    def __post_init__(self) -> None:
        _check(self.scale, SCALES, f"chart {self.id!r}: scale")
        _check(self.legend, LEGENDS, f"chart {self.id!r}: legend")


@dataclass(frozen=True)
class MetricSpec:
    """A metric key the trainer records, drawn on chart `chart` for each split in `splits`."""

    name: str  # the key in the logged values ("mlm_acc", "forward_perplexity", ...)
    label: str  # what it is called in the legend (see ChartSpec.legend)
    _: KW_ONLY
    unit: str = ""
    chart: str
    splits: tuple[str, ...] = SPLITS
    color: str = ""  # CSS colour; empty: the split's colour. A coloured validation series is dotted.
    axis: str = "y"  # AXES
    transform: str = ""  # TRANSFORMS

    def __post_init__(self) -> None:
        what = f"metric {self.name!r} on chart {self.chart!r}"
        if not self.splits:
            raise ValueError(f"{what}: splits is empty; give at least one of {SPLITS}.")
        for split in self.splits:
            _check(split, SPLITS, f"{what}: split")
        _check(self.axis, AXES, f"{what}: axis")
        _check(self.transform, TRANSFORMS, f"{what}: transform")


@dataclass(frozen=True)
class StatSpec:
    """A number above the charts: the newest value of `metric` in the first of `splits` that has it."""

    id: str  # the page's element is [data-stat=<id>]
    label: str
    _: KW_ONLY
    metric: str
    splits: tuple[str, ...] = VALID
    format: str = "fixed"  # STAT_FORMATS
    digits: int = 4  # decimals for "fixed" and "percent"
    order: int

    def __post_init__(self) -> None:
        if not self.splits:
            raise ValueError(f"stat {self.id!r}: splits is empty; give at least one of {SPLITS}.")
        for split in self.splits:
            _check(split, SPLITS, f"stat {self.id!r}: split")
        _check(self.format, STAT_FORMATS, f"stat {self.id!r}: format")


def train_then_valid(*metrics: MetricSpec) -> tuple[MetricSpec, ...]:
    """The metrics' training series, then their validation series (the legend lists every
    training line before the validation ones)."""
    return (tuple(dataclasses.replace(m, splits=TRAIN) for m in metrics)
            + tuple(dataclasses.replace(m, splits=VALID) for m in metrics))


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} is {value!r}; it must be one of {', '.join(map(repr, allowed))}.")


BLUE, ORANGE, GREEN = "#3f5bd9", "#e0692b", "#1a9e77"

# ------------------------------------------------------------------------------------ charts
CHARTS: dict[str, ChartSpec] = {c.id: c for c in (
    ChartSpec("loss", "Loss", order=10, per_token=True),
    ChartSpec("mlm_acc", "MLM accuracy", order=20, scale="percent", per_token=True),
    ChartSpec("lm_acc", "Token accuracy (predicted tokens)", order=30, scale="percent", per_token=True),
    ChartSpec("perplexity", "Perplexity (exp of the LM loss)", order=40, scale="log", per_token=True),
    ChartSpec("elmo_perplexity", "ELMo perplexity: forward and backward LM", order=50, scale="log",
              legend="metric_split", per_token=True),
    ChartSpec("elmo_loss", "ELMo loss: forward and backward LM", order=60, legend="metric_split", per_token=True),
    ChartSpec("elmo_acc", "ELMo accuracy: forward and backward LM", order=70, scale="percent",
              legend="metric_split", per_token=True),
    ChartSpec("nsp_acc", "NSP accuracy", order=80, scale="percent"),
    ChartSpec("sop_acc", "SOP accuracy (sentence order)", order=90, scale="percent"),
    ChartSpec("sbo_loss", "SBO loss (span boundary)", order=100, per_token=True),
    ChartSpec("sbo_acc", "SBO accuracy (span boundary)", order=110, scale="percent", per_token=True),
    ChartSpec("electra_loss", "Generator (MLM) and discriminator (RTD) loss", order=120, legend="metric_split",
              y2_title="discriminator loss", per_token=True),
    ChartSpec("rtd", "Replaced-token detection: precision, recall, accuracy", order=130, scale="percent",
              legend="metric", per_token=True),
    ChartSpec("distill", "Distillation losses (soft targets, MLM, cosine)", order=140, legend="metric"),
    ChartSpec("lr", "Learning rate", order=150, scale="scientific", legend="metric"),
    ChartSpec("grad_norm", "Gradient norm", order=160, legend="metric"),
    ChartSpec("tokens_per_s", "Tokens per second", unit="tokens/s", order=170, legend="metric", per_token=True),
    ChartSpec("mfu", "Model FLOPs utilisation (share of the device's peak)", order=175, scale="percent",
              legend="metric"),
    ChartSpec("fill", "Fill (real tokens / positions computed)", order=177, scale="percent", legend="metric"),
    ChartSpec("memory_mb", "Memory (MB)", unit="MB", order=180, legend="metric"),
)}

# ----------------------------------------------------------------------------------- metrics
COMMON_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("loss", "loss", chart="loss"),
    MetricSpec("lr", "learning rate", chart="lr", splits=TRAIN),
    MetricSpec("grad_norm", "gradient norm", chart="grad_norm", splits=TRAIN),
    MetricSpec("tokens_per_s", "tokens / s", unit="tokens/s", chart="tokens_per_s", splits=TRAIN),
    MetricSpec("mfu", "MFU", chart="mfu", splits=TRAIN),  # trainer.training.flops
    MetricSpec("fill", "fill", chart="fill", splits=TRAIN),  # padding computed lowers it (trainer.objectives.packing)
    MetricSpec("memory_mb", "MB", unit="MB", chart="memory_mb", splits=TRAIN),
)

# What the language-model objectives (T5's target tokens, GPT's next tokens) report: token
# accuracy, and perplexity on a log scale (training: exp of each logged lm_loss; validation: the
# perplexity the trainer computes over the whole validation set).
LM_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("lm_acc", "token accuracy", chart="lm_acc"),
    MetricSpec("lm_loss", "perplexity", chart="perplexity", splits=TRAIN, transform="exp"),
    MetricSpec("perplexity", "perplexity", chart="perplexity", splits=VALID),
)

# ------------------------------------------------------------------------------------- stats
COMMON_STATS: tuple[StatSpec, ...] = (
    StatSpec("loss", "train loss", metric="loss", splits=TRAIN, order=10),
    StatSpec("valid_loss", "validation loss", metric="loss", splits=VALID, order=20),
    StatSpec("perplexity", "validation perplexity", metric="perplexity", digits=1, order=30),
    StatSpec("tokens_per_s", "tokens / s", metric="tokens_per_s", splits=TRAIN, format="integer", order=90),
    StatSpec("mfu", "MFU", metric="mfu", splits=TRAIN, format="percent", digits=1, order=95),
    StatSpec("fill", "fill", metric="fill", splits=TRAIN, format="percent", digits=0, order=96),
)

LM_STATS: tuple[StatSpec, ...] = (
    StatSpec("lm_acc", "token accuracy", metric="lm_acc", splits=("valid", "train"), format="percent", digits=1,
             order=50),
)

# ------------------------------------------------------------------------------ for the page
def series_label(chart: ChartSpec, metric: MetricSpec, split: str) -> str:
    """The legend name of `metric` on `chart` for `split` (ChartSpec.legend)."""
    where = SPLIT_LABELS[split]
    if chart.legend == "split":
        return where
    if chart.legend == "metric" and split == "train":
        return metric.label
    return f"{metric.label} ({where})"


def charts_for(metrics: Sequence[MetricSpec], extra_charts: Sequence[ChartSpec] = ()) -> list[dict]:
    """The charts of the common metrics and `metrics` (the run's objectives' chart entries, in the
    objectives' registered order), in page order, as JSON-able dicts:

    {"id", "title", "unit", "scale", "y2_title", "per_token",
     "series": [{"metric", "label", "split", "unit", "color", "axis", "transform"}, ...]}

    Charts without a series are left out; a series (chart, metric, split, transform) that two
    objectives both list appears once, where it first appears.
    """
    specs = [*COMMON_METRICS, *metrics]
    known = {**CHARTS, **{c.id: c for c in extra_charts}}
    series: dict[str, list[dict]] = {}
    seen: set[tuple[str, str, str, str]] = set()
    for metric in specs:
        chart = known.get(metric.chart)
        if chart is None:
            raise ValueError(f"metric {metric.name!r} is drawn on chart {metric.chart!r}, "
                             "which neither CHARTS nor the objective defines.")
        for split in metric.splits:
            key = (chart.id, metric.name, split, metric.transform)
            if key in seen:
                continue
            seen.add(key)
            series.setdefault(chart.id, []).append({
                "metric": metric.name, "label": series_label(chart, metric, split), "split": split,
                "unit": metric.unit, "color": metric.color, "axis": metric.axis, "transform": metric.transform,
            })
    charts = sorted((known[chart_id] for chart_id in series), key=lambda c: (c.order, c.id))
    return [{
        "id": c.id, "title": c.title, "unit": c.unit, "scale": c.scale,
        "y2_title": c.y2_title, "per_token": c.per_token, "series": series[c.id],
    } for c in charts]


def stats_for(stats: Sequence[StatSpec], recorded: Collection[str] | None = None) -> list[dict]:
    """The numbers above the charts, in page order: {"id", "label", "metric", "splits", "format", "digits"}.
    A stat id that two objectives both list appears once. `recorded`: the metric keys the run
    records, when not every common stat applies (a classifier reports no perplexity), so that
    no number stays a dash for ever; None: all of them."""
    specs = [*COMMON_STATS, *stats]
    unique: dict[str, StatSpec] = {}
    for stat in specs:
        if recorded is None or stat.metric in recorded:
            unique.setdefault(stat.id, stat)
    return [{
        "id": s.id, "label": s.label, "metric": s.metric, "splits": list(s.splits), "format": s.format,
        "digits": s.digits,
    } for s in sorted(unique.values(), key=lambda s: (s.order, s.id))]
