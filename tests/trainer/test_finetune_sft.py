"""Supervised fine-tuning of GPT (trainer/finetune/sft.py, trainer/finetune/chat.py): the chat
template renders each conversation, the loss covers the replies (and their end-of-text) only,
validation reports the response perplexity and logs greedy replies."""
from __future__ import annotations

import json
import math

import pytest
import torch

from trainer.errors import ConfigError
from trainer.finetune import chat
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.engine import finetune
from trainer.training.sinks import ListSink


@pytest.fixture(scope="module")
def gpt_base(tmp_path_factory, bpe_tokenizer_dir, make_family_config):
    from trainer.training.engine import train

    config = make_family_config("gpt", max_steps=30, checkpoint_every=30, eval_every=30)
    return train(config, data_dir=bpe_tokenizer_dir, out_dir=tmp_path_factory.mktemp("gpt"),
                 sink=ListSink()).last_checkpoint


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory):
    from trainer.prep.labelled import DEMOS, ingest, sniff, write_demo_dataset

    root = tmp_path_factory.mktemp("sft")
    source = write_demo_dataset("sft", root / DEMOS["sft"].filename)
    preview = sniff(source, source.name)
    assert preview.task == "sft"
    ingest(source, root / "data", original_filename=source.name, task=preview.task, mapping=preview.mapping)
    return root / "data"


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    """Twelve chats (a system turn, a question, a two-word reply: the object asked about and the
    next one in the list), in every split: learnable by heart."""
    from trainer.prep.labelled import ingest

    root = tmp_path_factory.mktemp("chats")
    words = ["path", "file", "socket", "thread", "queue", "email", "header", "token", "logger", "parser",
             "buffer", "signal"]
    with open(root / "chats.jsonl", "w") as fh:
        for i, word in enumerate(words):
            messages = [{"role": "system", "content": "answer briefly"},
                        {"role": "user", "content": f"name the {word} object"},
                        {"role": "assistant", "content": f"{word} {words[(i + 1) % 12]}"}]
            for split in ("train", "validation", "test"):
                fh.write(json.dumps({"messages": messages, "split": split}) + "\n")
    ingest(root / "chats.jsonl", root / "data", original_filename="chats.jsonl", task="sft",
           mapping={"messages": "messages", "split": "split"}, split_spec={"strategy": "column"})
    return root / "data"


def _tune(base, dataset, out_dir, **changes):
    settings = dict(max_steps=30, batch_size=8, max_length=96, max_target_length=12, lr=3e-3, eval_every=30,
                    checkpoint_every=30, log_every=10, device="cpu", num_threads=1, samples_shown=2)
    sink = ListSink()
    result = finetune(FinetuneConfig(checkpoint=str(base), dataset=str(dataset), **{**settings, **changes}),
                      out_dir=out_dir, sink=sink)
    return result, sink


# ---------------------------------------------------------------------------- the template
def test_the_template_marks_only_the_replies_and_their_end_of_text_as_learnt():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi {there}"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"},
                {"role": "assistant", "content": "bye"}]
    pieces = chat.render(messages, "[{role}] {content}|")
    assert "".join(p.text for p in pieces) == "[system] be brief|[user] hi {there}|[assistant] hello|[user] again|" \
                                              "[assistant] bye|"
    assert [(p.text, p.eos_after) for p in pieces if p.trained] == [("hello", True), ("bye", True)]
    prompt = chat.prompt_pieces(messages, "[{role}] {content}|")
    assert "".join(p.text for p in prompt) == "[system] be brief|[user] hi {there}|[assistant] hello|[user] again|" \
                                              "[assistant] "
    assert [p.eos_after for p in prompt].count(True) == 1  # the earlier reply keeps its end-of-text


