"""Template helpers shared by the runs and explorer pages."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from django import template
from django.urls import reverse
from django.utils.html import format_html

register = template.Library()


@register.filter
def setting_text(value) -> str:
    """A setting's value as the pages show it: a list as its items ("tensorboard, mlflow"; "none"
    when empty), never Python's repr ("['tensorboard']"); nothing set as "–"."""
    if value is None:
        return "–"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) if value else "none"
    return str(value)


@register.filter
def metric_label(key) -> str:
    """A metric's name in a sentence ("entity F1", not "entity_f1" or "entityf1")."""
    from trainer.finetune.metrics import metric_label as label

    return label(str(key or ""))


@register.filter
def get_field(form, name):
    """The bound field `name` of a form (a template cannot index by a variable), or None."""
    return form[name] if name in getattr(form, "fields", {}) else None


@register.filter
def words(name) -> str:
    """A registry name in words: "token_classification" -> "token classification"."""
    return str(name or "").replace("_", " ")


@register.simple_tag
def plotly_script() -> str:
    """<script> for plotly.js served from the plotly package; the version in the URL busts the cache."""
    try:
        v = version("plotly")
    except PackageNotFoundError:  # pragma: no cover - plotly is a requirement
        v = "0"
    return format_html('<script src="{}?v={}"></script>', reverse("runs:plotly-js"), v)


@register.filter
def percent(value: float) -> str:
    try:
        return f"{100 * float(value):.0f}%"
    except (TypeError, ValueError):
        return ""


@register.simple_tag
def progress_of(run) -> float:
    """0..100 for a progress bar."""
    if not run.max_steps:
        return 0.0
    return round(min(100.0, 100.0 * run.current_step / run.max_steps), 1)


def run_epochs(run) -> float:
    """The epochs a run was given instead of max_steps (0: none)."""
    try:
        return max(0.0, float((run.config or {}).get("epochs") or 0))
    except (TypeError, ValueError, AttributeError):
        return 0.0


@register.simple_tag
def epoch_of(run) -> str:
    """"epoch 1.4 / 2" for a run given in epochs: the passes its steps so far make (max_steps is
    the steps of all of them, set by the worker once it has read the train split), else ""."""
    epochs = run_epochs(run)
    if not epochs:
        return ""
    done = min(epochs, epochs * run.current_step / run.max_steps) if run.max_steps else 0.0
    return f"epoch {done:.1f} / {epochs:g}"


@register.filter
def ago(value) -> str:
    """'just now', '5 minutes ago', '2 days, 3 hours ago'."""
    from django.utils import timezone
    from django.utils.timesince import timesince

    if not value:
        return ""
    if (timezone.now() - value).total_seconds() < 60:
        return "just now"
    return f"{timesince(value)} ago"


@register.filter
def get_item(mapping, key):
    """mapping[key] in a template (None when absent or not a mapping)."""
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.inclusion_tag("runs/_cpu_notice.html")
def cpu_notice() -> dict:
    """The plain word on pre-training without a GPU (shown when no live worker has one)."""
    from webapp.runs.readiness import no_gpu

    return {"no_gpu": no_gpu()}


@register.filter
def objectives_label(run) -> str:
    """What a run trains for, in words: "Masked language modelling (MLM) + Next sentence prediction
    (NSP)", a fine-tuning run's task ("Token classification"); never a raw name (SPAN_CORRUPTION)."""
    from webapp.runs.selectors import objective_labels

    return " + ".join(objective_labels(run))
