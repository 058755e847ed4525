"""The model server's app in this process (Starlette's TestClient, with the official `openai`
client on top of it where the answer is OpenAI's): T5 completions and the embeddings of T5 and
ELMo, Hugging Face's task shapes for fine-tuned encoders (fill-mask, classification, tagging,
question answering), a full queue's 429, and the engine's batches giving each choice the text
it gets alone."""
from __future__ import annotations

import threading

import openai
import pytest
import torch
from starlette.testclient import TestClient

from tests.trainer.finetune_helpers import fine_tuner
from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer
from tests.trainer.serve_helpers import long_gpt
from trainer.inference import downstream, generate, masked
from trainer.inference.generate import Decoding
from trainer.inference.loading import load
from trainer.serve.app import Server, build_app
from trainer.serve.engine import Choice, Engine
from trainer.serve.model import open_model

KEY = "sk-app"


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("serve-app") / "tok")


def app_for(folder, **options):
    server = Server(open_model(folder, name="m"), keys=[KEY], **options)
    return server, build_app(server)


@pytest.fixture
def client_of():
    opened = []

    def make(folder, **options):
        server, app = app_for(folder, **options)
        http = TestClient(app, headers={"Authorization": f"Bearer {KEY}"})
        http.__enter__()  # runs the lifespan: the engine's and the batcher's threads
        opened.append(http)
        return server, http, openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http,
                                           max_retries=0)
    yield make
    for http in opened:
        http.__exit__(None, None, None)


def test_t5_completes_as_the_explorer_and_embeds_with_its_encoder(tok, tmp_path, client_of):
    folder = make_checkpoint("t5", tmp_path / "t5", tok)
    server, http, client = client_of(folder)
    assert set(server.endpoints) >= {"/v1/completions", "/v1/embeddings"}
    got = client.completions.create(model="m", prompt="summarize: the cat sat on the mat", max_tokens=6,
                                    temperature=0)
    ours = generate.generate(folder, "summarize: the cat sat on the mat", strategy="greedy", max_new_tokens=6)
    assert got.choices[0].text == ours["text"]
    vectors = client.embeddings.create(model="m", input=["the cat", "the dog ran to the park"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 32
    norms = [sum(x * x for x in d.embedding) ** 0.5 for d in vectors.data]
    assert norms == pytest.approx([1.0, 1.0], abs=1e-5)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="m", prompt="the cat", max_tokens=5000)
    assert "at most 1024" in e.value.body["message"]


def test_elmo_embeddings_average_its_layers(tok, tmp_path, client_of):
    folder = make_checkpoint("elmo", tmp_path / "elmo", tok)
    server, http, client = client_of(folder)
    assert "/v1/completions" not in server.endpoints and "/v1/embeddings" in server.endpoints
    one = client.embeddings.create(model="m", input="the cat sat on the mat").data[0].embedding
    loaded = load(folder)
    ids = loaded.tokenizer.tok.encode("the cat sat on the mat", add_special_tokens=False).ids
    with torch.no_grad():
        layers = loaded.model.embed(torch.tensor([ids]))
        expected = torch.nn.functional.normalize(torch.stack(layers).float().mean(0)[0].mean(0), dim=-1)
    assert one == pytest.approx(expected.tolist(), abs=1e-5)


def test_fill_mask_in_hugging_faces_shape(tok, tmp_path, client_of):
    folder = make_checkpoint("bert", tmp_path / "bert", tok, objectives=["mlm", "nsp"])
    server, http, client = client_of(folder)
    answer = http.post("/v1/fill-mask", json={"inputs": "the cat sat on the [MASK].", "parameters": {"top_k": 3}})
    assert answer.status_code == 200
    found = answer.json()
    ours = masked.fill_mask(folder, "the cat sat on the [MASK].", top_k=3)[0]["predictions"]
    assert [x["token"] for x in found] == [p["id"] for p in ours]
    assert [x["score"] for x in found] == pytest.approx([p["prob"] for p in ours])
    assert set(found[0]) == {"score", "token", "token_str", "sequence"}
    assert found[0]["sequence"].startswith("the cat sat on the")
    two = http.post("/v1/fill-mask", json={"inputs": "the [MASK] sat on the [MASK]."}).json()
    assert len(two) == 2 and len(two[0]) == 5  # one list per mask
    refused = http.post("/v1/text-classification", json={"inputs": "x"})
    assert refused.status_code == 400 and "cannot answer text classification" in refused.json()["error"]["message"]
    bad = http.post("/v1/fill-mask", json={"inputs": "no mask here"})
    assert bad.status_code == 400 and "[MASK]" in bad.json()["error"]["message"]


@pytest.fixture(scope="module")
def tuned(trained_run, tmp_path_factory):
    return fine_tuner(trained_run[0].last_checkpoint, tmp_path_factory.mktemp("serve-tuned"), steps=4)


def test_a_classifier_a_tagger_and_a_reader_answer_in_hugging_faces_shapes(tuned, client_of):
    folder = tuned("classification")
    server, http, client = client_of(folder)
    assert "/v1/text-classification" in server.endpoints and "/v1/completions" not in server.endpoints
    labels = http.post("/v1/text-classification", json={"inputs": "Return the absolute path of a file."}).json()
    ours = downstream.classify(folder, "Return the absolute path of a file.")
    assert [x["label"] for x in labels] == [x["label"] for x in ours["labels"]]
    assert [x["score"] for x in labels] == pytest.approx([x["probability"] for x in ours["labels"]])
    assert sum(x["score"] for x in labels) == pytest.approx(1.0)

    folder = tuned("token_classification")
    server, http, client = client_of(folder)
    text = "Guido van Rossum created Python in Amsterdam."
    entities = http.post("/v1/token-classification", json={"inputs": text}).json()
    ours = downstream.tag(folder, text)["entities"]
    assert [(e["entity_group"], e["start"], e["end"], e["word"]) for e in entities] == \
        [(e["type"], e["start"], e["end"], e["text"]) for e in ours]

    folder = tuned("extractive_qa")
    server, http, client = client_of(folder)
    context = "The os.path module returns the absolute path of a file when asked."
    found = http.post("/v1/question-answering", json={"inputs": {"question": "What does it return?",
                                                                 "context": context}}).json()
    assert set(found) == {"score", "start", "end", "answer"} and 0.0 <= found["score"] <= 1.0
    assert found["answer"] == downstream.answer(folder, "What does it return?", context)["answer"]["text"]
    assert context[found["start"]:found["end"]] == found["answer"] or found["answer"] == ""
    missing = http.post("/v1/question-answering", json={"inputs": {"question": "What?"}})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "inputs.context"


def test_a_full_queue_is_a_429_with_retry_after(tok, tmp_path):
    folder = make_checkpoint("gpt", tmp_path / "gpt", tok)
    server, app = app_for(folder, max_waiting=2)  # no lifespan: the engine does not take what waits
    http = TestClient(app, headers={"Authorization": f"Bearer {KEY}"})
    p = generate.prepare(load(folder), "The cat", 4)
    server.engine.submit([Choice(p, Decoding(max_new_tokens=4), lambda e: None) for _ in range(2)])
    client = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http, max_retries=0)
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model="m", prompt="The cat", max_tokens=4)
    assert e.value.response.headers["retry-after"] == "1"
    assert "busy" in e.value.body["message"] and e.value.body["type"] == "rate_limit_error"
    assert http.get("/health").json()["waiting"] == 2  # health answers meanwhile
    unauthorised = TestClient(app).get("/v1/models")
    assert unauthorised.status_code == 401 and set(unauthorised.json()["error"]) == {"message", "type", "param", "code"}
    nowhere = http.get("/v1/nothing")
    assert nowhere.status_code == 404 and "capabilities" in nowhere.json()["error"]["message"]
    broken = http.post("/v1/completions", content=b"{not json")
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]


