"""The explorer's questions to fine-tuned checkpoints and encoders (trainer/inference/downstream.py):
classify, tag, answer and sentence embeddings, each agreeing with the path that scored the run
(the task's collator and the model's own forward), and refusing the wrong checkpoint with a sentence."""
from __future__ import annotations

import pytest
import torch

from tests.trainer.finetune_helpers import fine_tuned, ingested_demo
from trainer.errors import InferenceError
from trainer.inference import downstream


@pytest.fixture(scope="module")
def tuned(trained_run, tmp_path_factory):
    """name -> (checkpoint folder, dataset folder), fine-tuned 20 steps from the tiny pre-trained BERT."""
    root, out = tmp_path_factory.mktemp("tuned"), {}

    def make(name):
        if name not in out:
            dataset = ingested_demo(name, root)
            out[name] = (fine_tuned(trained_run[0].last_checkpoint, dataset, root / f"run-{name}", steps=20,
                                    batch_size=16), dataset)
        return out[name]
    return make


def _first(dataset, split="test"):
    from trainer.prep.labelled import iter_examples

    return next(iter(iter_examples(dataset, split)))


def test_classify_gives_the_probabilities_of_the_model_the_run_scored(tuned):
    from models_lib.checkpoint import load_model

    from trainer.finetune.tasks import CLASSIFICATION
    from trainer.prep.labelled import read_meta
    from trainer.prep.tokenization import load_tokenizer

    folder, dataset = tuned("classification")
    example = _first(dataset)
    out = downstream.classify(folder, example["text"])
    labels = read_meta(dataset)["labels"]
    assert sorted(x["label"] for x in out["labels"]) == sorted(labels)
    probs = [x["probability"] for x in out["labels"]]
    assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0, abs=1e-5)
    model = load_model(folder).eval()
    batch = CLASSIFICATION.build_collator(load_tokenizer(folder), labels, 64)([example])
    with torch.no_grad():
        expected = torch.softmax(model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits[0], -1)
    assert {x["label"]: x["probability"] for x in out["labels"]} == pytest.approx(
        dict(zip(labels, expected.tolist())), abs=1e-5)
    assert out["predicted"] == [labels[int(expected.argmax())]] and out["max_length"] == 64


def test_regression_and_multilabel(tuned):
    folder, dataset = tuned("regression")
    out = downstream.classify(folder, _first(dataset)["text"])
    assert out["problem_type"] == "regression" and isinstance(out["value"], float) and out["labels"] == []
    folder, dataset = tuned("multilabel")
    out = downstream.classify(folder, _first(dataset)["text"])
    assert out["threshold"] == 0.5 and len(out["labels"]) >= 2
    assert out["predicted"] == [x["label"] for x in out["labels"] if x["probability"] > 0.5]


def test_tag_gives_each_word_the_tag_of_its_first_sub_token(tuned):
    from models_lib.checkpoint import load_model

    from trainer.finetune.tasks import TOKEN_CLASSIFICATION
    from trainer.prep.labelled import read_meta
    from trainer.prep.tokenization import load_tokenizer

    folder, dataset = tuned("token_classification")
    text = "Use os.path.join and catch ValueError from the json module."
    out = downstream.tag(folder, text)
    words = [w["text"] for w in out["words"]]
    assert words == ["Use", "os", ".", "path", ".", "join", "and", "catch", "ValueError", "from", "the", "json",
                     "module", "."]
    assert all(text[w["start"]:w["end"]] == w["text"] for w in out["words"])
    labels = read_meta(dataset)["labels"]
    batch = TOKEN_CLASSIFICATION.build_collator(load_tokenizer(folder), labels, 64)(
        [{"tokens": words, "tags": ["O"] * len(words)}])
    model = load_model(folder).eval()
    with torch.no_grad():
        logits = model(batch.input_ids, batch.attention_mask, batch.token_type_ids).logits[0]
    expected = [labels[i] for i in logits.argmax(-1)[batch.labels[0] != -100].tolist()]
    assert [w["tag"] for w in out["words"]] == expected and out["truncated"] is False


