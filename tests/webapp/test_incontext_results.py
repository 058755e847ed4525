"""Issue 12 point 4: each zero-, one- and few-shot evaluation (POST /api/explore/incontext-accuracy/)
is saved and listed on the dataset's page and in GET /api/datasets/<id>/leaderboard/ (`incontext`)
beside the fine-tuning runs, charted against k with the best fine-tuned test accuracy as a
reference; only the owner's, and gone with the checkpoint or the dataset."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_explorer_incontext import ACCURACY, make_dataset
from tests.webapp.test_runs_compare import finetune_run
from webapp.datasets import services as dataset_services
from webapp.explorer.models import InContextResult

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpt(alice):
    return family_checkpoint(alice, "gpt", run=True)


def evaluate(api, checkpoint, dataset, **extra):
    body = {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id), "k_max": 2, "n_queries": 2,
            "template": "Q: {text}\nA: {label}", "seed": 3, **extra}
    return api.post(ACCURACY, body, format="json")


def test_an_evaluation_is_saved_and_listed_beside_the_fine_tuning_runs(alice, alice_api, alice_client, gpt):
    dataset = make_dataset(alice)
    finetune_run(alice, dataset, gpt, "tuned", lr=1e-3, valid=[0.5], test={"accuracy": 0.75})
    finetune_run(alice, dataset, gpt, "better", lr=1e-4, valid=[0.6], test={"accuracy": 0.8})
    response = evaluate(alice_api, gpt, dataset)
    assert response.status_code == 200, response.json()
    answer = response.json()
    saved = InContextResult.objects.get()
    assert answer["result"] == str(saved.id)
    assert (saved.owner, saved.checkpoint, saved.dataset) == (alice, gpt, dataset)
    assert (saved.k_max, saved.seed, saved.normalise, saved.n_queries) == (2, 3, True, 2)
    assert saved.template == "Q: {text}\nA: {label}" and saved.accuracies == answer["accuracy"]

    board = alice_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).json()
    assert board["best_test_accuracy"] == 0.8 and [r["name"] for r in board["rows"]] == ["better", "tuned"]
    [row] = board["incontext"]
    assert row["id"] == str(saved.id) and row["checkpoint"] == gpt.label and row["checkpoint_id"] == str(gpt.id)
    assert row["k"] == [0, 1, 2] and row["accuracy"] == answer["accuracy"]
    assert row["best_accuracy"] == max(answer["accuracy"])
    assert row["best_k"] == answer["accuracy"].index(max(answer["accuracy"]))

    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="incontext-chart"' in html and f'data-incontext="{saved.id}"' in html
    start = html.index('id="incontext-data"')
    charted = json.loads(html[html.index(">", start) + 1:html.index("</script>", start)])
    assert [e["accuracy"] for e in charted] == [answer["accuracy"]]
    start = html.index('id="incontext-reference"')
    assert json.loads(html[html.index(">", start) + 1:html.index("</script>", start)]) == 0.8


def test_the_best_k_is_the_highest_accuracy_and_the_smallest_k_on_a_tie(alice, gpt):
    dataset = make_dataset(alice)
    result = InContextResult(owner=alice, checkpoint=gpt, dataset=dataset, template="{text} {label}", k_max=4,
                             n_queries=10, accuracies=[0.5, 0.7, 0.6, 0.7, 0.2])
    assert result.best == (1, 0.7)


def test_without_runs_or_evaluations_the_page_says_how_to_make_one(alice, alice_api, alice_client):
    dataset = make_dataset(alice)
    board = alice_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).json()
    assert board["incontext"] == [] and board["best_test_accuracy"] is None
    html = alice_client.get(reverse("datasets:detail", args=[dataset.id])).content.decode()
    assert 'id="incontext"' in html and "None saved yet" in html and 'id="incontext-chart"' not in html


def test_only_the_owners_evaluations_are_saved_and_listed(alice, bob, alice_api, bob_api, bob_client, gpt):
    mine = make_dataset(alice)
    assert evaluate(alice_api, gpt, mine).status_code == 200
    # bob cannot evaluate alice's checkpoint on his dataset, nor anything on hers: nothing is saved
    his = make_dataset(bob)
    assert evaluate(bob_api, gpt, his).status_code == 404
    assert evaluate(bob_api, family_checkpoint(bob, "gpt", run=True), mine).status_code == 404
    assert InContextResult.objects.count() == 1
    assert bob_api.get(reverse("api-dataset-leaderboard", args=[mine.id])).status_code == 404
    assert bob_client.get(reverse("datasets:detail", args=[mine.id])).status_code == 404
    # a result row of alice's pointing at bob's dataset (never made by the API) stays out of his board
    InContextResult.objects.create(owner=alice, checkpoint=gpt, dataset=his, template="{text} {label}", k_max=0,
                                   n_queries=1, accuracies=[1.0])
    assert bob_api.get(reverse("api-dataset-leaderboard", args=[his.id])).json()["incontext"] == []
    assert gpt.label not in bob_client.get(reverse("datasets:detail", args=[his.id])).content.decode()


def test_deleting_the_checkpoint_or_the_dataset_deletes_its_evaluations(alice, alice_api, gpt):
    first, second = make_dataset(alice), make_dataset(alice)
    other = family_checkpoint(alice, "gpt")  # an imported one
    for checkpoint, dataset in ((gpt, first), (other, first), (gpt, second)):
        assert evaluate(alice_api, checkpoint, dataset).status_code == 200
    assert InContextResult.objects.count() == 3
    other.delete()
    assert set(InContextResult.objects.values_list("checkpoint", "dataset")) == {(gpt.id, first.id), (gpt.id, second.id)}
    dataset_services.dataset_delete(dataset=first)
    assert list(InContextResult.objects.values_list("dataset", flat=True)) == [second.id]
    gpt.run.delete()  # a run's checkpoints go with it
    assert not InContextResult.objects.exists()


def test_the_schema_documents_the_leaderboards_incontext_list(alice, alice_api, gpt):
    from drf_spectacular.generators import SchemaGenerator

    schema = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True)))
    ok = schema["paths"]["/api/datasets/{id}/leaderboard/"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Leaderboard"}
    components = schema["components"]["schemas"]
    board_schema, row_schema = components["Leaderboard"], components["InContextRow"]
    assert board_schema["properties"]["incontext"]["items"] == {"$ref": "#/components/schemas/InContextRow"}
    # what the API answers is what the schema names, every field of it
    dataset = make_dataset(alice)
    assert evaluate(alice_api, gpt, dataset).status_code == 200
    board = alice_api.get(reverse("api-dataset-leaderboard", args=[dataset.id])).json()
    assert set(board) == set(board_schema["properties"]) == set(board_schema["required"])
    assert set(board["incontext"][0]) == set(row_schema["properties"]) == set(row_schema["required"])
