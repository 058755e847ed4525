"""The search space of a sweep: parsing (the form's lines), validation, and Optuna distributions.

A space is a list of settings, each either
  {"name": "batch_size", "values": [8, 16]}                 a list of values (grid, or categorical), or
  {"name": "lr", "low": 1e-4, "high": 1e-2, "log": true}    a range (int or float, as the setting is).
Settings are the run config's own fields as the schema serves them (trainer.settings_schema:
RunConfig's for pre-training, the fine-tuning form's for fine-tuning), each value and range inside
the setting's bounds; a list of one value fixes a setting for every trial.
"""
from __future__ import annotations

import math
import re
from typing import Any

from optuna.distributions import (
    BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution,
)

from trainer.errors import ConfigError
from trainer.settings_schema import Bounds

# Settings a trial may not vary: what the data and model are (the base run chooses them), and
# the device layout (a trial runs where the base run would).
FIXED = {"family", "preset", "objectives", "model_overrides", "teacher_checkpoint", "devices", "device", "strategy"}
MAX_SETTINGS = 12
MAX_VALUES = 64


def _entries(kind: str) -> dict[str, dict[str, Any]]:
    """{setting: its schema entry} of the settings a sweep of `kind` may search over: the launch
    form's RunConfig fields (but FIXED), or every fine-tuning setting; a number, a text or a switch."""
    from webapp.runs import launch

    if kind == "finetune":
        entries = launch.finetune_json()["settings"]
    else:
        entries = {k: v for k, v in launch.registry_json()["fields"].items() if k not in FIXED}
    return {name: e for name, e in entries.items() if isinstance(e["default"], (bool, int, float, str))}


def _defaults(kind: str) -> dict[str, Any]:
    """{setting: default} of the settings a sweep of `kind` may search over."""
    return {name: e["default"] for name, e in _entries(kind).items()}


def _check_bounds(entry: dict[str, Any], values: list[Any]) -> None:
    """ConfigError, with the sentence the run's config would give, for a value or an end of a range
    outside the setting's bounds: refused now rather than by the trial that draws it."""
    bounds = Bounds.from_json(entry)
    for value in values:
        if bounds is not None and not bounds.admits(value):
            raise ConfigError(bounds.refusal(entry["name"], value))


def settings_for(kind: str) -> list[str]:
    return sorted(_defaults(kind))


def _number(value: Any, name: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"The {what} of '{name}' must be a number, not {value!r}.")
    return value


def validate(space: Any, *, kind: str, sampler: str) -> list[dict[str, Any]]:
    """The space in its stored form (each entry checked), or ConfigError with a sentence."""
    if not isinstance(space, list) or not space:
        raise ConfigError("The search space is empty: give at least one setting with its values or range.")
    if len(space) > MAX_SETTINGS:
        raise ConfigError(f"A sweep searches at most {MAX_SETTINGS} settings; this one has {len(space)}.")
    entries = _entries(kind)
    defaults = {name: e["default"] for name, e in entries.items()}
    out, seen = [], set()
    for entry in space:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigError("Each setting of the search space needs a name (as {\"name\": ..., \"values\": [...]}).")
        name = entry["name"].strip()
        if name in seen:
            raise ConfigError(f"The setting '{name}' appears twice in the search space.")
        seen.add(name)
        if name not in defaults:
            raise ConfigError(f"'{name}' is not a setting a {'fine-tuning' if kind == 'finetune' else 'pre-training'} "
                              f"sweep can vary; choose from: {', '.join(settings_for(kind))}.")
        default = defaults[name]
        if "values" in entry:
            values = entry["values"]
            if not isinstance(values, list) or not values:
                raise ConfigError(f"The values of '{name}' must be a non-empty list.")
            if len(values) > MAX_VALUES:
                raise ConfigError(f"'{name}' lists {len(values)} values; at most {MAX_VALUES}.")
            values = [_coerce(v, default, name) for v in values]
            if len(set(map(repr, values))) != len(values):
                raise ConfigError(f"The values of '{name}' repeat one another.")
            if not isinstance(default, (bool, str)):
                _check_bounds(entries[name], values)
            out.append({"name": name, "values": values})
            continue
        if "low" not in entry or "high" not in entry:
            raise ConfigError(f"Give '{name}' either a list of values or a low and a high bound.")
        if isinstance(default, (bool, str)):
            raise ConfigError(f"'{name}' is not a number: list its values instead of a range.")
        if sampler == "grid":
            raise ConfigError(f"The grid sampler needs a list of values for every setting; '{name}' has a range.")
        low, high = _number(entry["low"], name, "low bound"), _number(entry["high"], name, "high bound")
        log = bool(entry.get("log", False))
        if isinstance(default, int):
            if low != int(low) or high != int(high):
                raise ConfigError(f"'{name}' is a whole number: its bounds must be whole numbers too.")
            low, high = int(low), int(high)
        else:
            low, high = float(low), float(high)
        if low >= high:
            raise ConfigError(f"The low bound of '{name}' ({low}) must be below its high bound ({high}).")
        if log and low <= 0:
            raise ConfigError(f"A log-scale range needs a low bound above 0; '{name}' starts at {low}.")
        _check_bounds(entries[name], [low, high])
        out.append({"name": name, "low": low, "high": high, "log": log})
    if sampler == "grid":
        check_grid(out)
    return out


