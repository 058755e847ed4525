"""GGUF export (trainer/export_gguf.py): a tiny GPT-2 checkpoint written as llama.cpp's "gpt2" reads
back with gguf's reader (names, shapes, hyper-parameters, tokenizer), loads in transformers with
our logits within 1e-4, and its embedded tokenizer gives our ids; what it refuses is a sentence."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.tokenizer_store import STORE
from trainer.export import ExportError

TEXTS = ["Return the absolute path of a file.", "The cat sat on the mat; the dog ran to the park.",
         "paris is the capital of france </s> it was cold that morning", "numbers 42 and 1999, café!"]


def _bpe_tokenizer_dir() -> Path:
    found = sorted(STORE.glob("bpe-1000-0-lower-*"))
    assert found, "the stored bpe-1000 tokenizer is missing from tests/data/tokenizers"
    return found[0]


def _gpt2(*, tied: bool = True, norm_placement: str = "pre", positions: int = 1024, seed: int = 0):
    """A 2-layer, 32-wide GPT (1024 positions by default: transformers' GGUF loader keeps GPT-2's
    default n_positions), weights drawn far from the initialisation so that every tensor shows in the
    logits."""
    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(_bpe_tokenizer_dir())
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                       max_position_embeddings=positions, hidden_dropout=0.0, attention_dropout=0.0,
                       embedding_dropout=0.0, pad_token_id=tok.pad_id, eos_token_id=tok.sep_id,
                       tie_word_embeddings=tied, norm_placement=norm_placement)
    model = GPTLMHeadModel(config).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from tests.trainer.inference_generate_helpers import make_checkpoint

    root, made = tmp_path_factory.mktemp("gguf"), {}

    def make(kind: str = "tied") -> Path:
        if kind not in made:
            tok_dir = _bpe_tokenizer_dir()
            if kind == "bert":
                made[kind] = make_checkpoint("bert", root / kind, tok_dir)
            else:
                model = _gpt2(tied=kind != "untied", norm_placement="post" if kind == "gpt1" else "pre",
                              positions=64 if kind == "short" else 1024)
                made[kind] = make_checkpoint("gpt", root / kind, tok_dir, model=model)
        return made[kind]
    return make


@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
    from trainer.export_gguf import export_gguf

    root, done = tmp_path_factory.mktemp("gguf-out"), {}

    def export(kind: str = "tied"):
        if kind not in done:
            steps: list[float] = []
            done[kind] = (export_gguf(checkpoints(kind), root / kind, name="tiny gpt2", license="mit",
                                      progress=steps.append), steps)
        return done[kind]
    return export


def _field(reader, key):
    return reader.fields[key].contents()


def test_the_gguf_holds_llama_cpps_gpt2_with_our_tensors_and_tokenizer(exported, checkpoints):
    import gguf

    from models_lib.checkpoint import load_model

    result, steps = exported("tied")
    assert result.architecture == "gpt2"
    assert {"model.gguf", "README.md", "tokenizer.json", "tokenizer_config.json"} <= set(result.files)
    assert steps[0] == 0 and steps[-1] == 100 and steps == sorted(steps)
    assert not [p for p in result.folder.parent.iterdir() if p.name.startswith(".")]  # no staging left

    reader = gguf.GGUFReader(result.folder / "model.gguf")
    assert _field(reader, "general.architecture") == "gpt2"
    assert _field(reader, "general.name") == "tiny gpt2"
    assert _field(reader, "general.license") == "mit"
    assert "lowercase" in _field(reader, "general.description")
    assert {k: _field(reader, f"gpt2.{k}") for k in ("context_length", "embedding_length", "feed_forward_length",
                                                      "block_count", "attention.head_count")} == {
        "context_length": 1024, "embedding_length": 32, "feed_forward_length": 128, "block_count": 2,
        "attention.head_count": 2}
    assert _field(reader, "gpt2.attention.layer_norm_epsilon") == pytest.approx(1e-5)

    ours = load_model(checkpoints("tied")).eval()
    blocks = [f"blk.{i}.{t}.{p}" for i in range(2) for t in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm",
                                                               "ffn_up", "ffn_down") for p in ("weight", "bias")]
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == {"token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias",
                            *blocks}  # tied: no output.weight, llama.cpp reuses token_embd
    # ggml lists dimensions innermost first: a torch (out, in) weight is {in, out}
    V = ours.config.vocab_size
    assert list(tensors["token_embd.weight"].shape) == [32, V]
    assert list(tensors["position_embd.weight"].shape) == [32, 1024]
    assert list(tensors["blk.0.attn_qkv.weight"].shape) == [32, 96]
    assert list(tensors["blk.1.ffn_up.weight"].shape) == [32, 128]
    assert list(tensors["blk.1.ffn_down.weight"].shape) == [128, 32]
    assert list(tensors["blk.0.attn_qkv.bias"].shape) == [96]
    assert {t.tensor_type for t in reader.tensors} == {gguf.GGMLQuantizationType.F32}
    qkv = torch.from_numpy(tensors["blk.0.attn_qkv.weight"].data.copy()).reshape(96, 32)
    assert torch.equal(qkv, ours.encoder.layers[0].attention.qkv.weight)

    tok = json.loads((checkpoints("tied") / "tokenizer.json").read_text())
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "gpt-2"
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == V and all(tokens[i] == t for t, i in tok["model"]["vocab"].items())
    types = _field(reader, "tokenizer.ggml.token_type")
    assert [types[i] for i in range(5)] == [gguf.TokenType.CONTROL] * 5  # <pad> <unk> <s> </s> <mask>
    assert set(types[5:]) == {gguf.TokenType.NORMAL}
    assert _field(reader, "tokenizer.ggml.merges") == [" ".join(m) for m in tok["model"]["merges"]]
    assert (_field(reader, "tokenizer.ggml.eos_token_id"), _field(reader, "tokenizer.ggml.padding_token_id"),
            _field(reader, "tokenizer.ggml.unknown_token_id")) == (3, 0, 1)  # </s>, <pad>, <unk>
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False


@pytest.mark.parametrize("kind", ["tied", "untied", "short"])
def test_transformers_loads_the_gguf_with_our_logits(exported, checkpoints, kind):
    """"short": 64 positions, which transformers does not read from gpt2.context_length (it sets
    n_ctx, not n_positions): it is told them, as the module docstring says a user must."""
    import transformers

    from models_lib.checkpoint import load_model
    from trainer.prep.tokenization import load_tokenizer

    result, _ = exported(kind)
    extra = {"n_positions": 64} if kind == "short" else {}
    theirs = transformers.AutoModelForCausalLM.from_pretrained(result.folder, gguf_file="model.gguf", **extra).eval()
    assert type(theirs).__name__ == "GPT2LMHeadModel"
    assert theirs.config.tie_word_embeddings is (kind != "untied")
    ours = load_model(checkpoints(kind)).eval()
    tok = load_tokenizer(checkpoints(kind))
    ids = torch.tensor([tok.tok.encode(" ".join(TEXTS[:2]), add_special_tokens=False).ids])
    with torch.no_grad():
        a, b = ours(ids).logits, theirs(ids).logits
    assert a.shape == b.shape == (1, ids.shape[1], ours.config.vocab_size)
    assert torch.allclose(a, b, atol=1e-4), float((a - b).abs().max())


def test_the_tokenizer_inside_the_gguf_gives_our_ids(exported, tmp_path):
    """Read from the GGUF alone (a folder with tokenizer.json beside it makes transformers read that
    instead). llama.cpp's byte-level BPE neither lowercases nor adds a prefix space, so the text is
    given lowercased and begun with a space, as general.description tells a user to."""
    import transformers

    from trainer.prep.tokenization import load_tokenizer

    result, _ = exported("tied")
    shutil.copyfile(result.folder / "model.gguf", tmp_path / "model.gguf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="model.gguf")
    ours = load_tokenizer(result.folder)
    for text in TEXTS:
        prepared = text.lower() if text.startswith(" ") else " " + text.lower()
        assert theirs(prepared)["input_ids"] == ours.tok.encode(text, add_special_tokens=False).ids, text
    assert theirs.convert_tokens_to_ids("</s>") == 3 and theirs.eos_token == "</s>"


@pytest.mark.parametrize("kind, sentence", [
    ("bert", r"GGUF export is for GPT-2 checkpoints.*this is a BERT checkpoint\. Export it in the Hugging Face"),
    ("gpt1", r"GGUF export is for GPT-2 checkpoints.*GPT-1 style model .*norm_placement 'post'"),
])
def test_what_is_not_gpt2_is_refused_with_a_sentence(checkpoints, tmp_path, kind, sentence):
    from trainer.export import check_exportable
    from trainer.export_gguf import export_gguf

    with pytest.raises(ExportError, match=sentence):
        check_exportable(checkpoints(kind), "gguf")
    with pytest.raises(ExportError, match=sentence):
        export_gguf(checkpoints(kind), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_task_head_or_another_tokenizer_is_refused(checkpoints, tmp_path):
    from trainer.export_gguf import check_exportable

    tuned = tmp_path / "tuned"
    shutil.copytree(checkpoints("tied"), tuned)
    meta = json.loads((tuned / "model_config.json").read_text())
    (tuned / "model_config.json").write_text(json.dumps({**meta, "class": "GPTForSequenceClassification",
                                                         "task": {"task": "sequence_classification"}}))
    with pytest.raises(ExportError, match=r"fine-tuned with a task head \(sequence_classification\)"):
        check_exportable(tuned)
    wordpiece = tmp_path / "wordpiece"
    shutil.copytree(checkpoints("tied"), wordpiece)
    shutil.copyfile(sorted(STORE.glob("wordpiece-1000-*"))[0] / "tokenizer.json", wordpiece / "tokenizer.json")
    with pytest.raises(ExportError, match="tokenizer is WordPiece, which GGUF's GPT-2 tokenizer cannot reproduce"):
        check_exportable(wordpiece)
    from trainer.export_gguf import export_gguf

    with pytest.raises(ExportError, match="is not a license an export can name"):
        export_gguf(checkpoints("tied"), tmp_path / "out", license="all mine")
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="model_config.json cannot be read"):
        check_exportable(tmp_path / "empty")


def test_the_cli_exports_gguf(checkpoints, tmp_path, capsys):
    import gguf

    from trainer.cli import main

    out = tmp_path / "tiny-gguf"
    assert main(["export", str(checkpoints("tied")), str(out), "--format", "gguf"]) == 0
    assert "gpt2" in capsys.readouterr().out
    assert gguf.GGUFReader(out / "model.gguf").fields["general.architecture"].contents() == "gpt2"
    assert main(["export", str(checkpoints("bert")), str(tmp_path / "bert-gguf"), "--format", "gguf"]) != 0
    assert "GGUF export is for GPT-2 checkpoints" in capsys.readouterr().err
    assert not (tmp_path / "bert-gguf").exists()


def test_an_imported_gpt2_comes_back_as_the_original(tmp_path):
    """transformers' GPT-2 -> import -> GGUF -> transformers: the same logits, and the GGUF's own
    tokenizer (cased, no prefix space: nothing for a user to do) gives the original's ids."""
    import gguf
    import transformers

    from tests.trainer.inference_generate_helpers import write_tiny_hf_gpt2
    from trainer.export_gguf import export_gguf
    from trainer.inference.importing import import_hf_directory

    src = write_tiny_hf_gpt2(tmp_path / "hf")
    import_hf_directory(src, tmp_path / "ckpt")
    result = export_gguf(tmp_path / "ckpt", tmp_path / "gguf")
    reader = gguf.GGUFReader(result.folder / "model.gguf")
    assert reader.fields["general.description"].contents() == "Exported by LM Workbench (GPT-2, F32)."
    assert reader.fields["tokenizer.ggml.eos_token_id"].contents() == 0  # <|endoftext|>
    (tmp_path / "alone").mkdir()
    shutil.copyfile(result.folder / "model.gguf", tmp_path / "alone" / "model.gguf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "alone", gguf_file="model.gguf")
    original = transformers.AutoTokenizer.from_pretrained(src)
    for text in ("The Cat sat on the mat.", "Paris <|endoftext|> France"):
        assert theirs(text)["input_ids"] == original(text)["input_ids"], text
    model = transformers.AutoModelForCausalLM.from_pretrained(result.folder, gguf_file="model.gguf",
                                                              n_positions=64).eval()
    reference = transformers.AutoModelForCausalLM.from_pretrained(src).eval()
    ids = torch.tensor([original(TEXTS[1])["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
