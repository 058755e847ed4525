"""The model server as a user runs it: `python -m trainer serve PATH` in a process of its own on a
port, talked to with the official `openai` client (its typed exceptions for each error) and with
plain HTTP for the server-sent events. Its answers equal the explorer's for the same checkpoint,
prompt, decoding and seed."""
from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import numpy as np
import openai
import pytest

from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer
from tests.trainer.serve_helpers import KEY, as_sft, long_gpt, serving
from trainer.inference import generate
from trainer.inference.downstream import sentence_vectors
from trainer.inference.loading import load


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    tok = make_tokenizer(root / "tok")
    gpt = make_checkpoint("gpt", root / "my-gpt", tok)
    sft = as_sft(make_checkpoint("gpt", root / "my-chat", tok, seed=1))
    bert = make_checkpoint("bert", root / "my-bert", tok, objectives=["mlm", "nsp"])
    slow = make_checkpoint("gpt", root / "slow-gpt", tok, model=long_gpt(tok))
    return {"root": root, "gpt": gpt, "sft": sft, "bert": bert, "slow": slow}


@pytest.fixture(scope="module")
def gpt_server(folders):
    with serving(folders["gpt"], folders["root"]) as info:
        yield info


@pytest.fixture(scope="module")
def client(gpt_server):
    return openai.OpenAI(base_url=gpt_server["url"], api_key=KEY, max_retries=0, timeout=60)


def test_models_lists_the_checkpoint_and_a_key_is_required(gpt_server, client):
    assert [m.id for m in client.models.list().data] == ["my-gpt"]
    assert client.models.retrieve("my-gpt").owned_by == "lm-workbench"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4")
    assert e.value.body["code"] == "model_not_found"
    for key in ("wrong-key", ""):
        anonymous = openai.OpenAI(base_url=gpt_server["url"], api_key=key or "none", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            anonymous.completions.create(model="my-gpt", prompt="The cat", max_tokens=3)
        assert e.value.body["code"] == "invalid_api_key" and "API key" in e.value.body["message"]
    health = httpx.get(gpt_server["url"].removesuffix("/v1") + "/health")  # no key needed
    assert health.status_code == 200 and health.json()["model"] == "my-gpt"


def test_a_completion_equals_the_explorers_generation(folders, client):
    greedy = client.completions.create(model="my-gpt", prompt="The cat sat", max_tokens=12, temperature=0)
    ours = generate.generate(folders["gpt"], "The cat sat", strategy="greedy", max_new_tokens=12)
    assert greedy.choices[0].text == ours["text"] and greedy.choices[0].text
    assert greedy.choices[0].finish_reason == ("stop" if ours["stopped"] == "end" else "length")
    assert greedy.usage.prompt_tokens == ours["prompt_tokens"]
    assert greedy.usage.completion_tokens == len(ours["ids"])
    assert greedy.usage.total_tokens == ours["prompt_tokens"] + len(ours["ids"])
    sampled = client.completions.create(model="my-gpt", prompt="The dog", max_tokens=10, temperature=0.8,
                                        top_p=0.9, seed=7)
    theirs = generate.generate(folders["gpt"], "The dog", strategy="sample", temperature=0.8, top_p=0.9, seed=7,
                               max_new_tokens=10)
    assert sampled.choices[0].text == theirs["text"]
    again = client.completions.create(model="my-gpt", prompt="The dog", max_tokens=10, temperature=0.8, top_p=0.9,
                                      seed=7)
    assert again.choices[0].text == sampled.choices[0].text


def test_a_stream_sends_the_same_text_in_pieces_then_usage_and_done(gpt_server, client):
    whole = client.completions.create(model="my-gpt", prompt="Paris is", max_tokens=10, temperature=0)
    stream = client.completions.create(model="my-gpt", prompt="Paris is", max_tokens=10, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert len([c for c in chunks if c.choices and c.choices[0].text]) > 1  # token by token, not at once
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    with httpx.stream("POST", gpt_server["url"] + "/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "my-gpt", "prompt": "Paris is", "max_tokens": 3, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_stop_strings_n_and_echo(client):
    full = client.completions.create(model="my-gpt", prompt="The cat sat", max_tokens=12, temperature=0).choices[0]
    word = full.text.split()[1]
    cut = client.completions.create(model="my-gpt", prompt="The cat sat", max_tokens=12, temperature=0,
                                    stop=[word]).choices[0]
    assert cut.text == full.text[:full.text.index(word)] and cut.finish_reason == "stop"
    streamed = client.completions.create(model="my-gpt", prompt="The cat sat", max_tokens=12, temperature=0,
                                         stop=word, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.text
    several = client.completions.create(model="my-gpt", prompt=["The cat", "Paris is"], max_tokens=5, n=2,
                                        temperature=0.9, seed=3)
    assert [c.index for c in several.choices] == [0, 1, 2, 3]
    echoed = client.completions.create(model="my-gpt", prompt="The cat sat", max_tokens=12, temperature=0, echo=True)
    assert echoed.choices[0].text == "The cat sat" + full.text


def test_each_mistake_is_the_clients_typed_error_with_a_sentence(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="other", prompt="x", max_tokens=2)
    assert "my-gpt" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="my-gpt", prompt="The cat", max_tokens=500)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "max_tokens"
    assert "64" in e.value.body["message"] and "at most 62" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="my-gpt", prompt="the cat sat on the mat " * 20, max_tokens=2)
    assert e.value.body["code"] == "context_length_exceeded" and "tokens long" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="my-gpt", prompt="The cat", temperature=5)
    assert e.value.body["param"] == "temperature" and "at most 2" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="my-gpt", prompt="The cat", extra_body={"colour": "red"})
    assert e.value.body["param"] == "colour"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="my-gpt", messages=[{"role": "user", "content": "hi"}])
    assert "supervised fine-tuning" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="my-gpt", input="hi")
    assert "cannot answer embeddings" in e.value.body["message"]


