"""LoRA (models_lib/core/lora.py, models_lib/hf/lora.py, trainer/finetune/lora.py): adapters on any
family's projections, only they and the head train, checkpoints merged, and the adapter in peft's
format loads with peft onto our transformers export with our outputs."""
from __future__ import annotations

import json

import pytest
import torch

from models_lib.core import lora
from models_lib.families.downstream import build_downstream
from trainer.errors import ConfigError
from trainer.finetune.config import LORA_TARGETS, FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


def classifier(family: str = "bert", seed: int = 0):
    from models_lib.families import presets

    torch.manual_seed(seed)
    sizes = dict(vocab_size=120, hidden_size=32, num_heads=2, num_layers=2, intermediate_size=64)
    if family in ("albert", "electra"):
        sizes["embedding_size"] = 16
    return build_downstream(presets.get(f"{family}-tiny", **sizes), "sequence_classification", 3).eval()


def randomise_adapters(model, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, _, adapter in lora.adapted(model):
            for b in adapter.lora_B:
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)


def test_the_targets_the_config_names_are_the_ones_models_lib_knows():
    assert LORA_TARGETS == lora.TARGETS


def test_adapters_start_as_the_identity_and_merge_into_the_same_function():
    model = classifier()
    ids = torch.randint(5, 120, (2, 7))
    before = model(ids).logits
    names = lora.attach(model, r=4, alpha=8, targets=("query", "value", "ffn_up"))
    assert names == ["bert.encoder.layers.0.attention.qkv", "bert.encoder.layers.0.ffn.up",
                     "bert.encoder.layers.1.attention.qkv", "bert.encoder.layers.1.ffn.up"]
    assert torch.equal(model(ids).logits, before)  # B = 0: nothing changes yet
    randomise_adapters(model)
    adapted = model(ids).logits
    assert not torch.allclose(adapted, before)
    with lora.merged(model):
        assert "bert.encoder.layers.0.attention.qkv.lora.lora_A.0" not in model.state_dict()
        assert torch.allclose(model(ids).logits, adapted, atol=1e-5)
    assert torch.equal(model(ids).logits, adapted)  # W restored exactly after merging
    with lora.detached(model):
        assert torch.equal(model(ids).logits, before)
    _, qkv, adapter = next(lora.adapted(model))
    delta = adapter.delta_weight()  # query and value slices only: the key slice stays 0
    assert delta[:32].abs().sum() > 0 and torch.equal(delta[32:64], torch.zeros(32, 32)) and delta[64:].abs().sum() > 0


@pytest.mark.parametrize("family", ["bert", "roberta", "electra", "distilbert", "albert"])
def test_peft_loads_the_adapter_onto_our_transformers_export_with_our_outputs(tmp_path, family):
    import peft
    import transformers

    from models_lib import hf
    from models_lib.hf.lora import to_peft

    model = classifier(family)
    lora.attach(model, r=4, alpha=8, targets=("query", "key", "value", "output", "ffn_up", "ffn_down"))
    randomise_adapters(model)
    ids = torch.randint(5, 120, (2, 9))
    ours = model(ids).logits
    with lora.detached(model):
        hf.to_pretrained(model, tmp_path / "base")
    to_peft(model, tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8
    base = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "base").eval()
    theirs = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()(input_ids=ids).logits
    assert torch.allclose(theirs, ours, atol=1e-4), (theirs - ours).abs().max()
    with torch.no_grad():
        plain = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "base").eval()
        assert not torch.allclose(plain(input_ids=ids).logits, ours, atol=1e-3)  # the adapter does matter


def generator(family: str, seed: int = 0, **fields):
    """A tiny T5 (v1.0 tied, or v1.1: gated FFN, untied softmax) or GPT-2 style language model."""
    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    if family == "gpt":
        return GPTLMHeadModel(GPTConfig(vocab_size=120, hidden_size=32, num_layers=2, num_heads=2,
                                        max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0,
                                        embedding_dropout=0.0, pad_token_id=0, eos_token_id=1, **fields)).eval()
    return T5ForConditionalGeneration(T5Config.from_preset("t5-tiny", vocab_size=120, d_model=32, d_ff=64, d_kv=8,
                                                           num_heads=2, num_layers=2, num_decoder_layers=2,
                                                           dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
                                                           **fields)).eval()