def _coerce(value: Any, default: Any, name: str) -> Any:
    """A listed value as the setting's own type ("1e-3" from the form becomes 0.001)."""
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() in ("true", "yes", "1", "false", "no", "0"):
                    return value.lower() in ("true", "yes", "1")
                raise ValueError
            return bool(value)
        if isinstance(default, int):
            number = float(value)
            if number != int(number):
                raise ValueError
            return int(number)
        if isinstance(default, float):
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            return number
        return str(value)
    except (TypeError, ValueError):
        kind = "whole number" if isinstance(default, int) and not isinstance(default, bool) else type(default).__name__
        raise ConfigError(f"'{value}' is not a valid value of '{name}' (a {kind}).") from None


def distributions(space: list[dict[str, Any]], *, kind: str) -> dict[str, BaseDistribution]:
    """Optuna's distribution of each setting of a validated space."""
    defaults = _defaults(kind)
    out: dict[str, BaseDistribution] = {}
    for entry in space:
        if "values" in entry:
            out[entry["name"]] = CategoricalDistribution(entry["values"])
        elif isinstance(defaults.get(entry["name"]), int):
            out[entry["name"]] = IntDistribution(entry["low"], entry["high"], log=entry["log"])
        else:
            out[entry["name"]] = FloatDistribution(entry["low"], entry["high"], log=entry["log"])
    return out


def grid_size(space: list[dict[str, Any]]) -> int:
    """The grid's combinations, by arithmetic: 12 settings of 64 values is 64**12, never listed."""
    return math.prod(len(e["values"]) for e in space if "values" in e)


def check_grid(space: list[dict[str, Any]]) -> None:
    """ConfigError unless the grid has at most settings.SWEEP_MAX_GRID combinations: Optuna's
    grid sampler holds all of them in memory (64**12 of them filled gigabytes, then killed the
    web process and the scheduler)."""
    from django.conf import settings

    size, limit = grid_size(space), int(settings.SWEEP_MAX_GRID)
    if size > limit:
        counts = " x ".join(str(len(e["values"])) for e in space if "values" in e)
        raise ConfigError(f"The grid has {size:,} combinations ({counts} values), more than the {limit:,} a grid sweep "
                          f"may have (SWEEP_MAX_GRID). List fewer values, or use the TPE or random sampler, which "
                          f"draw from the same values without listing every combination.")


_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.+?)\s*$")
_RANGE = re.compile(r"^(\S+)\s*\.\.\s*(\S+?)(\s+log)?$", re.IGNORECASE)


def parse_text(text: str) -> list[dict[str, Any]]:
    """The form's search space, one setting a line: `lr = 1e-4 .. 1e-2 log` (a range, on a log
    scale), `batch_size = 8, 16, 32` (values). Numbers stay strings' numbers; validate() types them."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.strip().startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ConfigError(f"Line {number} of the search space should read 'setting = a, b, c' or "
                              f"'setting = low .. high' (add 'log' for a log scale): {line.strip()!r}.")
        name, rest = m.group(1), m.group(2)
        r = _RANGE.match(rest)
        if r:
            try:
                low, high = float(r.group(1)), float(r.group(2))
            except ValueError:
                raise ConfigError(f"Line {number} of the search space: the bounds of '{name}' must be numbers.") from None
            out.append({"name": name, "low": low, "high": high, "log": bool(r.group(3))})
        else:
            out.append({"name": name, "values": [_literal(v.strip()) for v in rest.split(",") if v.strip()]})
    return out


def _literal(text: str) -> Any:
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def to_text(space: list[dict[str, Any]]) -> str:
    lines = []
    for e in space:
        if "values" in e:
            lines.append(f"{e['name']} = {', '.join(str(v) for v in e['values'])}")
        else:
            lines.append(f"{e['name']} = {e['low']} .. {e['high']}{' log' if e['log'] else ''}")
    return "\n".join(lines)
