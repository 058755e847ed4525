"""A pre-training launch is built and validated once in the web process (issue 30, point 3): the
form makes the plan (services.run_plan) and hands it to run_create; the API lets run_create make
it. Fine-tuning's form hands its plan on in the same way (finetune_plan)."""
from __future__ import annotations

import pytest
from tests.webapp.runs_helpers import make_data
from tests.webapp.test_runs import post_form
from trainer.catalog import validation
from trainer.config import RunConfig
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def counted(monkeypatch):
    """How often a RunConfig is built from a dict, validated, and a launch planned."""
    counts = {"from_dict": 0, "validate": 0, "plan": 0}
    real_from_dict, real_validate, real_plan = RunConfig.from_dict.__func__, validation.validate, services.run_plan

    def from_dict(cls, d):
        counts["from_dict"] += 1
        return real_from_dict(cls, d)

    def validate(config, *args, **kwargs):
        counts["validate"] += 1
        return real_validate(config, *args, **kwargs)

    def plan(**kwargs):
        counts["plan"] += 1
        return real_plan(**kwargs)

    monkeypatch.setattr(RunConfig, "from_dict", classmethod(from_dict))
    monkeypatch.setattr(validation, "validate", validate)
    monkeypatch.setattr(services, "run_plan", plan)
    return counts


def test_the_form_builds_and_validates_the_config_once(alice, alice_client, enqueued, counted):
    _, tokenizer = make_data(alice)
    response = post_form(alice_client, tokenizer)
    assert response.status_code == 302 and Run.objects.count() == 1
    assert counted == {"from_dict": 1, "validate": 1, "plan": 1}


def test_the_api_builds_and_validates_the_config_once(alice, alice_api, enqueued, counted):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "max_steps": 300}, format="json")
    assert response.status_code == 201, response.content
    assert counted == {"from_dict": 1, "validate": 1, "plan": 1}