def test_chat_for_an_sft_checkpoint_is_laid_out_in_its_template(folders, tmp_path):
    with serving(folders["sft"], tmp_path) as info:
        chat = openai.OpenAI(base_url=info["url"], api_key=KEY, max_retries=0)
        reply = chat.chat.completions.create(model="my-chat", messages=[{"role": "user", "content": "The cat"}],
                                             max_tokens=8, temperature=0)
        ours = generate.generate(folders["sft"], "The cat", chat=True, strategy="greedy", max_new_tokens=8)
        assert reply.choices[0].message.role == "assistant"
        assert reply.choices[0].message.content == ours["text"]
        assert reply.usage.prompt_tokens == ours["prompt_tokens"]
        pieces = chat.chat.completions.create(model="my-chat", messages=[{"role": "user", "content": "The cat"}],
                                              max_tokens=8, temperature=0, stream=True)
        chunks = list(pieces)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == ours["text"]


def test_base64_and_float_embeddings_of_an_encoder(folders, tmp_path):
    texts = ["The cat sat on the mat.", "Paris is the capital of France.", "It was cold."]
    with serving(folders["bert"], tmp_path) as info:
        client = openai.OpenAI(base_url=info["url"], api_key=KEY, max_retries=0)
        default = client.embeddings.create(model="my-bert", input=texts)  # the client asks for base64
        floats = client.embeddings.create(model="my-bert", input=texts, encoding_format="float")
        raw = httpx.post(info["url"] + "/embeddings", headers={"Authorization": f"Bearer {KEY}"},
                         json={"model": "my-bert", "input": texts[0], "encoding_format": "base64"}).json()
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model="my-bert", input="cat " * 200)
        assert e.value.body["code"] == "context_length_exceeded" and "64" in e.value.body["message"]
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="my-bert", prompt="x")
    expected, _ = sentence_vectors(load(folders["bert"]), texts, pooling="mean")
    got = np.array([d.embedding for d in default.data])
    assert got.shape == tuple(expected.shape)
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.array([d.embedding for d in floats.data]), got, atol=1e-6)
    assert isinstance(raw["data"][0]["embedding"], str)
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, got[0], atol=1e-5)
    assert default.usage.prompt_tokens == sum(len(load(folders["bert"]).tokenizer.tok.encode(t).ids) for t in texts)


def test_health_answers_during_a_long_generation_and_a_client_that_leaves_stops_it(folders, tmp_path):
    with serving(folders["slow"], tmp_path) as info:
        base = info["url"].removesuffix("/v1")
        headers = {"Authorization": f"Bearer {KEY}"}
        body = {"model": "slow-gpt", "prompt": "The cat", "max_tokens": 1000, "temperature": 0, "stream": True}
        with httpx.stream("POST", info["url"] + "/completions", headers=headers, json=body, timeout=60) as r:
            lines = r.iter_lines()  # kept: a line iterator dropped closes the response (the client leaves)
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["text"]
            during = httpx.get(base + "/health", timeout=10).json()  # the event loop is free meanwhile
            assert during["generating"] == 1
            assert httpx.get(info["url"] + "/models", headers=headers, timeout=10).status_code == 200
        deadline = time.monotonic() + 30
        while httpx.get(base + "/health").json()["generating"] and time.monotonic() < deadline:
            time.sleep(0.05)
        health = httpx.get(base + "/health").json()
        assert health["generating"] == 0 and health["cancelled"] == 1 and health["finished"] == 0


def test_concurrent_clients_are_answered_as_each_alone(folders, gpt_server, client):
    prompts = ["The cat", "Paris is the capital", "It was cold that morning, so", "The dog ran"]
    alone = [client.completions.create(model="my-gpt", prompt=p, max_tokens=8, temperature=0).choices[0].text
             for p in prompts]
    got: dict[int, str] = {}

    def ask(i: int) -> None:
        got[i] = client.completions.create(model="my-gpt", prompt=prompts[i], max_tokens=8,
                                           temperature=0).choices[0].text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [got[i] for i in range(len(prompts))] == alone


def test_the_command_refuses_what_it_cannot_serve_with_a_sentence(tmp_path, capsys):
    from trainer.cli import main

    assert main(["serve", str(tmp_path / "nothing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 2
    assert "neither a checkpoint" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