@pytest.mark.parametrize("family, fields, targets", [
    ("t5", {}, ("query", "key", "value", "output", "ffn_up", "ffn_down")),
    ("t5", {"version": "1.1"}, ("query", "value", "ffn_up")),  # gated FFN: wi_0 and wi_1; untied lm_head
    ("gpt", {}, ("query", "key", "value", "output", "ffn_up", "ffn_down")),  # c_attn fused: rank 3r there
    ("gpt", {}, ("query", "value")),  # two of c_attn's three slices: rank 2r, the key block zero
    ("gpt", {}, ("key", "ffn_down")),  # one slice: rank r, no pattern needed
])
def test_peft_loads_t5_and_gpt2_adapters_onto_our_transformers_export_with_our_outputs(tmp_path, family, fields,
                                                                                      targets):
    import peft
    import transformers

    from models_lib import hf
    from models_lib.hf.lora import to_peft

    model = generator(family, **fields)
    lora.attach(model, r=4, alpha=8, targets=targets)
    randomise_adapters(model)
    g = torch.Generator().manual_seed(3)
    ids, decoder_ids = torch.randint(2, 120, (2, 9), generator=g), torch.randint(2, 120, (2, 5), generator=g)
    inputs = {"input_ids": ids} if family == "gpt" else {"input_ids": ids, "decoder_input_ids": decoder_ids}
    hf_class = transformers.GPT2LMHeadModel if family == "gpt" else transformers.T5ForConditionalGeneration
    with torch.no_grad():
        ours = model(ids).logits if family == "gpt" else model(ids, decoder_input_ids=decoder_ids).logits
        with lora.detached(model):
            hf.to_pretrained(model, tmp_path / "base")
        to_peft(model, tmp_path / "adapter")
        config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert config["task_type"] == ("CAUSAL_LM" if family == "gpt" else "SEQ_2_SEQ_LM")
        assert config["fan_in_fan_out"] is (family == "gpt")
        base = hf_class.from_pretrained(tmp_path / "base").eval()
        adapted = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        assert adapted.peft_config["default"].task_type == config["task_type"]
        theirs = adapted(**inputs).logits
        assert torch.allclose(theirs, ours, atol=1e-4), (theirs - ours).abs().max()
        plain = hf_class.from_pretrained(tmp_path / "base").eval()(**inputs).logits
        assert not torch.allclose(plain, ours, atol=1e-3)  # the adapter does matter


def test_a_gpt1_style_model_has_no_peft_layout_and_says_so(tmp_path):
    from models_lib.hf.lora import to_peft

    model = generator("gpt", norm_placement="post")
    lora.attach(model, r=4, alpha=8)
    with pytest.raises(ValueError, match="this GPT-1 style \\(post-norm\\) model has no GPT-2 layout"):
        to_peft(model, tmp_path / "adapter")
    assert not (tmp_path / "adapter").exists()


# ---------------------------------------------------------------------------- fine-tuning with LoRA
@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    root = tmp_path_factory.mktemp("lora")
    source = write_demo_dataset("classification", root / DEMOS["classification"].filename)
    preview = sniff(source, source.name)
    ingest(source, root / "data", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / "data"


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=30, batch_size=16, max_length=48, lr=5e-3, eval_every=15, checkpoint_every=30,
                    log_every=10, device="cpu", num_threads=1, lora_r=4, lora_alpha=8.0, lora_dropout=0.0)
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


def test_a_lora_run_trains_only_the_adapters_and_the_head_and_exports_for_peft(trained_run, dataset, tmp_path):
    import peft
    import safetensors.torch
    import transformers

    from models_lib.checkpoint import load_model

    base = trained_run[0].last_checkpoint
    result, sink = _tune(base, dataset, tmp_path / "run", early_stopping_patience=5)
    assert result.status == "succeeded"
    assert any(line.startswith("LoRA r=4, alpha=8, dropout=0 on query, value (2 projections)") for line in sink.lines)
    before = safetensors.torch.load_file(str(base / "model.safetensors"))
    after = safetensors.torch.load_file(str(result.last_checkpoint / "model.safetensors"))
    changed = {k for k in after if k in before and not torch.equal(after[k], before[k])}
    # merged checkpoints: the adapted Q/K/V matrices changed (by B A) and the pooler the classifier reads
    # (the head group trains); nothing else of the encoder did
    assert changed == {"bert.encoder.layers.0.attention.qkv.weight", "bert.encoder.layers.1.attention.qkv.weight",
                       "bert.pooler.dense.weight", "bert.pooler.dense.bias"}
    qkv = after["bert.encoder.layers.0.attention.qkv.weight"] - before["bert.encoder.layers.0.attention.qkv.weight"]
    assert torch.linalg.matrix_rank(qkv[:64]) <= 4 and torch.equal(qkv[64:128], torch.zeros(64, 64))
    model = load_model(result.last_checkpoint).eval()  # a plain classifier
    assert type(model).__name__ == "EncoderForSequenceClassification"
    # peft, on the transformers export of the pre-trained encoder + the trained head, gives the outputs of
    # the best checkpoint (early stopping restored the best adapters before the export)
    best = json.loads((tmp_path / "run" / "best.json").read_text())["checkpoint"]
    model = load_model(tmp_path / "run" / "checkpoints" / best).eval()
    ids = torch.randint(5, 500, (3, 12))
    hf_base = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "peft" / "base")
    theirs = peft.PeftModel.from_pretrained(hf_base.eval(), tmp_path / "run" / "peft" / "adapter").eval()
    with torch.no_grad():
        assert torch.allclose(theirs(input_ids=ids).logits, model(ids).logits, atol=1e-4)


