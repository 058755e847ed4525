"""Helpers for the generation / attention / ELMo explorer tests (imported by them; holds no
tests): a small tokenizer with T5 sentinel tokens, and tiny random T5, GPT, ELMo and BERT
checkpoints saved the way a run saves them (models_lib.checkpoint.save_model + the run's
tokenizer.json and tokenizer_meta.json). No Django here: the webapp tests place the folders
under STORAGE_ROOT themselves."""
from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

TEXT = (
    "The cat sat on the mat. The dog ran to the park. Paris is the capital of France.\n"
    "It was cold that morning, so she wore her warmest coat before going out.\n"
    "The function returns a list of strings; each item is a word of the sentence.\n"
    "我今天吃了一个苹果。我买了一部苹果手机。苹果很好吃。这部手机很贵。\n"
    "Summarize the article in one sentence. Translate English to German: the house is small.\n"
)
VOCAB_SIZE = 400
EXTRA_IDS = 8

_lock = threading.Lock()


def make_tokenizer(folder: Path, *, extra_ids: int = EXTRA_IDS, algorithm: str = "wordpiece") -> Path:
    """A WordPiece tokenizer (lower case) trained on TEXT, with `extra_ids` sentinels; made once per folder."""
    from tests.tokenizer_store import stored_tokenizer

    folder = Path(folder)
    with _lock:
        if (folder / "tokenizer.json").is_file():
            return folder
        corpus = folder.parent / f"{folder.name}-corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        (corpus / "train.txt").write_text((TEXT + "\n") * 20, encoding="utf-8")
        (corpus / "valid.txt").write_text(TEXT, encoding="utf-8")
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        stored_tokenizer(corpus, tmp, algorithm=algorithm, vocab_size=VOCAB_SIZE, lowercase=True,
                        extra_ids=extra_ids)
        tmp.rename(folder)
    return folder


def tiny_model(family: str, tokenizer_dir: Path, *, seed: int = 0):
    """A tiny random model of `family` sized for the tokenizer, in eval mode."""
    import torch

    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    torch.manual_seed(seed)
    V = tok.vocab_size
    if family == "t5":
        from models_lib.families.t5 import T5Config, T5ForConditionalGeneration

        cfg = T5Config.from_preset("t5-tiny", vocab_size=V, d_model=32, d_ff=64, d_kv=8, num_heads=2,
                                   num_layers=2, num_decoder_layers=2, dropout_rate=0.0,
                                   pad_token_id=tok.pad_id, eos_token_id=tok.sep_id)
        model = T5ForConditionalGeneration(cfg)
    elif family == "gpt":
        from models_lib.families.gpt import GPTConfig, GPTLMHeadModel

        cfg = GPTConfig(vocab_size=V, hidden_size=32, num_layers=2, num_heads=2, max_position_embeddings=64,
                        hidden_dropout=0.0, attention_dropout=0.0, embedding_dropout=0.0,
                        pad_token_id=tok.pad_id, eos_token_id=tok.sep_id)
        model = GPTLMHeadModel(cfg)
    elif family == "elmo":
        from models_lib.families.elmo import ElmoConfig, ElmoLanguageModel

        cfg = ElmoConfig.from_preset("elmo-tiny", vocab_size=V, pad_token_id=tok.pad_id, char_cnn=False,
                                     embedding_dim=16, hidden_size=32, dropout=0.0)
        model = ElmoLanguageModel(cfg)
    elif family == "bert":
        from models_lib.families.bert import BertConfig, BertForPreTraining

        cfg = BertConfig.from_preset("bert-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                                     num_layers=2, max_position_embeddings=64)
        model = BertForPreTraining(cfg)
    elif family == "transfo_xl":
        from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel

        cfg = TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=V, hidden_size=32, num_heads=2, head_size=16,
                                          intermediate_size=64, num_layers=2, mem_len=8, dropout=0.0,
                                          pad_token_id=tok.pad_id, eos_token_id=tok.sep_id)
        model = TransfoXLLMHeadModel(cfg)
    elif family == "xlnet":
        from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel

        cfg = XLNetConfig.from_preset("xlnet-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                                      num_layers=2, mem_len=8, dropout=0.0, attention_dropout=0.0,
                                      pad_token_id=tok.pad_id, eos_token_id=tok.sep_id)
        model = XLNetLMHeadModel(cfg)
        _randomise(model, seed, std=0.2)  # varied predictions from an untrained model
    else:
        raise ValueError(family)
    return model.eval()


def make_checkpoint(family: str, folder: Path, tokenizer_dir: Path, *, seed: int = 0,
                    objectives: list[str] | None = None, model=None) -> Path:
    """save_model(`model`, by default tiny_model(...)) + the tokenizer files (+ trainer_state.json
    with `objectives`)."""
    from models_lib.checkpoint import save_model

    folder = Path(folder)
    save_model(tiny_model(family, tokenizer_dir, seed=seed) if model is None else model, folder)
    for name in ("tokenizer.json", "tokenizer_meta.json"):
        shutil.copy(Path(tokenizer_dir) / name, folder / name)
    if objectives is not None:
        (folder / "trainer_state.json").write_text(json.dumps({"step": 1, "config": {"objectives": objectives}}))
    return folder


# ---------------------------------------------------------------------------- Hugging Face folders
def _randomise(model, seed: int, std: float = 0.3) -> None:
    """Weights far from the near-uniform initialisation, so greedy decoding picks varied tokens."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std + (1.0 if p.dim() == 1 else 0.0))  # norms near 1


def write_tiny_hf_t5(folder: Path, *, seed: int = 0, extra_ids: int = EXTRA_IDS) -> Path:
    """save_pretrained() of a 2 + 2 layer, 32-wide transformers T5ForConditionalGeneration (v1.0:
    ReLU, tied) with a Unigram tokenizer.json (<pad> 0, </s> 1, <unk> 2, then sentinels)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator(TEXT.splitlines() * 20, trainer)
    tok.add_special_tokens([f"<extra_id_{i}>" for i in range(extra_ids)])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(seed)
    config = transformers.T5Config(vocab_size=tok.get_vocab_size(), d_model=32, d_ff=64, d_kv=8, num_heads=2,
                                   num_layers=2, num_decoder_layers=2, dropout_rate=0.0, pad_token_id=0,
                                   eos_token_id=1, decoder_start_token_id=0, feed_forward_proj="relu",
                                   tie_word_embeddings=True)
    model = transformers.T5ForConditionalGeneration(config).eval()
    _randomise(model, seed)
    model.save_pretrained(folder)
    return folder


def write_tiny_hf_gpt2(folder: Path, *, seed: int = 0) -> Path:
    """save_pretrained() of a 2-layer, 32-wide transformers GPT2LMHeadModel with a byte-level BPE
    tokenizer.json whose only special token is <|endoftext|> (id 0)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT.splitlines() * 20, trainer)
    tok.save(str(folder / "tokenizer.json"))
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=2,
                                     n_positions=64, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).eval()
    _randomise(model, seed)
    model.save_pretrained(folder)
    return folder
