"""One settings schema, one translator (issue 30, point 5): every bound of every setting the launch
and fine-tuning forms offer is enforced by its Django form field and by its API field (made by
webapp.runs.fields from the same schema entry), with the sentence the run's config refuses the
value with; llrd's open lower bound (above 0) among them."""
from __future__ import annotations

import uuid

import pytest
from django import forms
from rest_framework import serializers

from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.settings_schema import Bounds
from webapp.runs import fields, launch

LLRD_ZERO = "llrd must be above 0 and at most 1, not 0."


def _entries() -> list[dict]:
    """Every numeric setting with bounds that the two forms and their APIs take."""
    pretraining = [launch.registry_json()["fields"][name] for name in launch.CONFIG_FIELDS]
    finetuning = list(launch.finetune_json()["settings"].values())
    return [e for e in pretraining + finetuning if "min" in e and e["type"] in ("int", "float")]


def _step(entry: dict, at: float) -> float:
    """The smallest step away from `at` that the setting's type tells apart: 1 for a whole number."""
    return 1 if entry["type"] == "int" else max(abs(at) * 1e-3, 1e-15)


def _cases(entry: dict) -> list[tuple[float, bool]]:
    """(value, accepted?) just inside and just outside each end of the entry's range."""
    low, high = entry["min"], entry["max"]
    if entry.get("min_exclusive"):
        lows = [(low, False), (low + _step(entry, high), True)]
    else:
        lows = [(low - _step(entry, low), False), (low, True)]
    return [*lows, (high, True), (high + _step(entry, high), False)]


def _form_error(entry: dict, value) -> str | None:
    try:
        fields.form_field(entry).clean(value)
    except forms.ValidationError as e:
        return " ".join(e.messages)
    return None


def _api_error(entry: dict, value) -> str | None:
    try:
        fields.api_field(entry).run_validation(value)
    except serializers.ValidationError as e:
        return " ".join(map(str, e.detail))
    return None


def test_there_are_bounds_of_every_kind_to_check():
    entries = {(e["name"], e["default"]) for e in _entries()}
    assert ("lr", 1e-4) in entries and ("lr", 5e-5) in entries  # pre-training's and fine-tuning's
    assert any(e.get("min_exclusive") for e in _entries()) and len(entries) > 40


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: f"{e['name']}={e['default']}")
def test_every_bound_is_enforced_by_the_form_field_and_the_api_field(entry):
    bounds = Bounds.from_json(entry)
    for value, accepted in _cases(entry):
        value = int(value) if entry["type"] == "int" else value
        expected = None if accepted else bounds.refusal(entry["name"], value)
        assert _form_error(entry, value) == expected, (entry["name"], value)
        assert _api_error(entry, value) == expected, (entry["name"], value)


def test_llrd_0_is_refused_by_the_config_the_form_field_and_the_api_field_in_one_sentence():
    with pytest.raises(ConfigError) as refused:
        FinetuneConfig(checkpoint="a", dataset="b", llrd=0)
    assert str(refused.value) == LLRD_ZERO
    llrd = launch.finetune_json()["settings"]["llrd"]
    assert _form_error(llrd, "0") == _api_error(llrd, 0) == LLRD_ZERO
    assert _form_error(llrd, "0.0001") is None and _api_error(llrd, 1) is None


@pytest.mark.django_db
def test_the_fine_tuning_api_refuses_llrd_0_with_the_configs_sentence(alice_api):
    body = {"checkpoint": str(uuid.uuid4()), "dataset": str(uuid.uuid4()), "llrd": 0}
    response = alice_api.post("/api/finetune/", body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"llrd": [LLRD_ZERO]}


def test_the_api_schema_states_llrds_open_lower_bound():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    llrd = schema["components"]["schemas"]["FinetuneCreate"]["properties"]["llrd"]
    assert (llrd["minimum"], llrd["exclusiveMinimum"], llrd["maximum"]) == (0, True, 1)
    lr = schema["components"]["schemas"]["RunCreate"]["properties"]["lr"]
    assert (lr["minimum"], lr["maximum"]) == (1e-7, 1)
