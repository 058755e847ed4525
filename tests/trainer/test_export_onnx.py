"""ONNX export (trainer/export_onnx.py): each family's files load in onnxruntime and give our model's
logits within 1e-4 at a batch size and length other than the export's dummy input (dynamic axes):
a BERT pre-training checkpoint (MLM logits), RoBERTa through the CLI, fine-tuned sequence
classification, token classification and extractive QA, GPT with past key values (a first step,
then a step with the past it returned), T5's encoder, decoder and decoder with past. ELMo is
refused with a sentence, and an export whose files disagree with the model is refused and leaves
nothing behind. Every export is a few seconds (torch.export), so each runs once per module."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tests.trainer.finetune_helpers import fine_tuned, ingested_demo
from tests.trainer.inference_generate_helpers import make_checkpoint, make_tokenizer
from trainer import export_onnx
from trainer.export import ExportError
from trainer.export_onnx import export_onnx as export

TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "README.md"}


def session(path):
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run(sess, **feeds):
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {k: v.numpy() if isinstance(v, torch.Tensor) else v
                                            for k, v in feeds.items()})))


def ids_of(model, batch, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, model.config.vocab_size, (batch, length), generator=g)


def padded(batch, length, short):
    """A (batch, length) 1/0 mask whose last row has only `short` real tokens (right padding)."""
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, short:] = 0
    return mask


def assert_close(ours, theirs, keep=None):
    a, b = ours.detach().numpy(), np.asarray(theirs)
    assert a.shape == b.shape
    if keep is not None:
        a, b = a[keep], b[keep]
    assert np.abs(a - b).max() <= 1e-4, float(np.abs(a - b).max())


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("onnx-tokenizer") / "tok")


@pytest.fixture(scope="module")
def bert(tok, tmp_path_factory):
    """A tiny random BERT pre-training checkpoint (hidden 32, 2 layers, MLM + NSP heads)."""
    return make_checkpoint("bert", tmp_path_factory.mktemp("onnx-bert") / "bert", tok)


@pytest.fixture(scope="module")
def mlm_export(bert, tmp_path_factory):
    checkpoint = bert
    seen = []
    result = export(checkpoint, tmp_path_factory.mktemp("onnx-mlm") / "bert-onnx", name="bert", progress=seen.append)
    return checkpoint, result, seen


@pytest.fixture(scope="module")
def tuned(bert, tmp_path_factory):
    root, out = tmp_path_factory.mktemp("onnx-tuned"), {}

    def make(name):
        if name not in out:
            folder = fine_tuned(bert, ingested_demo(name, root), root / f"run-{name}", steps=3, batch_size=8)
            out[name] = folder, export(folder, root / f"{name}-onnx")
        return out[name]
    return make


def test_a_bert_pre_training_checkpoint_exports_its_mlm_logits(mlm_export):
    from models_lib.checkpoint import load_model

    checkpoint, result, seen = mlm_export
    assert result.architecture == "BertForMaskedLM"
    assert set(result.files) == TOKENIZER_FILES | {"model.onnx"}
    assert seen[0] == 0 and seen[-1] == 100 and seen == sorted(seen)
    assert json.loads((result.folder / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    assert not [p for p in result.folder.parent.iterdir() if p.name.startswith(".")]  # no staging left
    sess = session(result.folder / "model.onnx")
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in sess.get_outputs()] == ["logits"]
    model = load_model(checkpoint).eval()
    ids, mask = ids_of(model, 3, 13), padded(3, 13, 6)  # the export's dummy input is 2 x 7
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    out = run(sess, input_ids=ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        ours = model(ids, mask, types).mlm_logits
    assert_close(ours, out["logits"], mask.bool().numpy())


def test_roberta_through_the_cli_writes_model_onnx_without_token_types(tok, tmp_path, capsys):
    from models_lib.families import presets
    from models_lib.families.roberta import RobertaForPreTraining
    from trainer.cli import main
    from trainer.prep.tokenization import load_tokenizer

    torch.manual_seed(0)
    config = presets.get("roberta-tiny", vocab_size=load_tokenizer(tok).vocab_size, hidden_size=32, num_heads=2,
                         intermediate_size=64, num_layers=2)
    model = RobertaForPreTraining(config).eval()
    checkpoint = make_checkpoint("roberta", tmp_path / "roberta", tok, model=model)
    out = tmp_path / "roberta-onnx"
    assert main(["export", str(checkpoint), str(out), "--format", "onnx"]) == 0
    assert "RobertaForMaskedLM" in capsys.readouterr().out
    assert TOKENIZER_FILES | {"model.onnx"} <= {p.name for p in out.iterdir()}
    sess = session(out / "model.onnx")
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask"]
    ids, mask = ids_of(model, 4, 10), padded(4, 10, 3)
    ids[mask == 0] = config.pad_token_id  # RoBERTa counts positions from the padding
    with torch.no_grad():
        ours = model(ids, mask).mlm_logits
    assert_close(ours, run(sess, input_ids=ids, attention_mask=mask)["logits"], mask.bool().numpy())


@pytest.mark.parametrize("name, architecture, outputs", [
    ("classification", "BertForSequenceClassification", ["logits"]),
    ("token_classification", "BertForTokenClassification", ["logits"]),
    ("extractive_qa", "BertForQuestionAnswering", ["start_logits", "end_logits"]),
])
def test_a_fine_tuned_checkpoint_exports_its_task_head(tuned, name, architecture, outputs):
    from models_lib.checkpoint import load_model

    folder, result = tuned(name)
    assert result.architecture == architecture
    model = load_model(folder).eval()
    config = json.loads((result.folder / "config.json").read_text())
    assert config["architectures"] == [architecture]
    if model.task_config.labels and name != "extractive_qa":
        assert config["id2label"] == {str(i): label for i, label in enumerate(model.task_config.labels)}
    sess = session(result.folder / "model.onnx")
    assert [o.name for o in sess.get_outputs()] == outputs
    ids, mask = ids_of(model, 3, 12), padded(3, 12, 5)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    out = run(sess, input_ids=ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        ours = model(ids, mask, types)
    keep = mask.bool().numpy()
    if name == "classification":
        assert out["logits"].shape == (3, model.num_labels)
        assert_close(ours.logits, out["logits"])
    elif name == "token_classification":
        assert_close(ours.logits, out["logits"], keep)
    else:
        assert_close(ours.start_logits, out["start_logits"], keep)
        assert_close(ours.end_logits, out["end_logits"], keep)


def test_gpt_exports_one_decoder_whose_next_step_with_past_gives_our_logits(tok, tmp_path):
    from models_lib.checkpoint import load_model
    from models_lib.families.gpt import positions_from_mask

    checkpoint = make_checkpoint("gpt", tmp_path / "gpt", tok)
    result = export(checkpoint, tmp_path / "gpt-onnx")
    assert result.architecture == "GPT2LMHeadModel"
    assert set(result.files) == TOKENIZER_FILES | {"model.onnx"}
    model = load_model(checkpoint).eval()
    L, N, D = model.config.num_layers, model.config.num_heads, model.config.hidden_size // model.config.num_heads
    sess = session(result.folder / "model.onnx")
    pasts = [f"past_key_values.{i}.{w}" for i in range(L) for w in ("key", "value")]
    assert [i.name for i in sess.get_inputs()] == ["input_ids", "attention_mask", "position_ids", *pasts]
    assert [o.name for o in sess.get_outputs()] == ["logits", *[f"present.{i}.{w}" for i in range(L)
                                                               for w in ("key", "value")]]
    # A first step of 3 prompts of 5 tokens, the last left-padded to 2, with empty pasts; then one token.
    prompt = ids_of(model, 3, 5)
    mask = torch.ones_like(prompt)
    mask[2, :3] = 0
    empty = {name: np.zeros((3, N, 0, D), np.float32) for name in pasts}
    first = run(sess, input_ids=prompt, attention_mask=mask, position_ids=positions_from_mask(mask), **empty)
    assert first["present.1.value"].shape == (3, N, 5, D)
    nxt = ids_of(model, 3, 1, seed=2)
    full = torch.cat([mask, torch.ones_like(nxt)], dim=1)
    past = {name: first[name.replace("past_key_values", "present")] for name in pasts}
    second = run(sess, input_ids=nxt, attention_mask=full, position_ids=positions_from_mask(full)[:, -1:], **past)
    assert second["present.0.key"].shape == (3, N, 6, D)
    with torch.no_grad():
        ours = model(torch.cat([prompt, nxt], dim=1), full).logits
    assert_close(ours[:, :5], first["logits"], mask.bool().numpy())
    assert_close(ours[:, 5:], second["logits"])
    assert not np.allclose(second["logits"][0], second["logits"][1])  # the rows are not all alike


def test_t5_exports_an_encoder_a_decoder_and_a_decoder_with_past(tok, tmp_path):
    from models_lib.checkpoint import load_model

    checkpoint = make_checkpoint("t5", tmp_path / "t5", tok)
    result = export(checkpoint, tmp_path / "t5-onnx")
    assert result.architecture == "T5ForConditionalGeneration"
    graphs = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]
    assert set(result.files) == TOKENIZER_FILES | set(graphs)
    model = load_model(checkpoint).eval()
    n = model.config.num_decoder_layers
    encoder, decoder, with_past = (session(result.folder / name) for name in graphs)
    ids, mask = ids_of(model, 3, 11), padded(3, 11, 4)
    states = run(encoder, input_ids=ids, attention_mask=mask)["last_hidden_state"]
    start = torch.full((3, 1), model.config.decoder_start_token_id)
    dec = torch.cat([start, ids_of(model, 3, 2, seed=3)], dim=1)  # (3, 3)
    first = run(decoder, input_ids=dec, encoder_attention_mask=mask, encoder_hidden_states=states)
    assert first["present.1.encoder.key"].shape[2] == 11 and first["present.1.decoder.key"].shape[2] == 3
    past = {f"past_key_values.{i}.{part}.{w}": first[f"present.{i}.{part}.{w}"]
            for i in range(n) for part in ("decoder", "encoder") for w in ("key", "value")}
    nxt = ids_of(model, 3, 1, seed=4)
    second = run(with_past, input_ids=nxt, encoder_attention_mask=mask, **past)
    with torch.no_grad():
        ours_states = model.encode(ids, mask)
        ours = model(ids, mask, decoder_input_ids=torch.cat([dec, nxt], dim=1)).logits
    assert_close(ours_states, states, mask.bool().numpy())
    assert_close(ours[:, :3], first["logits"])
    assert_close(ours[:, 3:], second["logits"])


def test_elmo_is_refused_with_a_sentence_before_anything_is_loaded(tok, tmp_path, capsys):
    from trainer.cli import main
    from trainer.export import check_exportable

    checkpoint = make_checkpoint("elmo", tmp_path / "elmo", tok)
    with pytest.raises(ExportError, match=r"^ELMo's character convolutions .* have no ONNX export here; the ONNX "
                                          r"export takes BERT, RoBERTa, .* GPT language models and T5\."):
        check_exportable(checkpoint, "onnx")
    with pytest.raises(ExportError, match="ELMo"):
        export(checkpoint, tmp_path / "out")
    assert main(["export", str(checkpoint), str(tmp_path / "cli-out"), "--format", "onnx"]) != 0
    assert "no ONNX export" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cli-out").exists()


def test_files_that_do_not_match_the_model_are_refused_and_leave_nothing(mlm_export, tmp_path, monkeypatch):
    """The export's own check: here the file written is the right one for the checkpoint (the one
    the MLM test exported, copied instead of exported again), but a weight of the model moves after
    it is written, so onnxruntime's logits and PyTorch's differ, and the export must refuse."""
    checkpoint, good, _ = mlm_export

    def write_then_perturb(graph, folder):
        shutil.copyfile(good.folder / graph.filename, folder / graph.filename)
        with torch.no_grad():
            graph.module.holder.backbone.encoder.layers[0].ffn.down.bias[0] += 0.05  # not a uniform shift: LayerNorm would undo that
        return [graph.filename]

    monkeypatch.setattr(export_onnx, "_write_graph", write_then_perturb)
    out = tmp_path / "mismatch"
    with pytest.raises(ExportError, match=r"the MLM logits differ from PyTorch's by up to .* \(at most 0.0001 is "
                                          r"allowed\), so the export is refused\."):
        export(checkpoint, out)
    assert not out.exists() and not list(tmp_path.iterdir())
