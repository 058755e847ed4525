"""Export to the Hugging Face format (trainer/export.py): a fine-tuned checkpoint of each task loads
in transformers as its task class, with id2label / label2id, its tokenizer gives our ids, and
its logits are ours within 1e-4; a pre-training checkpoint exports as BertForPreTraining."""
from __future__ import annotations

import json

import pytest
import torch

from tests.trainer.finetune_helpers import fine_tuner
from trainer.export import ExportError, export_checkpoint

TEXTS = ["Return the absolute path of a file.", "Raise ValueError when the os.path module cannot read it."]


@pytest.fixture(scope="module")
def tuned(trained_run, tmp_path_factory):
    return fine_tuner(trained_run[0].last_checkpoint, tmp_path_factory.mktemp("export"), steps=10)


@pytest.mark.parametrize("name, auto, architecture", [
    ("classification", "AutoModelForSequenceClassification", "BertForSequenceClassification"),
    ("multilabel", "AutoModelForSequenceClassification", "BertForSequenceClassification"),
    ("token_classification", "AutoModelForTokenClassification", "BertForTokenClassification"),
    ("extractive_qa", "AutoModelForQuestionAnswering", "BertForQuestionAnswering"),
])
def test_a_fine_tuned_checkpoint_loads_in_transformers_with_equal_logits(tuned, tmp_path, name, auto, architecture):
    import transformers

    from models_lib.checkpoint import load_model

    folder = tuned(name)
    result = export_checkpoint(folder, tmp_path / "hf", name="my model")
    assert result.architecture == architecture
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= set(
        result.files)
    ours = load_model(folder).eval()
    theirs = getattr(transformers, auto).from_pretrained(result.folder).eval()
    assert type(theirs).__name__ == architecture
    if ours.task_config.labels:
        assert theirs.config.id2label == dict(enumerate(ours.task_config.labels))
        assert theirs.config.label2id == {label: i for i, label in enumerate(ours.task_config.labels)}
    tokenizer = transformers.AutoTokenizer.from_pretrained(result.folder)
    from trainer.prep.tokenization import load_tokenizer

    mine = load_tokenizer(folder)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    for i, text in enumerate(TEXTS):
        ids = mine.tok.encode(text).ids
        assert batch["input_ids"][i][: len(ids)].tolist() == ids
    with torch.no_grad():
        mine_out = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        hf_out = theirs(**batch)
    if name == "extractive_qa":
        pairs = [(mine_out.start_logits, hf_out.start_logits), (mine_out.end_logits, hf_out.end_logits)]
    else:
        pairs = [(mine_out.logits, hf_out.logits)]
    for a, b in pairs:
        mask = batch["attention_mask"].bool() if a.dim() >= 2 and a.shape[:2] == batch["input_ids"].shape else None
        if mask is not None:
            a, b = a[mask], b[mask]
        assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())
    if name == "multilabel":
        assert theirs.config.problem_type == "multi_label_classification"
    assert architecture in (result.folder / "README.md").read_text()


def test_a_pre_training_checkpoint_exports_its_pre_training_class(trained_run, tmp_path):
    result = export_checkpoint(trained_run[0].last_checkpoint, tmp_path / "pre")
    assert result.architecture == "BertForPreTraining"
    assert json.loads((result.folder / "tokenizer_config.json").read_text())["mask_token"] == "[MASK]"


def test_what_cannot_be_exported_is_a_sentence(tmp_path):
    (tmp_path / "broken").mkdir()
    with pytest.raises(ExportError, match="cannot be loaded, so it cannot be exported"):
        export_checkpoint(tmp_path / "broken", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family, types", [("bert", True), ("roberta", False)])
def test_the_exported_tokenizer_gives_token_types_as_the_family_declares(tokenizer_dir, tmp_path, family, types):
    """Family.hf_token_types: BERT's exported tokenizer gives token_type_ids, RoBERTa's none (as
    transformers' own RoBERTa tokenizer does), though both models have a token-type table."""
    import shutil

    import transformers

    from models_lib.families import presets
    from models_lib.families.bert import BertForPreTraining
    from models_lib.families.roberta import RobertaForPreTraining
    from models_lib.checkpoint import save_model
    from trainer.prep.tokenization import load_tokenizer

    config = presets.get(f"{family}-tiny", vocab_size=load_tokenizer(tokenizer_dir).vocab_size, hidden_size=32,
                         num_heads=2, intermediate_size=64, num_layers=1)
    assert config.type_vocab_size > 0
    folder = tmp_path / "ckpt"
    save_model((BertForPreTraining if family == "bert" else RobertaForPreTraining)(config), folder)
    for name in ("tokenizer.json", "tokenizer_meta.json"):
        shutil.copyfile(tokenizer_dir / name, folder / name)
    result = export_checkpoint(folder, tmp_path / "hf")
    assert ("token_type_ids" in transformers.AutoTokenizer.from_pretrained(result.folder)(TEXTS[0])) is types


def test_the_exported_tokenizer_names_the_end_token_and_t5s_sentinels(tmp_path):
    """config.json's eos_token_id is the tokenizer's eos in transformers, and a T5 export keeps its
    sentinels <extra_id_N> as special tokens (issue 45, point 10)."""
    import transformers

    from tests.trainer.inference_generate_helpers import EXTRA_IDS, make_checkpoint, make_tokenizer

    tok = make_tokenizer(tmp_path / "tok")
    for family in ("t5", "gpt"):
        result = export_checkpoint(make_checkpoint(family, tmp_path / family, tok), tmp_path / f"{family}-hf")
        config = json.loads((result.folder / "config.json").read_text())
        theirs = transformers.AutoTokenizer.from_pretrained(result.folder)
        assert theirs.eos_token_id == config["eos_token_id"] is not None
        sentinels = [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
        assert set(sentinels) <= set(theirs.all_special_tokens)
        ids = theirs("a <extra_id_1> b", add_special_tokens=False)["input_ids"]
        assert theirs.convert_tokens_to_ids("<extra_id_1>") in ids
        decoded = theirs.decode(ids, skip_special_tokens=True)
        assert "<extra_id_1>" not in decoded
