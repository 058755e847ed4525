"""sentence_order: a pair scored in both orders, with the head the model has."""
from __future__ import annotations

import json
import shutil

import pytest

from trainer.inference import masked
from trainer.errors import InferenceError


@pytest.fixture(scope="module")
def ckpt(trained_run):
    return trained_run[0].last_checkpoint


def test_an_nsp_model_scores_both_orders_with_is_next(ckpt):
    out = masked.sentence_order(ckpt, "Return the value of the key.", "Raise an error if it is missing.")
    assert out["head"] == "nsp" and not out["judges_order"] and set(out) == {"ab", "ba", "head", "judges_order"}
    assert 0 <= out["ab"] <= 1 and 0 <= out["ba"] <= 1 and out["ab"] != out["ba"]
    single = masked.next_sentence(ckpt, "Return the value of the key.", "Raise an error if it is missing.")
    assert out["ab"] == pytest.approx(single["is_next"], abs=1e-5)  # padding the pair batch changes nothing
    swapped = masked.next_sentence(ckpt, "Raise an error if it is missing.", "Return the value of the key.")
    assert out["ba"] == pytest.approx(swapped["is_next"], abs=1e-5)


def test_a_model_without_a_pair_objective_is_refused(ckpt, tmp_path):
    mlm_only = tmp_path / "step-00000003"
    shutil.copytree(ckpt, mlm_only)
    state = json.loads((mlm_only / "trainer_state.json").read_text())
    state["config"]["objectives"] = ["mlm"]
    (mlm_only / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(InferenceError, match="without a sentence-pair objective"):
        masked.sentence_order(mlm_only, "A.", "B.")
    with pytest.raises(InferenceError, match="second sentence"):
        masked.sentence_order(ckpt, "A.", " ")
