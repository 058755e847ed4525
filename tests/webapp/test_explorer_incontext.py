"""In-context learning in the explorer: POST /api/explore/prompt-builder/ (the exact prompt and each
label's score, as trainer.inference.incontext gives them) and /api/explore/incontext-accuracy/
(accuracy against k); both ownership-checked on the checkpoint and the dataset, with sentences
for what cannot be scored."""
from __future__ import annotations

import json

import pytest

from tests.webapp.explorer_models_helpers import explorer_tools, family_checkpoint
from webapp.datasets.models import Dataset
from webapp.jobs.models import JobStatus

pytestmark = pytest.mark.django_db

BUILDER, ACCURACY = "/api/explore/prompt-builder/", "/api/explore/incontext-accuracy/"
TRAIN = [{"text": "open the file", "label": "io"}, {"text": "sort the list", "label": "data"},
         {"text": "read a line", "label": "io"}, {"text": "merge two dicts", "label": "data"}]
HELD = [{"text": "append an item", "label": "data"}, {"text": "close the socket", "label": "io"}]


def make_dataset(owner, *, task="classification", status=JobStatus.READY) -> Dataset:
    dataset = Dataset.objects.create(owner=owner, name="modules", status=status, task=task, labels=["data", "io"],
                                     sizes={"train": 4, "validation": 2, "test": 0})
    folder = dataset.data_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.json").write_text(json.dumps({"task": task, "labels": ["data", "io"],
                                                      "sizes": {"train": 4, "validation": 2, "test": 0}}))
    for split, rows in (("train", TRAIN), ("validation", HELD), ("test", [])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dataset


@pytest.fixture
def gpt(alice):
    return family_checkpoint(alice, "gpt", run=True)


def test_the_prompt_builder_shows_the_exact_prompt_and_each_labels_score(alice, alice_api, gpt):
    from trainer.inference import incontext

    dataset = make_dataset(alice)
    body = {"checkpoint": str(gpt.id), "dataset": str(dataset.id), "k": 2, "seed": 5, "index": 1,
            "template": "Q: {text}\nA: {label}"}
    response = alice_api.post(BUILDER, body, format="json")
    assert response.status_code == 200, response.json()
    data = response.json()
    direct = incontext.score_prompt(gpt.folder, dataset.data_dir, k=2, seed=5, index=1, template="Q: {text}\nA: {label}")
    assert data["prompt"] == direct["prompt"] and data["prompt"].endswith("Q: close the socket\nA:")
    assert data["prompt"].count("Q: ") == 3 and data["gold"] == "io"
    assert [s["label"] for s in data["scores"]] == ["data", "io"]
    assert [s["score"] for s in data["scores"]] == pytest.approx([s["score"] for s in direct["scores"]])

    accuracy = alice_api.post(ACCURACY, {"checkpoint": str(gpt.id), "dataset": str(dataset.id), "k_max": 2,
                                         "n_queries": 2}, format="json")
    assert accuracy.status_code == 200, accuracy.json()
    assert accuracy.json()["k"] == [0, 1, 2] and len(accuracy.json()["accuracy"]) == 3


def test_someone_elses_checkpoint_or_dataset_is_a_404(alice, bob, alice_api, bob_api, gpt):
    mine = make_dataset(alice)
    theirs = make_dataset(bob)
    for url in (BUILDER, ACCURACY):
        assert bob_api.post(url, {"checkpoint": str(gpt.id), "dataset": str(theirs.id)}, format="json").status_code == 404
        assert alice_api.post(url, {"checkpoint": str(gpt.id), "dataset": str(theirs.id)},
                              format="json").status_code == 404
    assert alice_api.post(BUILDER, {"checkpoint": str(gpt.id), "dataset": str(mine.id)}, format="json").status_code == 200


def test_what_cannot_be_scored_is_a_sentence(alice, alice_api, gpt):
    regression = make_dataset(alice, task="regression")
    response = alice_api.post(BUILDER, {"checkpoint": str(gpt.id), "dataset": str(regression.id)}, format="json")
    assert response.status_code == 400 and "not a classification dataset" in response.json()["error"]
    dataset = make_dataset(alice)
    response = alice_api.post(BUILDER, {"checkpoint": str(gpt.id), "dataset": str(dataset.id),
                                        "template": "{label}: {text}"}, format="json")
    assert response.status_code == 400 and "before {label}" in response.json()["error"]
    bert = family_checkpoint(alice, "bert", run=True)
    response = alice_api.post(BUILDER, {"checkpoint": str(bert.id), "dataset": str(dataset.id)}, format="json")
    assert response.status_code == 400 and "causal language model" in response.json()["error"]


def test_the_explorer_page_offers_the_prompt_builder_for_a_gpt_with_your_datasets_only(alice, bob, alice_client, gpt):
    make_dataset(alice)
    theirs = make_dataset(bob)
    theirs.name = "bobs secret"
    theirs.save()
    make_dataset(alice, task="regression").__class__.objects.filter(task="regression").update(name="numbers")
    html = alice_client.get(f"/explore/?checkpoint={gpt.id}").content.decode()
    start = html.index('id="prompt-builder"')
    panel = html[start:html.index("</section>", start)]
    assert 'data-kinds="gpt"' in panel and " hidden" not in panel[:panel.index(">")]
    assert "modules (2 labels)" in panel and "bobs secret" not in panel and "numbers" not in panel
    tools = explorer_tools(html)
    assert (tools["prompt_builder"]["url"], tools["incontext_accuracy"]["url"]) == (BUILDER, ACCURACY)
    assert "explorer_incontext.js" in html


def test_without_javascript_the_page_builds_the_prompt_and_charts_accuracy_as_a_table(alice, alice_client, bob,
                                                                                       gpt):
    from django.utils.html import escape

    from trainer.inference import incontext
    from webapp.explorer.models import InContextResult

    dataset = make_dataset(alice)
    form = {"checkpoint": str(gpt.id), "icl_dataset": str(dataset.id), "icl_template": "Q: {text}\nA: {label}",
            "icl_seed": "5", "icl_normalise": "on"}
    html = alice_client.post("/explore/", {**form, "action": "prompt_builder", "icl_k": "2",
                                           "icl_index": "1"}).content.decode()
    direct = incontext.score_prompt(gpt.folder, dataset.data_dir, k=2, seed=5, index=1,
                                    template="Q: {text}\nA: {label}")
    assert f"<pre class=\"explorer-output\" data-icl-prompt>{escape(direct['prompt'])}</pre>" in html
    for s in direct["scores"]:
        assert f"<td>{s['label']}</td><td>{escape(' '.join(s['tokens']))}</td><td>{s['logprob']:.3f}</td>" in html
    assert f"the dataset says “{direct['gold']}”" in html
    html = alice_client.post("/explore/", {**form, "action": "incontext_accuracy", "icl_kmax": "1",
                                           "icl_queries": "2"}).content.decode()
    saved = InContextResult.objects.get(owner=alice)
    assert saved.k_max == 1 and saved.seed == 5 and saved.normalise
    for k, a in enumerate(saved.accuracies):
        assert f"<tr><td>{k}</td><td>{100 * a:.1f}%</td></tr>" in html
    foreign = make_dataset(bob)
    assert alice_client.post("/explore/", {**form, "icl_dataset": str(foreign.id),
                                           "action": "prompt_builder"}).status_code == 404
