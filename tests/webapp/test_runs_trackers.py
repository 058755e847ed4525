"""report_to from the web app: check boxes on the launch and fine-tuning forms, a field of both
APIs, a tracker whose package is missing refused with the trainer's sentence (a 400 in the API),
and the run page saying what the worker's run wrote (a path relative to the storage folder, the
command to open it, and a zip of it for the run's owner only)."""
from __future__ import annotations

import io
import sys
import zipfile

import pytest
from django.conf import settings
from django.urls import reverse

from tests.webapp.runs_helpers import make_data, make_run
from tests.webapp.test_runs import post_form
from tests.webapp.test_runs_finetune import FAST, ready_demo, tiny_checkpoint
from webapp.runs import services
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=False)

MISSING = "report_to names mlflow but the mlflow package is not installed: pip install mlflow"


@pytest.fixture
def no_mlflow(monkeypatch):
    """As if the mlflow package were not installed: `import mlflow` fails, find_spec finds nothing."""
    monkeypatch.setitem(sys.modules, "mlflow", None)


def test_the_launch_form_offers_the_trackers_and_stores_the_ones_ticked(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    html = alice_client.get(reverse("runs:new")).content.decode()
    for tracker in ("tensorboard", "mlflow", "wandb"):
        assert f'name="report_to" value="{tracker}"' in html
    assert post_form(alice_client, tokenizer, report_to=["tensorboard"]).status_code == 302
    post_form(alice_client, tokenizer, name="none ticked")
    assert Run.objects.get(name="from the form").config["report_to"] == ["tensorboard"]
    assert Run.objects.get(name="none ticked").config["report_to"] == []


def tracker_box(html: str, tracker: str) -> str:
    """The <input> of the tracker's check box and its label's text."""
    import re

    found = re.search(rf'(<input type="checkbox" name="report_to" value="{tracker}"[^>]*>)\s*([^<]*)', html)
    assert found, tracker
    return found.group(1) + " " + found.group(2).strip()


def test_both_forms_show_a_tracker_that_is_not_installed_as_unavailable_with_its_command(
        alice, alice_client, eager, enqueued, no_mlflow, django_capture_on_commit_callbacks):
    """Before anyone launches (issue 29, point 8): TensorBoard comes with the app; a tracker whose
    package is missing cannot be ticked, and says what installs it."""
    make_data(alice)
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    pages = [alice_client.get(reverse("runs:new")).content.decode(),
             alice_client.get(reverse("runs:finetune") + f"?checkpoint={tiny_checkpoint(alice).id}"
                              f"&dataset={dataset.id}").content.decode()]
    for html in pages:
        mlflow, tensorboard = tracker_box(html, "mlflow"), tracker_box(html, "tensorboard")
        assert " disabled" in mlflow and mlflow.endswith("MLflow (a local store) (not installed here: pip install mlflow)")
        assert " disabled" not in tensorboard and tensorboard.endswith("TensorBoard")


def test_the_launch_form_and_the_api_refuse_a_tracker_that_is_not_installed(alice, alice_client, alice_api,
                                                                           enqueued, no_mlflow):
    _, tokenizer = make_data(alice)
    page = post_form(alice_client, tokenizer, report_to=["mlflow"])
    assert page.status_code == 200 and MISSING in page.content.decode()
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "report_to": ["mlflow"]}, format="json")
    assert response.status_code == 400 and MISSING in response.json()["error"]
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "report_to": ["comet"]}, format="json")
    assert response.status_code == 400 and "comet" in response.content.decode()
    assert not Run.objects.exists() and not enqueued


def test_the_finetune_api_refuses_a_tracker_that_is_not_installed(alice, alice_api, eager, enqueued, no_mlflow,
                                                                 django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    response = alice_api.post(reverse("api-finetune"), {"checkpoint": str(tiny_checkpoint(alice).id),
                                                        "dataset": str(dataset.id), "report_to": ["mlflow"]},
                              format="json")
    assert response.status_code == 400 and MISSING in response.json()["error"]


def test_the_run_page_says_what_the_workers_run_wrote_and_its_owner_downloads_it(
        alice, alice_client, bob_client, eager, django_capture_on_commit_callbacks):
    pytest.importorskip("tensorboard")
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        run = services.finetune_create(owner=alice, checkpoint=tiny_checkpoint(alice), dataset=dataset,
                                       training={**FAST, "report_to": ["tensorboard"]})
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    events = list((run.folder / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1

    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    section = html[html.index('id="tracker-logs"'):]
    section = section[:section.index("</section>")]
    assert f"runs/{run.id}/tensorboard" in section and "tensorboard --logdir tensorboard" in section
    assert str(settings.STORAGE_ROOT) not in section  # never the server's own path
    url = reverse("runs:tracker-logs", args=[run.id, "tensorboard"])
    assert url in section

    response = alice_client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.namelist() == [f"tensorboard/{events[0].name}"]
    assert archive.read(f"tensorboard/{events[0].name}") == events[0].read_bytes()

    assert bob_client.get(url).status_code == 404
    assert alice_client.get(reverse("runs:tracker-logs", args=[run.id, "mlflow"])).status_code == 404


def test_a_run_without_trackers_shows_no_tracker_section(alice, alice_client):
    run = make_run(alice, status=RunStatus.SUCCEEDED)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    assert 'id="tracker-logs"' not in html


def test_a_huge_report_to_list_gets_a_short_sentence(alice, alice_api, eager, enqueued,
                                                     django_capture_on_commit_callbacks):
    """10,000 entries: the list's length is checked first, and no error body repeats the list."""
    _, tokenizer = make_data(alice)
    huge = ["tensorboard"] * 5000 + [f"x{i}" for i in range(5000)]
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), "report_to": huge}, format="json")
    assert response.status_code == 400 and len(response.content) < 2000, len(response.content)
    assert "10,000 entries" in response.json()["error"]
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)
    response = alice_api.post(reverse("api-finetune"), {"checkpoint": str(tiny_checkpoint(alice).id),
                                                        "dataset": str(dataset.id), "report_to": huge}, format="json")
    assert response.status_code == 400 and len(response.content) < 2000, len(response.content)
    assert "10,000 entries" in response.json()["error"]


def test_every_api_error_body_is_bounded(alice, alice_api):
    """A list refused item by item (a sweep's 10,000 bad values, say) gives a few messages and a count."""
    from webapp.api.errors import _flatten, field_messages

    detail = {"values": [f"{'v' * 50} is not a number." for _ in range(10_000)],
              **{f"field{i}": ["bad " * 500] for i in range(50)}}
    flat = _flatten(detail)
    fields = field_messages(detail)
    assert len(flat) < 1200 and "more" in flat
    assert len(str(fields)) < 12_000 and fields["values"][-1] == "(and 9,997 more)"
    assert "(and 31 more fields refused)" in fields["non_field_errors"]  # 51 fields, 20 shown
