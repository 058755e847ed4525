"""One abstract row and one status enum for every background job (issue 30, point 6): the shared job
code (webapp.jobs.lifecycle) writes JobStatus's values into each row, so no app may declare the
statuses again or a job row of its own shape."""
from __future__ import annotations

import enum

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import models

from webapp.corpora.models import Corpus, Tokenizer
from webapp.datasets.models import Dataset
from webapp.explorer.models import ModelImport
from webapp.jobs.models import JobRow, JobStatus

# Each job row and the reverse accessor the code reads on a user (user.corpora, ...).
JOB_ROWS = {Corpus: "corpora", Tokenizer: "tokenizers", Dataset: "datasets", ModelImport: "model_imports"}
JOB_VALUES = set(JobStatus.values)

pytestmark = pytest.mark.django_db


def _choice_classes(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_choice_classes(sub)]
    return found


def _status_values(model: type[models.Model]) -> list[str] | None:
    try:
        field = model._meta.get_field("status")
    except Exception:  # FieldDoesNotExist: a model without a status
        return None
    return [value for value, _ in field.choices or []]


@pytest.mark.parametrize("model", JOB_ROWS, ids=lambda m: m.__name__)
def test_each_job_row_extends_the_one_base_and_keeps_its_owner_accessor(model):
    assert issubclass(model, JobRow)
    owner = model._meta.get_field("owner")
    assert owner.related_model is get_user_model() and owner.remote_field.related_name == JOB_ROWS[model]
    assert hasattr(get_user_model(), JOB_ROWS[model])


def test_every_status_column_holding_a_job_status_takes_its_values_from_job_status():
    """A model whose status column knows "pending" is a job: all its values are JobStatus's, in its order."""
    job_models = [m for m in apps.get_models() if JobStatus.PENDING in (_status_values(m) or [])]
    assert set(JOB_ROWS) <= set(job_models)
    order = JobStatus.values
    for model in job_models:
        values = _status_values(model)
        assert set(values) <= JOB_VALUES, model.__name__
        assert values == sorted(values, key=order.index), model.__name__


def test_no_other_enum_declares_the_job_statuses():
    """Runs and sweeps have statuses of their own (queued, running, succeeded, ...); none repeats a job's."""
    copies = [cls for cls in _choice_classes(models.Choices)
              if cls.__module__.startswith("webapp.") and cls is not JobStatus and issubclass(cls, enum.Enum)
              and {JobStatus.PENDING, JobStatus.READY} <= {m.value for m in cls}]
    assert copies == []


def test_a_row_words_a_status_its_own_way_but_stores_the_shared_value(alice):
    model_import = ModelImport(owner=alice, name="bert", status=JobStatus.PROCESSING)
    dataset = Dataset(owner=alice, name="reviews")
    assert model_import.get_status_display() == "Importing" and model_import.status == "processing"
    assert dataset.status == JobStatus.MAPPING and dataset.get_status_display() == "Waiting for its mapping"
    assert JobStatus.MAPPING not in _status_values(Corpus)  # only a dataset waits for a mapping
