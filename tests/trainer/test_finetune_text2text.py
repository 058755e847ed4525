"""Text-to-text fine-tuning (trainer/finetune/text2text.py): T5 by teacher forcing with a task
prefix, UniLM under its seq2seq attention mask; both generate for evaluation and are scored by
ROUGE, BLEU and exact match."""
from __future__ import annotations

import json

import pytest
import torch

from tests.trainer.conftest import T5_RECIPE
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink

EXAMPLES = [{"input": "Return the path. It may be relative.", "target": "Return the path."},
            {"input": "Open a file for reading and writing; the mode says which.", "target": "Open a file."}]


@pytest.fixture(scope="module")
def bases(tmp_path_factory, sentinel_tokenizer_dir, tokenizer_dir, make_family_config):
    """bases(family) -> the checkpoint of a 30-step tiny T5 or UniLM pre-training run."""
    from trainer.training.engine import train

    cache = {}

    def get(family: str):
        if family not in cache:
            data = sentinel_tokenizer_dir if family == "t5" else tokenizer_dir
            changes = T5_RECIPE if family == "t5" else {}
            config = make_family_config(family, max_steps=30, checkpoint_every=30, eval_every=30, **changes)
            result = train(config, data_dir=data, out_dir=tmp_path_factory.mktemp(family), sink=ListSink())
            cache[family] = result.last_checkpoint
        return cache[family]

    return get


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    root = tmp_path_factory.mktemp("t2t")
    source = write_demo_dataset("text_to_text", root / DEMOS["text_to_text"].filename)
    preview = sniff(source, source.name)
    assert preview.task == "text_to_text"
    ingest(source, root / "data", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / "data"


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=40, batch_size=16, max_length=64, max_target_length=24, lr=3e-3, eval_every=40,
                    checkpoint_every=40, log_every=10, device="cpu", num_threads=1, samples_shown=2)
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


def _tokenizer(base):
    from trainer.prep.tokenization import load_tokenizer

    return load_tokenizer(base)


# ---------------------------------------------------------------------------- batches
def test_t5_batches_put_the_prefix_before_the_input_and_end_both_sides_with_eos(bases):
    from trainer.finetune.text2text import TEXT_TO_TEXT

    tok = _tokenizer(bases("t5"))
    config = FinetuneConfig(checkpoint="x", dataset="y", family="t5", source_prefix="summarize: ",
                            max_target_length=4)
    batch = TEXT_TO_TEXT.build_collator(tok, [], 12, config)(EXAMPLES)
    first = tok.tok.encode("summarize: " + EXAMPLES[0]["input"], add_special_tokens=False).ids
    assert batch.input_ids[0, : batch.attention_mask[0].sum()].tolist() == (first[:11] + [tok.sep_id])
    target = tok.tok.encode(EXAMPLES[1]["target"], add_special_tokens=False).ids
    assert batch.labels[1].tolist()[: 4] == target[:3] + [tok.sep_id]  # cut to max_target_length, then </s>
    assert batch.labels.shape[1] <= 4 and (batch.labels == -100).sum() == (batch.labels.shape[1] * 2 - 8)
    assert batch.targets == [ex["target"] for ex in EXAMPLES]


def test_unilm_batches_mask_only_target_tokens_and_see_the_target_left_to_right(bases):
    from models_lib.core import masks
    from trainer.finetune.text2text import TEXT_TO_TEXT

    tok = _tokenizer(bases("unilm"))
    config = FinetuneConfig(checkpoint="x", dataset="y", family="unilm", max_target_length=8, target_mask_prob=0.5)
    collate = TEXT_TO_TEXT.build_collator(tok, [], 32, config)
    batch = collate(EXAMPLES * 8)
    for i in range(batch.size):
        n = int(batch.source_lengths[i])
        real = int(batch.attention_mask[i].sum())
        ids, labels = batch.input_ids[i], batch.mlm_labels[i]
        assert ids[0] == tok.cls_id and ids[n - 1] == tok.sep_id
        assert (labels[:n] == -100).all() and (labels[n:real] != -100).any()  # only the target is predicted
        assert (ids[labels != -100] == tok.mask_id).all()                     # ... from a [MASK]
        assert batch.token_type_ids[i, :n].eq(0).all() and batch.token_type_ids[i, n:real].eq(1).all()
        assert batch.source_ids[i, :n].tolist() == ids[:n].tolist()
        last = labels[real - 1] if labels[real - 1] != -100 else ids[real - 1]
        assert last == tok.sep_id  # the target ends with [SEP] (masked or not)
    share = (batch.mlm_labels != -100).sum() / (batch.token_type_ids == 1).sum()
    assert 0.3 < float(share) < 0.7  # target_mask_prob 0.5
    visible = batch.model_inputs()["attention_mask"]
    assert torch.equal(visible, masks.seq2seq(batch.attention_mask, batch.source_lengths))
    n = int(batch.source_lengths[0])
    assert not visible[0, 0, n] and visible[0, n + 1, n] and not visible[0, n, n + 1]


def test_unilm_refuses_a_max_length_with_no_room_for_the_source(bases):
    from trainer.finetune.text2text import TEXT_TO_TEXT

    config = FinetuneConfig(checkpoint="x", dataset="y", family="unilm", max_target_length=60)
    with pytest.raises(ConfigError, match="max_length 64 leaves 2 source tokens beside a target of "
                                          "max_target_length 60"):
        TEXT_TO_TEXT.build_collator(_tokenizer(bases("unilm")), [], 64, config)


