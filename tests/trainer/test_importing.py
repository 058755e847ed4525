"""Hugging Face model archives -> native checkpoints: safe unpacking, clear refusals, same predictions."""
from __future__ import annotations

import importlib
import json
import zipfile
from pathlib import Path

import pytest

from trainer.inference import masked
from trainer.errors import InferenceError
from trainer.inference.importing import ModelImportError, extract_archive, import_hf_directory

helpers = importlib.import_module("tests.trainer.importing_helpers")


@pytest.fixture(scope="module")
def hf_mlm(tmp_path_factory) -> Path:
    return helpers.write_tiny_hf_bert(tmp_path_factory.mktemp("hf") / "tiny-bert")


@pytest.fixture(scope="module")
def imported(hf_mlm, tmp_path_factory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("imported")
    src = extract_archive(helpers.zip_folder(hf_mlm, base / "model.zip"), base / "unpacked")
    dest = base / "checkpoint"
    return dest, import_hf_directory(src, dest)


def test_an_imported_masked_lm_predicts_what_transformers_predicts(hf_mlm, imported):
    import torch
    import transformers

    folder, info = imported
    assert info["model_type"] == "bert" and info["objectives"] == ["mlm"] and info["family"] == "bert"
    assert {p.name for p in folder.iterdir()} >= {"model.safetensors", "model_config.json", "tokenizer.json",
                                                  "tokenizer_meta.json", "import_info.json"}
    text = "the cat [MASK] on the mat ."
    ours = masked.fill_mask(folder, text, top_k=3)
    from trainer.prep.tokenization import load_tokenizer

    ids = load_tokenizer(folder).tok.encode(text).ids
    assert ids == [2, 5, 6, 4, 8, 5, 9, 26, 3]  # [CLS] ... [SEP], with [MASK] read as the mask token
    reference = transformers.BertForMaskedLM.from_pretrained(hf_mlm).eval()
    with torch.no_grad():
        probs = reference(torch.tensor([ids])).logits[0, 3].softmax(-1)
    assert ours[0]["position"] == 3
    assert ours[0]["predictions"][0]["id"] == int(probs.argmax())
    assert ours[0]["predictions"][0]["prob"] == pytest.approx(float(probs.max()), abs=1e-5)


def test_a_masked_lm_without_nsp_weights_refuses_pair_questions(imported):
    folder, _ = imported
    for ask in (masked.next_sentence, masked.sentence_order):
        with pytest.raises(InferenceError, match="imported model has no trained"):
            ask(folder, "the cat sat .", "the dog ran .")


def test_a_tar_gz_with_a_tokenizer_json_imports_too(tmp_path):
    folder = helpers.write_tiny_hf_bert(tmp_path / "hf", kind="pretraining", vocab=False, tokenizer_json=True)
    (folder / "vocab.txt").unlink(missing_ok=True)
    src = extract_archive(helpers.tar_folder(folder, tmp_path / "m.tar.gz"), tmp_path / "x")
    info = import_hf_directory(src, tmp_path / "ckpt")
    assert info["objectives"] == ["mlm", "nsp"] and info["tokenizer"]["algorithm"] == "wordpiece"
    from trainer.prep.tokenization import load_tokenizer

    assert load_tokenizer(tmp_path / "ckpt").tok.encode("The cat [MASK]").ids == [2, 5, 6, 4, 3]
    scores = masked.sentence_order(tmp_path / "ckpt", "the cat sat .", "the dog ran .")
    assert scores["head"] == "nsp" and 0 <= scores["ab"] <= 1 and 0 <= scores["ba"] <= 1


CONFIG = json.dumps({"model_type": "bert"}).encode()


@pytest.mark.parametrize("entries, extra, message", [
    ({"../evil.txt": b"x", "config.json": CONFIG}, {}, "leads outside the archive's folder"),
    ({"/etc/evil.txt": b"x"}, {}, "absolute path"),
    ({"config.json": CONFIG}, {"symlink": "vocab.txt"}, "symbolic link"),
    ({"model/README.md": b"hello"}, {}, "has no config.json"),
    ({"a/config.json": CONFIG, "b/config.json": CONFIG}, {}, "several models"),
])
@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_unsafe_or_wrong_archives_are_refused(tmp_path, kind, entries, extra, message):
    make = helpers.zip_with if kind == "zip" else helpers.tar_with
    archive = make(tmp_path / f"a.{'zip' if kind == 'zip' else 'tar.gz'}", entries, **extra)
    with pytest.raises(ModelImportError, match=message):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.txt").exists()


def test_bombs_and_crowds_stop_at_the_bounds(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("config.json", CONFIG)
        zf.writestr("model.safetensors", b"\0" * 5_000_000)  # 5 MB of zeros compress to ~5 KB
    assert bomb.stat().st_size < 50_000
    with pytest.raises(ModelImportError, match="zip bomb"):
        extract_archive(bomb, tmp_path / "out", max_bytes=1_000_000)
    crowd = helpers.zip_with(tmp_path / "crowd.zip", {f"f{i}.txt": b"" for i in range(12)})
    with pytest.raises(ModelImportError, match="more than 10 files"):
        extract_archive(crowd, tmp_path / "out", max_files=10)


def test_a_file_that_is_not_an_archive_is_refused(tmp_path):
    path = tmp_path / "model.zip"
    path.write_text("just some text, not an archive")
    with pytest.raises(ModelImportError, match="not an archive"):
        extract_archive(path, tmp_path / "out")


@pytest.mark.parametrize("change, message", [
    (lambda d: (d / "config.json").write_text('{"model_type": "llama"}'), 'This is a "llama" model.*Supported model types: .*bert'),
    (lambda d: (d / "config.json").write_text('{"hidden_size": 8}'), "no model_type"),
    (lambda d: (d / "model.safetensors").unlink(), "no weights"),
    (lambda d: (d / "vocab.txt").unlink(), "no tokenizer"),
    (lambda d: (d / "model.safetensors").write_bytes(b"garbage"), "weights cannot be read"),
])
def test_folders_that_cannot_be_imported_say_why(hf_mlm, tmp_path, change, message):
    import shutil

    folder = Path(shutil.copytree(hf_mlm, tmp_path / "copy"))
    change(folder)
    with pytest.raises(ModelImportError, match=message):
        import_hf_directory(folder, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
