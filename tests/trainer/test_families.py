"""Every encoder family trains from scratch on the demo corpus and its loss falls; its checkpoint
loads and answers fill-mask; ELECTRA resumes exactly; UniLM generates; ALBERT judges order."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.checkpoint import load_model
from trainer.inference import generate as generation, masked
from trainer import families
from trainer.training.checkpoints import list_checkpoints, read_optimizer_state
from trainer.training.engine import train
from trainer.errors import InferenceError
from trainer.training.sinks import ListSink

COMMON_TRAIN = {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "fill", "memory_mb", "progress", "eta_s"}
FAMILY_METRICS = {
    "roberta": {"mlm_loss", "mlm_acc"},
    "albert": {"mlm_loss", "mlm_acc", "sop_loss", "sop_acc"},
    "spanbert": {"mlm_loss", "mlm_acc", "sbo_loss", "sbo_acc"},
    "electra": {"mlm_loss", "mlm_acc", "rtd_loss", "rtd_acc", "rtd_precision", "rtd_recall"},
    "unilm": {"mlm_loss", "mlm_acc"},
}
FAMILIES = list(FAMILY_METRICS)


@pytest.fixture(scope="module")
def data_dirs(tokenizer_dir, bpe_tokenizer_dir, unigram_tokenizer_dir):
    return {"wordpiece": tokenizer_dir, "bpe": bpe_tokenizer_dir, "unigram": unigram_tokenizer_dir}


def _overrides(arch: str) -> dict:
    if arch == "albert":  # factorised: E = 32 under H = 64
        return {"hidden_size": 64, "num_heads": 2, "embedding_size": 32}
    return {"hidden_size": 64, "num_heads": 2}


@pytest.fixture(scope="module")
def family_run(tmp_path_factory, data_dirs, make_family_config):
    """family_run(arch) -> (result, sink, config): 50 steps of the family, trained once per module."""
    cache = {}

    def get(arch: str):
        if arch not in cache:
            config = make_family_config(arch, model_overrides=_overrides(arch))
            algorithm = families.get(arch).tokenizer_algorithms[0]
            sink = ListSink()
            result = train(config, data_dir=data_dirs[algorithm], out_dir=tmp_path_factory.mktemp(arch), sink=sink)
            cache[arch] = (result, sink, config)
        return cache[arch]

    return get


@pytest.mark.parametrize("arch", FAMILIES)
def test_each_family_trains_from_scratch_and_its_loss_falls(family_run, arch):
    result, sink, config = family_run(arch)
    assert result.status == "succeeded" and result.final_step == 50
    events = sink.split("train")
    assert all(set(v) == COMMON_TRAIN | FAMILY_METRICS[arch] for _, v in events), events[0][1]
    first, last = events[0][1], events[-1][1]
    # 50 steps at lr 3e-3 take every family from a uniform guess (ln 2000 = 7.6) to the corpus's
    # token statistics and on. Calibrated on the stored tokenizers (2026-12-02, one process): loss
    # ratios 0.811 (ALBERT) to 0.838 (RoBERTa), ELECTRA 0.626 (its RTD loss falls fastest); the bound
    # 0.9 leaves a margin of at least 0.06. MLM loss fell by 1.24 (RoBERTa) to 1.56 (ALBERT): the
    # bound 1.0 leaves at least 0.23. Both still fail a model that does not learn (ratio about 1).
    assert last["loss"] < 0.9 * first["loss"], (first, last)
    assert last["mlm_loss"] < first["mlm_loss"] - 1.0, (first, last)
    valid = sink.split("valid")
    assert [s for s, _ in valid] == [25, 50]
    assert all(set(v) == {"loss", "perplexity"} | FAMILY_METRICS[arch] for _, v in valid)
    # validation loss, step 25 -> 50 (2026-12-02, two processes, identical): RoBERTa 6.354 -> 6.231,
    # ALBERT 6.773 -> 6.340, SpanBERT 12.279 -> 12.073, ELECTRA 26.687 -> 26.559 (MLM + 50 x RTD),
    # UniLM 5.936 -> 5.856: the smallest fall, UniLM's 0.080, is the margin.
    assert valid[-1][1]["loss"] < valid[0][1]["loss"], valid
    assert all(0.0 <= v[k] <= 1.0 for _, v in events + valid for k in v if k.endswith(("_acc", "_precision", "_recall")))
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state["family"] == arch and state["config"] == config.to_dict()
    model = load_model(result.last_checkpoint)
    assert model.config.family == arch and model.config.hidden_size == 64


def test_family_specifics_are_what_the_papers_say(family_run):
    roberta = load_model(family_run("roberta")[0].last_checkpoint)
    assert roberta.config.type_vocab_size == 1 and roberta.config.positions_from_padding
    assert roberta.config.position_offset == roberta.config.pad_token_id + 1
    albert_result, _, albert_config = family_run("albert")
    albert = load_model(albert_result.last_checkpoint)
    assert albert_config.masking_unit == "ngram" and albert.config.share_layers == "all"
    assert len(albert.albert.encoder.layers) == 1 and albert.config.embedding_size == 32
    assert family_run("spanbert")[2].masking_unit == "span"
    _, sink, config = family_run("electra")
    for _, v in sink.split("valid"):  # validation loss = generator MLM + 50 x discriminator RTD
        assert v["loss"] == pytest.approx(v["mlm_loss"] + config.rtd_weight * v["rtd_loss"], rel=1e-6)
    electra = load_model(family_run("electra")[0].last_checkpoint)
    assert electra.generator.config.hidden_size == 16  # generator_size 1/4 of 64
    names = set(electra.state_dict())
    assert any(k.startswith("generator.") for k in names) and any(k.startswith("discriminator.") for k in names)


def test_electra_samples_from_a_checkpointed_generator(family_run):
    result, _, _ = family_run("electra")
    state = read_optimizer_state(result.last_checkpoint)
    assert state["family_state"]["sampler"].dtype == torch.uint8


@pytest.mark.parametrize("arch", FAMILIES)
def test_each_family_checkpoint_answers_fill_mask(family_run, arch):
    result, _, _ = family_run(arch)
    texts = ["return the [MASK] of the list.", "Return the [mask] of the list."]
    if arch == "roberta":
        texts.append("return the <mask> of the list.")  # the BPE tokenizer's own spelling
    answers = []
    for text in texts:
        out = masked.fill_mask(result.last_checkpoint, text, top_k=5)
        assert len(out) == 1 and out[0]["position"] == 3  # [CLS]/<s> return the [MASK]
        probs = [p["prob"] for p in out[0]["predictions"]]
        assert len(probs) == 5 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-5
        answers.append(out[0]["predictions"])
        assert ("note" in out[0]) == (arch == "electra")
    assert all(a == answers[0] for a in answers)  # every spelling of the mask is the same question
    if arch == "electra":
        assert "generator" in out[0]["note"]


def test_fill_mask_without_a_mask_names_both_spellings_for_roberta(family_run):
    with pytest.raises(InferenceError, match=r"The text has no \[MASK\]; write \[MASK\] \(or <mask>\)"):
        masked.fill_mask(family_run("roberta")[0].last_checkpoint, "no mask here.")


def test_albert_judges_sentence_order_but_has_no_next_sentence_head(family_run):
    ckpt = family_run("albert")[0].last_checkpoint
    out = masked.sentence_order(ckpt, "Return the value of the key.", "Raise an error if it is missing.")
    assert out["head"] == "sop" and 0 <= out["ab"] <= 1 and 0 <= out["ba"] <= 1
    with pytest.raises(InferenceError, match="without next sentence prediction"):
        masked.next_sentence(ckpt, "Return the value.", "Raise an error.")


def test_unilm_generates_a_target_and_other_families_cannot(family_run):
    ckpt = family_run("unilm")[0].last_checkpoint
    out = generation.generate_seq2seq(ckpt, "return the value of the key.", max_new_tokens=6)
    assert set(out) == {"text", "tokens", "ids", "stopped"}
    assert 0 < len(out["ids"]) <= 6 and len(out["tokens"]) == len(out["ids"])
    assert out["stopped"] in ("end", "length") and (out["stopped"] == "end" or len(out["ids"]) == 6)
    assert out == generation.generate_seq2seq(ckpt, "return the value of the key.", max_new_tokens=6)  # greedy
    with pytest.raises(InferenceError, match="Only UniLM checkpoints generate text"):
        generation.generate_seq2seq(family_run("roberta")[0].last_checkpoint, "return the value.", 4)
    with pytest.raises(InferenceError, match="Type a source text"):
        generation.generate_seq2seq(ckpt, "  ", 4)


def test_electra_resume_equals_an_uninterrupted_run(data_dirs, tmp_path, make_family_config):
    config = make_family_config("electra", max_steps=10, log_every=1, eval_every=5, checkpoint_every=100,
                                warmup_steps=2)
    whole = ListSink()
    train(config, data_dir=data_dirs["wordpiece"], out_dir=tmp_path / "whole", sink=whole)
    first = ListSink()
    stopped = train(config, data_dir=data_dirs["wordpiece"], out_dir=tmp_path / "split", sink=first,
                    should_stop=lambda: len(first.heartbeats) >= 4)
    assert stopped.status == "cancelled" and stopped.final_step == 4
    second = ListSink()
    resumed = train(config, data_dir=data_dirs["wordpiece"], out_dir=tmp_path / "split", sink=second, resume=True)
    assert resumed.final_step == 10
    reference = dict(whole.split("train"))
    for step, values in first.split("train") + second.split("train"):
        for key in ("loss", "mlm_loss", "rtd_loss", "rtd_precision", "rtd_recall"):
            assert values[key] == pytest.approx(reference[step][key], abs=1e-5), (step, key)
    assert whole.split("valid")[-1][1]["loss"] == pytest.approx(second.split("valid")[-1][1]["loss"], abs=1e-5)
    a = load_model(tmp_path / "whole/checkpoints/step-00000010").state_dict()
    b = load_model(tmp_path / "split/checkpoints/step-00000010").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert [s for s, _ in list_checkpoints(tmp_path / "split")] == [4, 10]