# ---------------------------------------------------------------------------- training
@pytest.mark.parametrize("family", ["t5", "unilm"])
def test_text_to_text_trains_generates_and_reports_rouge_bleu_and_exact_match(bases, dataset, tmp_path, family):
    from models_lib.checkpoint import load_model

    base = bases(family)
    result, sink = _tune(base, dataset, tmp_path / "run", source_prefix="summarize: ")
    assert result.status == "succeeded" and result.final_step == 40
    (_, valid), = sink.split("valid")
    (_, test), = sink.split("test")
    for values in (valid, test):
        assert {"rouge1", "rouge2", "rouge_l", "bleu", "exact_match", "loss"} <= set(values)
        assert 0.0 <= values["rouge_l"] <= 1.0 and 0.0 <= values["bleu"] <= 100.0
    samples = [line for line in sink.lines if line.startswith("Sample ")]
    assert len(samples) == 4 and "→ generated «" in samples[0]  # two per evaluation: validation and test
    (step, rows), = sink.sample_events  # the validation's samples, for the run's page (not the test split's)
    assert step == 40 and len(rows) == 2 and all(set(r) == {"input", "generated", "reference"} for r in rows)
    assert all(r["input"] and r["reference"] for r in rows)
    assert json.loads((tmp_path / "run" / "samples.json").read_text()) == {"validations": [{"step": 40,
                                                                                            "samples": rows}]}
    assert any(line.startswith("Test split: rouge_l") for line in sink.lines)
    assert json.loads((tmp_path / "run" / "test_metrics.json").read_text()) == pytest.approx(test)
    tuned = load_model(result.last_checkpoint)
    assert type(tuned) is type(load_model(base))  # a checkpoint of the same family: it generates in the explorer
    train_losses = [v["loss"] for _, v in sink.split("train")]
    # 40 steps (2026-12-02, stored tokenizers, two processes, identical): T5 7.023 -> 6.347, UniLM 6.654 ->
    # 6.028: margins of 0.68 and 0.63 in the fall
    assert train_losses[-1] < train_losses[0], train_losses


@pytest.fixture(scope="module")
def memorable(tmp_path_factory):
    """12 inputs whose targets are words of their own, each in all three splits: a tiny model
    can learn them by heart, so what it generates after training must match."""
    from trainer.prep.labelled import ingest

    root = tmp_path_factory.mktemp("memorable")
    words = ["path", "file", "socket", "thread", "queue", "email", "header", "token", "logger", "parser",
             "buffer", "signal"]
    lines = ["input,target,split"]
    for i, word in enumerate(words):
        for split in ("train", "validation", "test"):
            lines.append(f"the {word} object number {i} and its methods,{word} {words[(i + 1) % 12]},{split}")
    (root / "words.csv").write_text("\n".join(lines) + "\n")
    ingest(root / "words.csv", root / "data", original_filename="words.csv", task="text_to_text",
           mapping={"input": "input", "target": "target", "split": "split"}, split_spec={"strategy": "column"})
    return root / "data"


@pytest.mark.parametrize("family", ["t5", "unilm"])
def test_what_it_generates_after_training_matches_what_it_learnt(bases, memorable, tmp_path, family):
    """Before training the pre-trained model writes none of the targets; after 200 steps on them
    it writes them (exact match and ROUGE-L near 1 on the test split)."""
    _, before = _tune(bases(family), memorable, tmp_path / "before", max_steps=1, lr=1e-8, eval_every=1,
                      batch_size=12, max_length=32, max_target_length=8)
    _, after = _tune(bases(family), memorable, tmp_path / "after", max_steps=200, eval_every=200,
                     checkpoint_every=200, batch_size=12, max_length=32, max_target_length=8, lr=5e-3,
                     warmup_ratio=0.0)
    (_, start), = before.split("test")
    (_, end), = after.split("test")
    assert start["exact_match"] == 0.0, start
    # Calibrated on the stored tokenizers (2026-12-02, two processes, identical): exact match 1.0 and
    # ROUGE-L 1.0 for both families, margins of 0.25 and 0.15 above the bounds; 0.0 before training.
    assert end["exact_match"] >= 0.75 and end["rouge_l"] >= 0.85, end


def test_a_checkpoint_of_another_family_is_refused_with_a_sentence(trained_run, dataset, tmp_path):
    from trainer import finetune as tasks

    with pytest.raises(ConfigError, match="A BERT checkpoint cannot be fine-tuned for text to text: that task "
                                          "trains a T5 or UniLM model"):
        tasks.check_checkpoint(trained_run[0].last_checkpoint, "text_to_text")
    with pytest.raises(ConfigError, match="text to text trains a T5 model or a UniLM model"):
        _tune(trained_run[0].last_checkpoint, dataset, tmp_path / "x")


def test_the_cli_fine_tunes_t5_on_the_text_to_text_demo(bases, tmp_path):
    from trainer.cli import main

    config = tmp_path / "tune.yaml"
    config.write_text(f"checkpoint: {bases('t5')}\ndataset: {{demo: text_to_text}}\noutput_dir: out\n"
                      f"source_prefix: 'summarize: '\nmax_steps: 4\nmax_length: 32\nmax_target_length: 4\n"
                      f"eval_every: 4\ncheckpoint_every: 4\ndevice: cpu\nsamples_shown: 1\n")
    assert main(["finetune", str(config)]) == 0
    metrics = (tmp_path / "out" / "test_metrics.json").read_text()
    assert '"rouge_l"' in metrics and '"bleu"' in metrics
