"""What a newcomer reads (issue 31, point 6): no Python reprs of settings on the compare page and
the leaderboard, "Welcome" (not "Welcome back") right after signing up, and no "No dataset yet?"
on the fine-tune form of a user who has datasets."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_run
from tests.webapp.test_runs_compare import finetune_run
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus
from webapp.runs.models import RunStatus
from webapp.runs.templatetags.runs_extras import setting_text

pytestmark = pytest.mark.django_db


def test_a_list_setting_reads_as_its_items():
    assert setting_text(["tensorboard", "mlflow"]) == "tensorboard, mlflow"
    assert setting_text([]) == "none" and setting_text(None) == "–" and setting_text(0.001) == "0.001"


def test_compare_and_the_leaderboard_show_report_to_as_words(alice, alice_client):
    dataset = Dataset.objects.create(owner=alice, name="reviews", status=JobStatus.READY, task="classification",
                                     labels=["neg", "pos"])
    base = make_checkpoint(make_run(alice, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20)
    a = finetune_run(alice, dataset, base, "a", lr=1e-3, valid=[0.6], test={"accuracy": 0.6})
    b = finetune_run(alice, dataset, base, "b", lr=1e-3, valid=[0.7], test={"accuracy": 0.7})
    a.config = {**a.config, "report_to": ["tensorboard"]}
    a.save()
    b.config = {**b.config, "report_to": []}
    b.save()
    pages = [alice_client.get(reverse("runs:compare") + f"?run={a.id}&run={b.id}").content.decode(),
             alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()]
    for html in pages:
        assert "report_to" in html and "['tensorboard']" not in html and "[]" not in html
        assert '<td class="mono">tensorboard</td>' in html or '>tensorboard</td>' in html


def test_a_new_user_is_welcomed_and_a_returning_one_welcomed_back(alice_client, alice):
    from django.test import Client

    client = Client()
    client.post(reverse("signup"), {"username": "carol", "email": "", "password1": "a-long-passphrase-42",
                                    "password2": "a-long-passphrase-42"})
    html = client.get(reverse("home")).content.decode()
    assert "<h1>Welcome, carol</h1>" in html and "Welcome back" not in html
    make_run(alice)
    assert "<h1>Welcome back, alice</h1>" in alice_client.get(reverse("home")).content.decode()


def test_the_fine_tune_form_offers_an_upload_only_to_a_user_without_datasets(alice, alice_client):
    assert 'id="ft-no-dataset"' in alice_client.get(reverse("runs:finetune")).content.decode()
    Dataset.objects.create(owner=alice, name="reviews", status=JobStatus.READY, task="classification",
                           labels=["neg", "pos"])
    assert 'id="ft-no-dataset"' not in alice_client.get(reverse("runs:finetune")).content.decode()


def test_metric_and_task_names_read_as_words():
    from django.template import Context, Template

    out = Template('{% load runs_extras %}{{ "entity_f1"|metric_label }}|{{ "f1_macro"|metric_label }}|'
                   '{{ "token_classification"|words }}').render(Context())
    assert out == "entity F1|macro F1|token classification"


def test_a_refused_launch_says_so_beside_the_launch_button(alice, alice_client, enqueued):
    """A warm-up above the run's steps: its sentence beside its field, and beside the Launch button
    a summary naming the setting, linked to it."""
    from tests.webapp.runs_helpers import make_data
    from tests.webapp.test_runs import post_form

    _, tokenizer = make_data(alice)
    page = post_form(alice_client, tokenizer, max_steps=20, warmup_steps=50)
    html = page.content.decode()
    assert page.status_code == 200
    after_button = html.split('id="launch"', 1)[1]
    summary = after_button.split('id="form-errors-summary"', 1)[1].split("</div>", 1)[0]
    assert "Nothing was launched: one setting needs a fix" in summary
    assert '<a href="#id_warmup_steps">Warm-up steps</a>' in summary
    ok = post_form(alice_client, tokenizer)
    assert ok.status_code == 302
