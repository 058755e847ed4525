"""TinyBERT from the launch form: one of the owner's BERT checkpoints as the teacher, the
student's projections set to the teacher's width for the user, a real run whose distillation
losses fall and are charted, and a teacher of someone else refused."""
from __future__ import annotations

import json

import pytest

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from tests.webapp.test_runs_families import bert_teacher, errors, post_form
from webapp.runs import execution
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db

STUDENT = {"hidden_size": 32, "intermediate_size": 128}  # the teacher is 64 wide, 2 heads, 2 layers
TINY = dict(max_steps=24, batch_size=4, seq_len=32, warmup_steps=2, eval_every=12, checkpoint_every=24,
            log_every=2, lr=3e-3)


def test_tinybert_trains_from_the_form_with_falling_distillation_losses(alice, alice_client, enqueued):
    teacher = bert_teacher(alice)
    response = post_form(alice_client, teacher.run.tokenizer, family="tinybert", preset="tinybert-tiny",
                         objectives=["mlm", "tinybert"], teacher_checkpoint=teacher.id,
                         extra_settings=json.dumps({"model_overrides": STUDENT}), tinybert_temperature=2,
                         tinybert_prediction_share=0.5, **TINY)
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get(family="tinybert")
    assert run.config["teacher_checkpoint"] == str(teacher.folder) and run.config["tinybert_temperature"] == 2.0
    assert run.config["model_overrides"] == {**STUDENT, "teacher_hidden_size": 64}  # set for the user

    execution.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    train = [p.values for p in MetricPoint.objects.filter(run=run, split="train").order_by("step") if p.step <= 12]
    assert all({"emb_loss", "att_loss", "hid_loss", "pred_loss"} <= set(v) for v in train)
    # the layer-distillation phase, to step 12 (2026-12-02, stored tokenizers, two processes): 2.042 -> 1.029,
    # a ratio of 0.504, a margin of 1.01 in the fall
    assert train[-1]["loss"] < train[0]["loss"], (train[0], train[-1])

    page = alice_client.get(f"/runs/{run.id}/").content.decode()
    assert 'id="chart-tinybert"' in page


def test_a_teacher_of_someone_else_is_refused(alice, bob, alice_client, enqueued):
    corpus, tokenizer = make_data(bob)
    theirs = make_checkpoint(make_run(bob, corpus=corpus, tokenizer=tokenizer), step=10)
    _, mine = make_data(alice)
    response = post_form(alice_client, mine, family="tinybert", preset="tinybert-tiny",
                         objectives=["mlm", "tinybert"], teacher_checkpoint=theirs.id)
    assert response.status_code == 200 and errors(response, "teacher_checkpoint")
    assert not Run.objects.filter(family="tinybert").exists()