def test_a_batch_of_prompts_of_different_lengths_gives_each_its_text_alone(tok, tmp_path):
    folder = make_checkpoint("gpt", tmp_path / "gpt", tok, seed=3)
    loaded = load(folder)
    prompts = ["The cat", "Paris is the capital of France and", "It was", "The function returns a list of"]
    decodings = [Decoding(max_new_tokens=10), Decoding("sample", 10, 1, 0.9, 0, 0.95, 11),
                 Decoding(max_new_tokens=10), Decoding("sample", 10, 1, 1.2, 0, 1.0, 5)]
    alone = []
    for text, opts in zip(prompts, decodings):
        out = generate.generate(folder, text, **{k: v for k, v in opts.as_dict().items() if v is not None})
        alone.append(out["text"])
    engine = Engine(lambda: loaded, max_batch=8)
    got: dict[int, str] = {}
    done = threading.Event()

    def emit(event):
        if event.kind == "done":
            got[event.index] = event.text
            if len(got) == len(prompts):
                done.set()
    engine.submit([Choice(generate.prepare(loaded, t, 10), o, emit, index=i)
                   for i, (t, o) in enumerate(zip(prompts, decodings))])
    engine.start()  # after the submit: all four wait, so they are decoded as one batch
    try:
        assert done.wait(60)
    finally:
        engine.stop()
    assert [got[i] for i in range(len(prompts))] == alone


def test_requests_that_arrive_during_a_batch_join_it_and_each_gets_its_text_alone(tok, tmp_path):
    folder = make_checkpoint("gpt", tmp_path / "slow", tok, model=long_gpt(tok))
    loaded = load(folder)
    long_prompt, prompts = "The cat", ["Paris is the capital of France and", "It was", "The dog ran to"]
    decodings = [Decoding(max_new_tokens=8), Decoding("sample", 8, 1, 0.9, 0, 0.95, 11), Decoding(max_new_tokens=8)]
    alone = [generate.generate(folder, t, **{k: v for k, v in o.as_dict().items() if v is not None})["text"]
             for t, o in zip(prompts, decodings)]
    long_alone = generate.generate(folder, long_prompt, strategy="greedy", max_new_tokens=200)["text"]
    engine = Engine(lambda: loaded, max_batch=8).start()
    got: dict[int, str] = {}
    started, done = threading.Event(), threading.Event()

    def emit(event):
        if event.kind == "delta" and event.index == 0:
            started.set()
        if event.kind == "done":
            got[event.index] = event.text
            if len(got) == len(prompts) + 1:
                done.set()
    try:
        engine.submit([Choice(generate.prepare(loaded, long_prompt, 200), Decoding(max_new_tokens=200), emit)])
        assert started.wait(60)  # the long reply is being written: the others arrive during its batch
        engine.submit([Choice(generate.prepare(loaded, t, 8), o, emit, index=i + 1)
                       for i, (t, o) in enumerate(zip(prompts, decodings))])
        assert done.wait(120)
    finally:
        engine.stop()
    assert engine.joined == len(prompts) and engine.finished == len(prompts) + 1
    assert [got[i + 1] for i in range(len(prompts))] == alone
    assert got[0] == long_alone
