"""Nearest neighbours within a dataset (issue 9, section 6): a dataset's texts embedded by a job
(progress, cached per checkpoint, dataset and pooling), then the k texts nearest a query with their
cosine and label; through the trainer, the service and its task, the API (only your own checkpoint
and dataset), the page without JavaScript, and an imported encoder that has no MLM head."""
from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from tests.webapp.import_helpers import imported_checkpoint
from tests.webapp.explorer_models_helpers import family_checkpoint
from tests.webapp.test_runs_finetune import ready_demo, tiny_checkpoint
from trainer.errors import InferenceError
from webapp.explorer import neighbours
from webapp.explorer.models import NeighbourIndex

pytestmark = pytest.mark.django_db(transaction=False)

LIMIT = 24


@pytest.fixture
def world(alice, eager, settings, django_capture_on_commit_callbacks):
    """(Alice's tiny BERT checkpoint, her ready classification demo dataset), at most LIMIT texts."""
    settings.NEIGHBOURS_MAX_TEXTS = LIMIT
    return tiny_checkpoint(alice), ready_demo(alice, django_capture_on_commit_callbacks)


def test_the_trainer_ranks_the_texts_by_the_cosine_of_their_embeddings(world, tmp_path):
    from trainer.inference import downstream
    from trainer.inference import neighbours as nn
    from trainer.inference.loading import load

    checkpoint, dataset = world
    items, total = nn.dataset_texts(dataset.data_dir, LIMIT)
    assert len(items) == LIMIT and total == sum(dataset.sizes.values())
    assert {it["split"] for it in items} == {"train"} and all(it["label"] in dataset.labels for it in items)
    seen: list[float] = []
    meta = nn.build_index(checkpoint.folder, items, tmp_path / "index", pooling="mean", progress=seen.append,
                          batch_size=10)
    assert seen == [pytest.approx(100 * n / LIMIT) for n in (10, 20, 24)]
    assert meta["count"] == LIMIT and not (tmp_path / "index.tmp").exists()

    query = items[7]["text"]
    found = nn.search(checkpoint.folder, tmp_path / "index", query, k=5)
    # brute force: every text's cosine with the query, from the same vectors the embed tool uses
    vectors, _ = downstream.sentence_vectors(load(checkpoint.folder), [query] + [it["text"] for it in items])
    cosines = (vectors[1:] @ vectors[0]).tolist()
    order = sorted(range(LIMIT), key=lambda i: -cosines[i])[:5]
    assert [n["text"] for n in found["neighbours"]] == [items[i]["text"] for i in order]
    assert [n["similarity"] for n in found["neighbours"]] == pytest.approx([cosines[i] for i in order], abs=1e-5)
    top = found["neighbours"][0]
    assert top["text"] == query and top["similarity"] == pytest.approx(1.0, abs=1e-5) and top["rank"] == 1
    assert top["label"] == items[7]["label"]

    nn.build_index(checkpoint.folder, items, tmp_path / "cls", pooling="cls")
    cls = nn.search(checkpoint.folder, tmp_path / "cls", query, k=3)
    assert cls["pooling"] == "cls" and cls["neighbours"][0]["text"] == query
    with pytest.raises(InferenceError, match="k must be between 1 and 50"):
        nn.search(checkpoint.folder, tmp_path / "index", query, k=51)
    with pytest.raises(InferenceError, match="not on disk"):
        nn.search(checkpoint.folder, tmp_path / "nothing", query)


def start(commits, **kwargs) -> NeighbourIndex:
    """index_start, its job run (eagerly) when the transaction would commit."""
    with commits(execute=True):
        index = neighbours.index_start(**kwargs)
    index.refresh_from_db()
    return index