@pytest.mark.parametrize("template, message", [
    ("no placeholder", "must hold {content} exactly once"),
    ("{content} {content}", "must hold {content} exactly once"),
    ("", "must be a text with {content} in it"),
])
def test_a_template_that_cannot_work_is_refused_with_a_sentence(template, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        FinetuneConfig(checkpoint="x", dataset="y", chat_template=template)


def test_batches_learn_the_reply_and_end_of_text_and_nothing_of_the_prompt(gpt_base):
    from models_lib.checkpoint import read_model_config
    from trainer.finetune.sft import SFT
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(gpt_base)
    eos = read_model_config(gpt_base)["config"]["eos_token_id"]
    config = FinetuneConfig(checkpoint=str(gpt_base), dataset="y", family="gpt", chat_template="Q{role}: {content}\n")
    collate = SFT.build_collator(tok, [], 64, config)
    batch = collate([{"prompt": "what is a path", "response": "a file name"}, {"prompt": "hi", "response": "yo"}])
    ids, labels = batch.input_ids[0].tolist(), batch.labels[0].tolist()
    learnt = [i for i, label in enumerate(labels) if label != -100]
    reply = tok.tok.encode("a file name", add_special_tokens=False).ids
    assert [ids[i] for i in learnt] == reply + [eos] and [labels[i] for i in learnt] == reply + [eos]
    assert ids[: learnt[0]] == batch.prompts[0]  # the prompt for generation is exactly what precedes the reply
    shown = tok.decode(batch.prompts[0], skip_special_tokens=False)  # the test tokenizer lowercases
    assert shown.split() == ["quser:", "what", "is", "a", "path", "qassistant:"] and "path\n" in shown
    assert batch.attention_mask[1].sum() < batch.attention_mask[0].sum() and batch.labels[1, -1] == -100  # padding
    cut = SFT.build_collator(tok, [], 8, config)([{"prompt": "what is a path", "response": "a file name"}])
    assert cut.input_ids.shape[1] == 8


def test_sft_trains_reports_response_perplexity_and_logs_greedy_replies(gpt_base, sft_data, tmp_path):
    result, sink = _tune(gpt_base, sft_data, tmp_path / "run")
    assert result.status == "succeeded"
    (_, valid), = sink.split("valid")
    (_, test), = sink.split("test")
    for values in (valid, test):
        assert math.isfinite(values["perplexity"]) and values["perplexity"] > 1
        assert values["perplexity"] == pytest.approx(math.exp(values["loss"]), rel=1e-5)  # per response token (float32 sums apart)
    samples = [line for line in sink.lines if line.startswith("Sample ")]
    assert len(samples) == 4 and samples[0].startswith("Sample 1: prompt «What ")
    (step, rows), = sink.sample_events  # the validation's replies, for the run's page
    assert step == 30 and len(rows) == 2 and rows[0]["input"].startswith("What ") and rows[0]["reference"]
    assert json.loads((tmp_path / "run" / "samples.json").read_text())["validations"] == [{"step": 30,
                                                                                          "samples": rows}]
    assert any(line.startswith("Test split: perplexity") for line in sink.lines)


def test_after_sft_the_model_writes_the_replies_it_learnt(gpt_base, chats, tmp_path):
    _, before = _tune(gpt_base, chats, tmp_path / "before", max_steps=1, lr=1e-8, eval_every=1, batch_size=12)
    _, after = _tune(gpt_base, chats, tmp_path / "after", max_steps=400, eval_every=400, checkpoint_every=400,
                     batch_size=12, warmup_ratio=0.0, samples_shown=12, lr=5e-3)
    (_, start), = before.split("test")
    (_, end), = after.split("test")
    # Calibrated on the stored tokenizers (2026-12-02, two processes, identical): test perplexity 854.7
    # before (the bound 100: a margin of 755) and 1.017 after 400 steps (the bound 2.5: a margin of 1.48).
    assert end["perplexity"] < 2.5 and start["perplexity"] > 100, (start, end)
    replies = [line for line in after.lines if line.startswith("Sample ")][-12:]  # the test split's
    generated = [line.split("generated «")[1].split("»")[0].split() for line in replies]
    asked = [line.split("name the ")[1].split(" object")[0] for line in replies]
    copied = [g[:1] == [word] for g, word in zip(generated, asked)]
    # the tiny model learns to name the object asked about: 12 of 12 observed (the same two processes),
    # the bound 9 of 12 leaves a margin of 3
    assert sum(copied) >= 9, "\n".join(replies)


def test_greedy_replies_start_where_training_predicts(gpt_base, chats, tmp_path):
    """The prompt the samples are generated from is the training row's text before the reply: the
    first token generated is the one the trained model ranks first there under teacher forcing."""
    from models_lib.checkpoint import load_model
    from trainer.finetune.sft import SFT
    from trainer.prep.labelled import iter_examples
    from trainer.prep.tokenization import load_tokenizer

    result, _ = _tune(gpt_base, chats, tmp_path / "run", max_steps=20, eval_every=20, checkpoint_every=20)
    model = load_model(result.last_checkpoint).eval()
    config = FinetuneConfig(checkpoint=str(result.last_checkpoint), dataset="y", family="gpt")
    batch = SFT.build_collator(load_tokenizer(result.last_checkpoint), [], 96, config)(
        list(iter_examples(chats, "test")))
    with torch.no_grad():
        logits = model(batch.input_ids, batch.attention_mask).logits
        for i, prompt in enumerate(batch.prompts):
            first = model.generate(torch.tensor([prompt]), max_new_tokens=1)[0, -1]
            assert first == logits[i, len(prompt) - 1].argmax()


def test_only_gpt_checkpoints_are_taken(trained_run, sft_data, tmp_path):
    from trainer import finetune as tasks

    with pytest.raises(ConfigError, match="A BERT checkpoint cannot be fine-tuned for supervised fine-tuning: "
                                          "that task trains a GPT model"):
        tasks.check_checkpoint(trained_run[0].last_checkpoint, "sft")
    with pytest.raises(ConfigError, match="SFT trains a GPT model"):
        _tune(trained_run[0].last_checkpoint, sft_data, tmp_path / "x")


def test_label_smoothing_is_refused_for_sft(gpt_base, sft_data, tmp_path):
    with pytest.raises(ConfigError, match="SFT learns the plain next-token loss"):
        _tune(gpt_base, sft_data, tmp_path / "x", label_smoothing=0.1)
    assert torch.is_grad_enabled()


def test_the_explorer_chats_with_an_sft_checkpoint_in_its_own_template(gpt_base, chats, tmp_path):
    """generate(chat=True) reads the prompt as SFT laid out its prompts (a user turn, then the
    assistant's opening, in the run's own template) and writes what the model writes from there."""
    from models_lib.checkpoint import load_model
    from trainer.errors import InferenceError
    from trainer.finetune.sft import SFT
    from trainer.inference import generate as generation
    from trainer.prep.tokenization import load_tokenizer

    template = "### {role}:\n{content}\n\n"
    result, _ = _tune(gpt_base, chats, tmp_path / "run", max_steps=10, eval_every=10, checkpoint_every=10,
                      chat_template=template)
    ckpt = result.last_checkpoint
    asked = "Which object does this describe?"
    config = FinetuneConfig(checkpoint=str(ckpt), dataset="y", family="gpt", chat_template=template)
    prompt = SFT.build_collator(load_tokenizer(ckpt), [], 96, config).prompt_ids(
        [{"role": "user", "content": asked}, {"role": "assistant", "content": ""}])
    tok = load_tokenizer(ckpt)
    written = f"### user:\n{asked}\n\n### assistant:\n"  # the tokenizer lowercases; spacing is its own
    assert tok.tok.decode(prompt).replace(" ", "") == written.lower().replace(" ", "")

    answer = generation.generate(ckpt, asked, chat=True, max_new_tokens=5)
    assert answer["prompt_tokens"] == len(prompt)
    model = load_model(ckpt).eval()
    with torch.no_grad():
        expected = model.generate(torch.tensor([prompt]), max_new_tokens=5, eos_token_id=tok.sep_id)[0, len(prompt):]
    expected = expected.tolist()
    if tok.sep_id in expected:
        expected = expected[:expected.index(tok.sep_id)]
    assert answer["ids"] == expected
    plain = generation.generate(ckpt, asked, max_new_tokens=5)
    assert plain["prompt_tokens"] < answer["prompt_tokens"]  # without chat: the text as it is

    streamed = generation.stream_generate(ckpt, asked, chat=True, max_new_tokens=5)
    while True:
        try:
            next(streamed)
        except StopIteration as done:
            assert done.value["ids"] == answer["ids"]
            break
    with pytest.raises(InferenceError, match="Chat needs a GPT checkpoint of a supervised fine-tuning"):
        generation.generate(gpt_base, asked, chat=True)
