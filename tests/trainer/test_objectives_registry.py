"""The objective registry (trainer/objectives/__init__.py): one table of lazy import strings,
every entry an Objective whose collator satisfies the Collator protocol and whose step is a
Step, and resolve() picking the objective that trains a set."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer import objectives
from trainer.errors import ConfigError
from trainer.objectives.base import Batch, Collator, Objective, Step
from trainer.objectives.examples import SpecialIds

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=200, special=(1,), sentinels=tuple(range(100, 110)))


@pytest.mark.parametrize("name", objectives.names())
def test_every_registered_objective_is_complete(name):
    objective = objectives.get(name)
    assert isinstance(objective, Objective) and objective.name == name
    assert issubclass(objective.step, Step) and objective.label and objective.help
    for unit in objective.units:
        collator = objective.build_collator(special=SPECIAL, seq_len=64, masking_unit=unit)
        assert isinstance(collator, Collator), (name, unit)
    batch_type = getattr(objective.collator, "batch_type", None)
    assert batch_type is None or issubclass(batch_type, Batch)


def test_resolve_picks_the_objective_that_extends_mlm():
    assert objectives.resolve(["mlm"]).name == "mlm"
    assert objectives.resolve(["mlm", "nsp"]).name == objectives.resolve(["nsp", "mlm"]).name == "nsp"
    assert objectives.resolve(["unilm"]).name == "unilm" and objectives.resolve(["mlm", "rtd"]).name == "rtd"
    assert objectives.resolve(["span_corruption"]).name == "span_corruption"
    for bad in (["nsp"], ["mlm", "nsp", "sop"], ["clm", "mlm"], ["span_corruption", "prefix_lm"], []):
        with pytest.raises(ConfigError, match="No collator for the objectives"):
            objectives.resolve(bad)
    with pytest.raises(ConfigError, match="Unknown objective 'mlmx'"):
        objectives.resolve(["mlmx"])


def test_combinations_are_exactly_what_resolve_accepts():
    for combo in objectives.combinations():
        assert objectives.resolve(list(combo)).name == combo[-1]


def test_importing_the_registry_loads_no_objective_and_no_torch():
    code = ("import sys; from trainer import objectives; objectives.names(); "
            "print(sorted(m for m in sys.modules if m.startswith('trainer.objectives.') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