def test_the_job_embeds_once_per_checkpoint_dataset_and_pooling(alice, world, monkeypatch,
                                                                 django_capture_on_commit_callbacks):
    from trainer.inference import neighbours as nn

    commits = django_capture_on_commit_callbacks
    checkpoint, dataset = world
    builds = []
    real = nn.build_index
    monkeypatch.setattr(nn, "build_index", lambda *a, **kw: builds.append(kw["pooling"]) or real(*a, **kw))
    index = start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset, pooling="mean")
    assert index.status == "ready" and index.progress == 100.0 and index.count == LIMIT and index.limit == LIMIT
    assert index.total == sum(dataset.sizes.values()) and (index.folder / "vectors.pt").is_file()
    again = start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset, pooling="mean")
    assert again.pk == index.pk and builds == ["mean"]  # cached: no second job
    start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset, pooling="cls")
    assert builds == ["mean", "cls"] and NeighbourIndex.objects.count() == 2

    (index.folder / "vectors.pt").unlink()  # gone from disk: built again
    start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset, pooling="mean")
    assert builds == ["mean", "cls", "mean"] and (index.folder / "vectors.pt").is_file()

    found = neighbours.search(checkpoint=checkpoint, dataset=dataset, pooling="mean", text="Return the path.", k=4)
    assert len(found["neighbours"]) == 4 and found["count"] == LIMIT and found["index"] == str(index.pk)
    sims = [n["similarity"] for n in found["neighbours"]]
    assert sims == sorted(sims, reverse=True)

    with commits(execute=True):
        dataset.delete()  # the indexes go with their dataset, files and all
    assert not NeighbourIndex.objects.exists() and not index.folder.exists()


def test_a_failed_job_says_why_and_is_built_again(alice, world, monkeypatch, django_capture_on_commit_callbacks):
    from trainer.inference import neighbours as nn

    commits = django_capture_on_commit_callbacks
    checkpoint, dataset = world

    def broken(*a, **kw):
        raise InferenceError("The checkpoint is broken.")

    monkeypatch.setattr(nn, "build_index", broken)
    index = start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset)
    assert index.status == "failed" and index.error == "The checkpoint is broken."
    with pytest.raises(InferenceError, match="Embedding the dataset .* failed: The checkpoint is broken"):
        neighbours.search(checkpoint=checkpoint, dataset=dataset, text="x")
    monkeypatch.undo()
    index = start(commits, owner=alice, checkpoint=checkpoint, dataset=dataset)
    assert index.status == "ready" and index.error == ""


def test_without_a_worker_the_index_waits_and_the_search_says_so(alice, alice_api, eager,
                                                                  django_capture_on_commit_callbacks):
    dataset = ready_demo(alice, django_capture_on_commit_callbacks)  # the job below: queued at commit, never run
    checkpoint = tiny_checkpoint(alice)
    body = {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id)}
    refused = alice_api.post(reverse("api-explore-neighbours"), {**body, "text": "Open a file."}, format="json")
    assert refused.status_code == 400 and "has not been embedded with this checkpoint and mean pooling yet" in \
        refused.json()["error"]
    response = alice_api.post(reverse("api-explore-neighbour-index"), body, format="json")  # no worker: it waits
    assert response.status_code == 202 and response.json()["status"] == "pending", response.content
    refused = alice_api.post(reverse("api-explore-neighbours"), {**body, "text": "Open a file."}, format="json")
    assert refused.status_code == 400 and "is still being embedded (0%)" in refused.json()["error"]


def test_the_api_builds_and_searches_only_your_own(alice, bob, alice_api, bob_api, world,
                                                   django_capture_on_commit_callbacks):
    checkpoint, dataset = world
    body = {"checkpoint": str(checkpoint.id), "dataset": str(dataset.id), "pooling": "mean"}
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_api.post(reverse("api-explore-neighbour-index"), body, format="json")
    assert response.status_code == 202, response.content  # queued; the job ran when the request committed
    response = alice_api.post(reverse("api-explore-neighbour-index"), body, format="json")
    assert response.status_code == 200, response.content
    index = response.json()
    assert index["status"] == "ready" and index["count"] == LIMIT and index["dataset_name"] == dataset.name
    detail = alice_api.get(reverse("api-explore-neighbour-index-detail", args=[index["id"]]))
    assert detail.status_code == 200 and detail.json()["progress"] == 100.0
    found = alice_api.post(reverse("api-explore-neighbours"), {**body, "text": "Return the path of a file.", "k": 3},
                           format="json")
    assert found.status_code == 200, found.content
    answer = found.json()
    assert answer["checkpoint"] == str(checkpoint.id) and answer["dataset"] == str(dataset.id)
    assert len(answer["neighbours"]) == 3 and all(n["label"] in dataset.labels for n in answer["neighbours"])

    # Bob: neither Alice's checkpoint, nor her dataset, nor her index
    bobs_dataset = ready_demo(bob, django_capture_on_commit_callbacks)
    for api, ckpt, data in ((alice_api, checkpoint.id, bobs_dataset.id), (bob_api, checkpoint.id, bobs_dataset.id),
                            (bob_api, tiny_checkpoint(bob).id, dataset.id)):
        for name, extra in (("api-explore-neighbour-index", {}), ("api-explore-neighbours", {"text": "x"})):
            response = api.post(reverse(name), {"checkpoint": str(ckpt), "dataset": str(data), **extra},
                                format="json")
            assert response.status_code == 404 and "not yours" in response.json()["error"], (name, ckpt, data)
    assert bob_api.get(reverse("api-explore-neighbour-index-detail", args=[index["id"]])).status_code == 404
    assert NeighbourIndex.objects.filter(owner=bob).count() == 0

    # a checkpoint that is not an encoder, a bad k: a sentence
    gpt = family_checkpoint(alice, "gpt", run=True)
    refused = alice_api.post(reverse("api-explore-neighbour-index"), {**body, "checkpoint": str(gpt.id)},
                             format="json")
    assert refused.status_code == 400 and "Nearest neighbours need sentence embeddings" in refused.json()["error"]
    refused = alice_api.post(reverse("api-explore-neighbours"), {**body, "text": "x", "k": 0}, format="json")
    assert refused.status_code == 400 and "k" in refused.json()["fields"]


