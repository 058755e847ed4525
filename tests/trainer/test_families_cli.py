"""`python -m trainer run` for the encoder families: the tokenizer algorithm follows the
family, and a DistilBERT teacher folder is read relative to the YAML file."""
from __future__ import annotations

import json

import pytest

from trainer.cli import load_run_file, main
from trainer.errors import ConfigError

ROBERTA = """\
corpus: corpus.txt
output_dir: out
tokenizer: {vocab_size: 1000}
family: roberta
preset: roberta-tiny
model_overrides: {hidden_size: 64, num_heads: 2}
objectives: [mlm]
packing: doc-sentences
max_steps: 3
batch_size: 8
seq_len: 32
lr: 1e-3
warmup_steps: 1
eval_every: 3
eval_batches: 1
checkpoint_every: 3
device: cpu
num_threads: 1
"""


@pytest.fixture
def workdir(tmp_path, small_corpus_file):
    text = small_corpus_file.read_text(encoding="utf-8")
    (tmp_path / "corpus.txt").write_text(text[: text.rfind("\n\n", 0, 60_000)] + "\n", encoding="utf-8")
    return tmp_path


def test_a_roberta_yaml_trains_a_byte_level_bpe_tokenizer_by_default(workdir, capsys):
    (workdir / "run.yaml").write_text(ROBERTA)
    assert load_run_file(workdir / "run.yaml").tokenizer["algorithm"] == "bpe"
    assert main(["run", str(workdir / "run.yaml")]) == 0, capsys.readouterr().err
    meta = json.loads((workdir / "out/tokenizer/tokenizer_meta.json").read_text())
    assert meta["algorithm"] == "bpe"
    state = json.loads((workdir / "out/checkpoints/step-00000003/trainer_state.json").read_text())
    assert state["config"]["family"] == "roberta" and state["config"]["packing"] == "doc-sentences"


def test_a_roberta_yaml_with_a_wordpiece_tokenizer_is_one_line_of_error(workdir, capsys):
    (workdir / "run.yaml").write_text(ROBERTA.replace("{vocab_size: 1000}", "{algorithm: wordpiece}"))
    assert main(["run", str(workdir / "run.yaml")]) == 2
    assert "RoBERTa needs a bpe tokenizer; this one is wordpiece." in capsys.readouterr().err


def test_a_distilbert_teacher_is_read_relative_to_the_yaml(workdir, trained_run):
    _, _, run_folder = trained_run  # bert-tiny at hidden 64: 2 layers -> a 1-layer student
    (workdir / "teacher").symlink_to(run_folder / "checkpoints/step-00000040")
    text = ROBERTA.replace("family: roberta", "family: distilbert").replace(
        "preset: roberta-tiny", "preset: distilbert-tiny").replace("objectives: [mlm]", "objectives: [mlm, distill]")
    text = text.replace("packing: doc-sentences", "teacher_checkpoint: teacher")
    (workdir / "run.yaml").write_text(text.replace("model_overrides: {hidden_size: 64, num_heads: 2}\n", ""))
    with pytest.raises(ConfigError, match=r"hidden_size 128 \(needs 64\)"):
        load_run_file(workdir / "run.yaml")  # the student must be as wide as the teacher
    (workdir / "run.yaml").write_text(text)
    run = load_run_file(workdir / "run.yaml")
    assert run.config.teacher_checkpoint == str((workdir / "teacher").resolve())
    assert run.tokenizer["algorithm"] == "wordpiece"