def test_early_stopping_restores_the_best_adapters_exactly(trained_run, dataset, tmp_path):
    from trainer.finetune import lora as lora_ft

    result, sink = _tune(trained_run[0].last_checkpoint, dataset, tmp_path / "run", early_stopping_patience=1,
                         max_steps=45, lr=2e-2)
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    folder = tmp_path / "run" / "checkpoints" / best["checkpoint"]
    assert (folder / lora_ft.ADAPTERS_FILE).is_file()
    (_, test), = sink.split("test")
    assert any("Scoring the test split with the best checkpoint" in line for line in sink.lines)
    assert 0.0 <= test["accuracy"] <= 1.0


def test_lora_on_t5_and_gpt_trains_and_keeps_merged_checkpoints(tmp_path, sentinel_tokenizer_dir, bpe_tokenizer_dir,
                                                                 make_family_config, dataset):
    from models_lib.checkpoint import load_model
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset
    from trainer.training.engine import train

    config = make_family_config("gpt", max_steps=10, checkpoint_every=10, eval_every=10)
    gpt = train(config, data_dir=bpe_tokenizer_dir, out_dir=tmp_path / "gpt", sink=ListSink()).last_checkpoint
    source = write_demo_dataset("sft", tmp_path / DEMOS["sft"].filename)
    preview = sniff(source, source.name)
    ingest(source, tmp_path / "sft", original_filename=source.name, task="sft", mapping=preview.mapping)
    result, sink = _tune(gpt, tmp_path / "sft", tmp_path / "run", max_steps=6, eval_every=6, checkpoint_every=6,
                         max_length=64, max_target_length=4, samples_shown=1, lora_targets="query,value,ffn_down")
    assert result.status == "succeeded" and type(load_model(result.last_checkpoint)).__name__ == "GPTLMHeadModel"
    # the adapter in peft's format on the GPT-2 export gives the outputs of the (merged) last checkpoint
    assert any(line.startswith("LoRA adapter in peft's format: peft/adapter") for line in sink.lines)
    import peft
    import transformers

    hf_base = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "run" / "peft" / "base").eval()
    theirs = peft.PeftModel.from_pretrained(hf_base, tmp_path / "run" / "peft" / "adapter").eval()
    merged = load_model(result.last_checkpoint).eval()
    ids = torch.randint(5, merged.config.vocab_size, (2, 10))
    with torch.no_grad():
        assert torch.allclose(theirs(input_ids=ids).logits, merged(ids).logits, atol=1e-4)


def test_a_model_with_no_transformers_layout_for_its_adapters_gets_a_sentence(tmp_path):
    from models_lib.families.downstream import TaskConfig
    from models_lib.families.gpt_tasks import GPTForSequenceClassification
    from trainer.finetune import lora as lora_ft

    model = GPTForSequenceClassification.from_lm(generator("gpt"), TaskConfig("sequence_classification", 2,
                                                                              ["no", "yes"]))
    lora.attach(model, r=4, alpha=8)
    sink = ListSink()
    assert lora_ft.export(model, tmp_path / "peft", sink) is None
    assert sink.lines == ["No peft adapter written: LoRA adapters are written in peft's format for the encoder "
                          "families (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, SpanBERT, UniLM), T5 and GPT-2 "
                          "style GPT language models; GPTForSequenceClassification is not one. Its checkpoints "
                          "hold the merged weights."]
    assert not (tmp_path / "peft").exists()


def test_lora_settings_that_cannot_work_are_refused_with_sentences():
    with pytest.raises(ConfigError, match="lora_targets must name some of query, key, value, output, ffn_up, "
                                          "ffn_down, joined by commas; attention is not one"):
        FinetuneConfig(checkpoint="x", dataset="y", lora_r=4, lora_targets="query,attention")
    with pytest.raises(ConfigError, match="set lora_r or gradual_unfreeze_every to 0"):
        FinetuneConfig(checkpoint="x", dataset="y", lora_r=4, gradual_unfreeze_every=10)
    with pytest.raises(ConfigError, match="lora_r must be between 0 and 1,024"):
        FinetuneConfig(checkpoint="x", dataset="y", lora_r=-1)