def test_an_imported_sentence_encoder_without_an_mlm_head(alice, alice_api, alice_client, world,
                                                          django_capture_on_commit_callbacks):
    _, dataset = world
    encoder = imported_checkpoint(alice, kind="model", name="bare encoder")
    assert "mlm" not in neighbours.services.checkpoint_objectives(encoder)
    body = {"checkpoint": str(encoder.id), "dataset": str(dataset.id), "pooling": "cls"}
    with django_capture_on_commit_callbacks(execute=True):
        alice_api.post(reverse("api-explore-neighbour-index"), body, format="json")
    response = alice_api.post(reverse("api-explore-neighbour-index"), body, format="json")
    assert response.status_code == 200 and response.json()["status"] == "ready", response.content
    found = alice_api.post(reverse("api-explore-neighbours"), {**body, "text": "Return the path of a file."},
                           format="json")
    assert found.status_code == 200 and len(found.json()["neighbours"]) == 5, found.content
    pair = alice_api.post(reverse("api-explore-embed"), {"checkpoint": str(encoder.id),
                                                         "sentences": ["Open a file.", "Close it."]}, format="json")
    assert pair.status_code == 200, pair.content
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={encoder.id}").content.decode()
    assert '<section class="card" id="neighbours" data-kinds="encoder unilm"' in page


def test_the_page_without_javascript_embeds_and_finds_the_neighbours(alice, alice_client, world,
                                                                     django_capture_on_commit_callbacks):
    checkpoint, dataset = world
    page = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    assert f"at most its first\n        {LIMIT} texts" in page and f'<option value="{dataset.id}"' in page
    form = {"checkpoint": str(checkpoint.id), "nn_dataset": str(dataset.id), "nn_pooling": "mean"}
    waiting = alice_client.post(reverse("explorer:index"), {**form, "action": "neighbours_index"}).content.decode()
    assert "0% embedded. Reload the page to follow it." in waiting and 'role="progressbar"' in waiting
    with django_capture_on_commit_callbacks(execute=True):  # the job, as a worker runs it
        neighbours.index_process(index_id=NeighbourIndex.objects.get().pk)
    built = alice_client.get(reverse("explorer:index") + f"?checkpoint={checkpoint.id}").content.decode()
    assert f"{dataset.name}, mean pooling:" in built and f"ready: {LIMIT} of the dataset" in built
    text = "Return the absolute path of a file."
    html = alice_client.post(reverse("explorer:index"), {**form, "action": "neighbours", "nn_text": text,
                                                         "nn_k": 3}).content.decode()
    assert '<table class="table explorer-neighbours">' in html and html.count("<tr><td>") == 3, html
    found = neighbours.search(checkpoint=checkpoint, dataset=dataset, text=text, k=3)
    for n in found["neighbours"]:  # each row: rank, text, label, split, cosine
        assert (f"<tr><td>{n['rank']}</td><td>{escape(n['text'])}</td><td>{n['label']}</td><td>{n['split']}</td>"
                f"<td>{n['similarity']:.3f}</td></tr>") in html
    assert f"Searched {LIMIT} of the" in html
    missing = alice_client.post(reverse("explorer:index"), {**form, "action": "neighbours", "nn_text": " "})
    assert "Type a sentence to find its nearest neighbours." in missing.content.decode()