def test_entities_are_read_from_bio_as_seqeval_reads_them():
    from seqeval.metrics.sequence_labeling import get_entities

    tags = ["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "B-LOC", "I-PER", "O"]
    text = " ".join(f"w{i}" for i in range(len(tags)))
    words = [{"text": f"w{i}", "start": 3 * i, "end": 3 * i + 2, "tag": t, "probability": 0.5 + i / 100}
             for i, t in enumerate(tags)]
    entities = downstream.entities_of(words, text)
    assert [(e["type"], e["start"] // 3, (e["end"] - 2) // 3) for e in entities] == get_entities(tags)
    assert entities[0]["text"] == "w0 w1" and entities[0]["score"] == pytest.approx(0.505)


def test_answer_is_the_span_the_run_predicts_with_its_n_best(tuned):
    from trainer.finetune.qa import has_unanswerable

    folder, dataset = tuned("extractive_qa")
    assert has_unanswerable(dataset)
    example = next(ex for ex in __import__("trainer.prep.labelled", fromlist=["x"]).iter_examples(dataset, "test")
                   if ex["answers"])
    out = downstream.answer(folder, example["question"], example["context"], n_best=4)
    assert 1 <= len(out["n_best"]) <= 4
    scores = [c["score"] for c in out["n_best"]]
    assert scores == sorted(scores, reverse=True)
    for c in out["n_best"]:
        assert example["context"][c["start"]:c["end"]] == c["text"]
    a = out["answer"]
    if a["text"]:
        assert example["context"][a["start"]:a["end"]] == a["text"] and a["text"] == out["n_best"][0]["text"]
        assert a["score"] == pytest.approx(out["n_best"][0]["score"], abs=1e-4)
        assert out["null_score"] - a["score"] <= out["threshold"]
    else:
        assert out["null_score"] - out["n_best"][0]["score"] > out["threshold"]
    with pytest.raises(InferenceError, match="n_best must be between 1 and 20"):
        downstream.answer(folder, "q", "c", n_best=0)


def test_sentence_embeddings_of_any_encoder(trained_run, tuned):
    from models_lib.checkpoint import load_model
    from trainer.prep.tokenization import load_tokenizer

    base = trained_run[0].last_checkpoint
    sentences = ["Return the sum of the numbers.", "Return the sum of the numbers.", "Open a socket."]
    out = downstream.embed(base, sentences)
    sim = out["similarity"]
    assert sim[0][1] == pytest.approx(1.0, abs=1e-5) and sim[1][2] == pytest.approx(sim[2][1], abs=1e-6)
    assert all(sim[i][i] == pytest.approx(1.0, abs=1e-5) for i in range(3))
    # mean pooling: the average of the model's final hidden states over the tokens
    model, tok = load_model(base).eval(), load_tokenizer(base)
    vectors = []
    with torch.no_grad():
        for s in sentences:
            ids = torch.tensor([tok.tok.encode(s).ids])
            vectors.append(model.encode(ids)[0].mean(0))
    cos = torch.nn.functional.cosine_similarity(vectors[0], vectors[2], dim=0)
    assert sim[0][2] == pytest.approx(float(cos), abs=1e-5)
    cls = downstream.embed(base, sentences, pooling="cls")["similarity"]
    assert cls[0][2] != pytest.approx(sim[0][2], abs=1e-6)
    # a fine-tuned checkpoint's encoder too
    folder, _ = tuned("classification")
    assert downstream.embed(folder, sentences[1:])["dimensions"] == out["dimensions"]


def test_the_wrong_checkpoint_or_input_is_a_sentence(trained_run, tuned):
    base = trained_run[0].last_checkpoint
    with pytest.raises(InferenceError, match="needs a checkpoint fine-tuned as a sequence classifier; this one is "
                                             "a pre-trained model without a task head"):
        downstream.classify(base, "text")
    folder, _ = tuned("classification")
    with pytest.raises(InferenceError, match="Tagging needs a checkpoint fine-tuned as a token classifier; this one "
                                             "is a sequence classifier"):
        downstream.tag(folder, "text")
    with pytest.raises(InferenceError, match="Give from 2 to 8 sentences"):
        downstream.embed(base, ["only one", "  "])
    with pytest.raises(InferenceError, match="pooling must be one of mean, cls"):
        downstream.embed(base, ["a", "b"], pooling="max")
    with pytest.raises(InferenceError, match="Type a text to classify"):
        downstream.classify(folder, "   ")
