"""fill_mask / next_sentence on a trained checkpoint, and the mistakes a user can make."""
from __future__ import annotations

import json
import shutil

import pytest

from trainer.inference import loading, masked
from trainer.errors import InferenceError


@pytest.fixture(scope="module")
def ckpt(trained_run):
    result, _, _ = trained_run
    return result.last_checkpoint


def test_fill_mask_gives_a_distribution_per_mask(ckpt):
    out = masked.fill_mask(ckpt, "the function returns a [MASK] of the [mask] object.", top_k=5)
    assert len(out) == 2 and out[0]["position"] < out[1]["position"]
    for item in out:
        preds = item["predictions"]
        assert len(preds) == 5 and all(set(p) == {"token", "id", "prob"} for p in preds)
        probs = [p["prob"] for p in preds]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1
    everything = masked.fill_mask(ckpt, "return the [MASK].", top_k=2000)  # the whole vocabulary
    assert abs(sum(p["prob"] for p in everything[0]["predictions"]) - 1) < 1e-4


def test_next_sentence_probabilities_sum_to_one(ckpt):
    out = masked.next_sentence(ckpt, "Return the value of the key.", "Raise an error if it is missing.")
    assert set(out) == {"is_next", "not_next"} and 0 <= out["is_next"] <= 1
    assert abs(out["is_next"] + out["not_next"] - 1) < 1e-6


def test_models_are_cached_per_folder_and_mtime(ckpt, monkeypatch):
    loading.clear_cache()
    calls = []
    real = loading._read
    monkeypatch.setattr(loading, "_read", lambda folder: calls.append(folder) or real(folder))
    masked.fill_mask(ckpt, "a [MASK].")
    masked.next_sentence(ckpt, "a b.", "c d.")
    assert len(calls) == 1


@pytest.mark.parametrize("text, top_k, message", [
    ("no mask here.", 5, "The text has no [MASK]"),
    ("   ", 5, "Type a text with [MASK]"),
    ("a [MASK].", 0, "top_k must be a whole number between 1 and 2000"),
    ("a [MASK].", 2001, "top_k must be a whole number between 1 and 2000"),
    ("word " * 600 + "[MASK]", 5, "tokens long (with the special tokens), but this model reads at most 512"),
])
def test_fill_mask_mistakes(ckpt, text, top_k, message):
    with pytest.raises(InferenceError) as e:
        masked.fill_mask(ckpt, text, top_k=top_k)
    assert message in str(e.value)


def test_next_sentence_mistakes(ckpt, tmp_path):
    with pytest.raises(InferenceError, match="second sentence"):
        masked.next_sentence(ckpt, "A sentence.", "")
    with pytest.raises(InferenceError, match="at most 512"):
        masked.next_sentence(ckpt, "word " * 300, "word " * 300)
    mlm_only = tmp_path / "step-00000001"
    shutil.copytree(ckpt, mlm_only)
    state = json.loads((mlm_only / "trainer_state.json").read_text())
    state["config"]["objectives"] = ["mlm"]
    (mlm_only / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(InferenceError, match="trained without next sentence prediction"):
        masked.next_sentence(mlm_only, "A.", "B.")


def test_missing_or_incomplete_checkpoints(ckpt, tmp_path):
    with pytest.raises(InferenceError, match="does not exist"):
        masked.fill_mask(tmp_path / "step-00000099", "a [MASK].")
    broken = tmp_path / "step-00000002"
    shutil.copytree(ckpt, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(InferenceError, match="incomplete: model.safetensors is missing"):
        masked.fill_mask(broken, "a [MASK].")


def test_list_checkpoints_sorted_and_ignores_unfinished(trained_run, tmp_path):
    run = shutil.copytree(trained_run[2], tmp_path / "run")  # the shared run folder stays as trained
    (run / "checkpoints" / "step-00000060.tmp").mkdir()
    found = loading.list_checkpoints(run)
    assert [s for s, _ in found] == [20, 40] and found[0][1].name == "step-00000020"
    assert loading.list_checkpoints(run / "checkpoints") == found
    assert loading.list_checkpoints(run / "nowhere") == []


def test_the_cache_is_bounded_in_bytes_and_evicts_the_least_recently_used(ckpt, tmp_path, monkeypatch):
    """CACHE_BYTES bounds what the explorer keeps between requests (issue 22, point 6): three copies
    of a tiny model under a budget of two and a half keep the two most recently used."""
    copies = [shutil.copytree(ckpt, tmp_path / f"copy{i}") for i in range(3)]
    loading.clear_cache()
    one = loading.load(copies[0]).nbytes
    assert one == sum(p.numel() * 4 for p in loading.load(copies[0]).model.parameters()) + sum(
        b.numel() * b.element_size() for b in loading.load(copies[0]).model.buffers())
    monkeypatch.setattr(loading, "CACHE_BYTES", int(2.5 * one))
    calls = []
    real = loading._read
    monkeypatch.setattr(loading, "_read", lambda folder: calls.append(folder.name) or real(folder))
    loading.load(copies[1])
    loading.load(copies[0])  # used again: now the most recent
    loading.load(copies[2])  # over the budget: copy1, the least recently used, goes
    assert loading.cached_bytes() == 2 * one <= loading.CACHE_BYTES
    loading.load(copies[0])
    loading.load(copies[2])
    assert calls == ["copy1", "copy2"]  # copy0 and copy2 came from the cache
    loading.load(copies[1])
    assert calls == ["copy1", "copy2", "copy1"]  # it had been evicted
    # a model larger than the whole budget is served, not kept
    monkeypatch.setattr(loading, "CACHE_BYTES", one - 1)
    loading.clear_cache()
    assert loading.load(copies[0]).nbytes == one and loading.cached_bytes() == 0
    loading.clear_cache()
