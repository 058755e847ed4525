"""Reading a checkpoint folder without loading its model: model_config.json and the tokenizer check.

The web app asks these (trainer.training.checkpoints) instead of parsing the files itself; the engine's
resume and the DistilBERT teacher use the same tokenizer comparison.
"""
from __future__ import annotations

import json
import shutil

import pytest

from trainer.prep.tokenization import tokenizer_sha256, tokenizers_differ
from trainer.training.checkpoints import checkpoint_family, read_model_meta
from trainer.training.engine import train
from trainer.errors import ConfigError, UserError
from trainer.training.sinks import ListSink


def checkpoint_folder(tmp_path, meta: bytes | None = b'{"family": "t5", "config": {"d_model": 64}}'):
    folder = tmp_path / "step-00000010"
    folder.mkdir()
    if meta is not None:
        (folder / "model_config.json").write_bytes(meta)
    return folder


def test_read_model_meta_returns_the_family_and_config(tmp_path):
    folder = checkpoint_folder(tmp_path)
    assert read_model_meta(folder) == {"family": "t5", "config": {"d_model": 64}}
    assert checkpoint_family(folder) == "t5"


@pytest.mark.parametrize("meta, message", [
    (None, "The checkpoint step-00000010 is incomplete: model_config.json is missing."),
    (b'{"family": "bert", "config": ', "has a broken model_config.json (not valid JSON: Expecting value at line 1)"),
    (b"\xff\xfe{}", "has a broken model_config.json (not UTF-8 text)"),
    (b'["bert"]', "does not name a model family and its config"),
    (b'{"family": "bert", "config": 3}', "does not name a model family and its config"),
    (b'{"config": {}}', "does not name a model family and its config"),
])
def test_a_missing_or_broken_model_config_is_a_sentence(tmp_path, meta, message):
    folder = checkpoint_folder(tmp_path, meta)
    with pytest.raises(UserError) as caught:
        read_model_meta(folder)
    assert message in str(caught.value)
    assert checkpoint_family(folder) is None


def test_a_folder_that_is_gone_says_so(tmp_path):
    with pytest.raises(UserError, match="^This checkpoint's files are no longer on disk.$"):
        read_model_meta(tmp_path / "deleted")
    assert checkpoint_family(tmp_path / "deleted") is None


def test_tokenizers_differ_compares_the_bytes_of_both_tokenizer_files(tmp_path):
    a, b, bare = tmp_path / "a", tmp_path / "b", tmp_path / "bare"
    for folder in (a, b, bare):
        folder.mkdir()
    (a / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"x": 0}}}))
    shutil.copy(a / "tokenizer.json", b / "tokenizer.json")
    assert not tokenizers_differ(a, b)
    (b / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"y": 0}}}))
    assert tokenizers_differ(a, b) and tokenizers_differ(b, a)
    assert not tokenizers_differ(a, bare) and not tokenizers_differ(bare, a)  # nothing to compare


def test_resume_with_another_tokenizer_is_refused(trained_run, tokenizer_dir, make_config, tmp_path):
    _, _, out = trained_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    tok = run / "checkpoints" / "step-00000040" / "tokenizer.json"  # the newest: what a resume reads
    tok.write_text(tok.read_text() + " ")
    with pytest.raises(ConfigError, match="was trained with another tokenizer than the one in"):
        train(make_config(), data_dir=tokenizer_dir, out_dir=run, sink=ListSink(), resume=True)


def test_a_run_records_its_tokenizer_by_content_in_its_log_and_every_checkpoint(trained_run, tokenizer_dir):
    """A tokenizer trained again on the same corpus may have another vocabulary, so a run names the
    one it read by the sha256 of its tokenizer.json, not by corpus and settings (issue 30, point 7)."""
    _, sink, out = trained_run
    digest = tokenizer_sha256(tokenizer_dir)
    assert digest and len(digest) == 64
    assert any(f"sha256 {digest}" in line for line in sink.lines)
    for step in (20, 40):
        state = json.loads((out / "checkpoints" / f"step-{step:08d}" / "trainer_state.json").read_text())
        assert state["tokenizer_sha256"] == digest == tokenizer_sha256(out / "checkpoints" / f"step-{step:08d}")


def test_a_fine_tuning_run_records_its_base_checkpoints_tokenizer(trained_run, tmp_path):
    from trainer.finetune.engine import finetune
    from trainer.finetune.config import FinetuneConfig
    from trainer.prep.labelled import write_demo_dataset, ingest, sniff

    base = trained_run[0].last_checkpoint
    source = write_demo_dataset("classification", tmp_path / "demo.csv")
    preview = sniff(source, source.name)
    ingest(source, tmp_path / "data", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(tmp_path / "data"), max_steps=2, batch_size=8,
                                     max_length=32, eval_every=2, checkpoint_every=2, device="cpu"),
                      out_dir=tmp_path / "tuned", sink=sink)
    digest = tokenizer_sha256(base)
    assert any(f"sha256 {digest}" in line for line in sink.lines)
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state["tokenizer_sha256"] == digest
