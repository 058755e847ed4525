"""T5 multi-task mixing (trainer/finetune/mixing.py): the rates of the T5 study's strategies,
a sampler that draws the tasks at those rates, and a run over several datasets at once that
scores each task apart."""
from __future__ import annotations

from collections import Counter

import pytest

from tests.trainer.conftest import T5_RECIPE
from trainer.errors import ConfigError
from trainer.finetune.config import FinetuneConfig
from trainer.finetune.mixing import MixedStream, as_text, mixing_rates
from trainer.training.data import DataPosition
from trainer.training.sinks import ListSink


# ---------------------------------------------------------------------------- rates
def test_examples_proportional_rates_cap_each_task_at_the_limit():
    sizes = [1000, 300, 50]
    assert mixing_rates(sizes, "proportional") == pytest.approx([1000 / 1350, 300 / 1350, 50 / 1350])
    # K = 200: min(e, K) = 200, 200, 50 over 450
    assert mixing_rates(sizes, "proportional", limit=200) == pytest.approx([200 / 450, 200 / 450, 50 / 450])


def test_temperature_rates_are_the_capped_rates_to_the_power_one_over_t_renormalised():
    sizes = [1000, 300, 50]
    capped = [200 / 450, 200 / 450, 50 / 450]
    scaled = [r ** 0.5 for r in capped]
    assert mixing_rates(sizes, "temperature", limit=200, temperature=2.0) == pytest.approx(
        [s / sum(scaled) for s in scaled])
    assert mixing_rates(sizes, "temperature", temperature=1.0) == pytest.approx(mixing_rates(sizes, "proportional"))
    assert mixing_rates(sizes, "temperature", temperature=1000.0) == pytest.approx([1 / 3] * 3, abs=2e-3)
    assert mixing_rates(sizes, "equal") == pytest.approx([1 / 3] * 3)


def test_bad_mixing_settings_are_refused_with_a_sentence():
    with pytest.raises(ConfigError, match="mixing must be one of proportional, temperature, equal"):
        FinetuneConfig(checkpoint="c", dataset="d", mixing="random")
    with pytest.raises(ConfigError, match="extra_datasets entry 1 must be"):
        FinetuneConfig(checkpoint="c", dataset="d", extra_datasets=["x"])
    with pytest.raises(ConfigError, match="Multi-task mixing .* trains text to text"):
        FinetuneConfig(checkpoint="c", dataset="d", task="classification", extra_datasets=[{"dataset": "e"}])
    with pytest.raises(ConfigError, match="Every task of a multi-task run needs training examples"):
        mixing_rates([10, 0], "proportional")


def test_classification_and_regression_examples_become_text():
    assert as_text({"text": "Open a file.", "label": "io"}, "classification") == {"input": "Open a file.",
                                                                                    "target": "io"}
    pair = as_text({"sentence1": "A.", "sentence2": "B.", "label": "same"}, "classification")
    assert pair == {"input": "sentence1: A. sentence2: B.", "target": "same"}
    assert as_text({"text": "x", "label": 3.27}, "regression")["target"] == "3.2"  # T5's STS-B: 0.2 steps
    with pytest.raises(ConfigError, match="token_classification dataset cannot be written as text"):
        as_text({"tokens": ["a"], "tags": ["O"]}, "token_classification")


# ---------------------------------------------------------------------------- the sampler
def _tasks(sizes):
    return [[{"task": f"t{i}", "n": j} for j in range(n)] for i, n in enumerate(sizes)]


@pytest.mark.parametrize("strategy,limit,temperature", [("proportional", 0, 1.0), ("proportional", 60, 1.0),
                                                        ("temperature", 0, 2.0), ("equal", 0, 1.0)])
def test_the_sampler_draws_each_task_at_its_rate(strategy, limit, temperature):
    sizes = [400, 100, 20]
    rates = mixing_rates(sizes, strategy, limit=limit, temperature=temperature)
    stream = MixedStream(_tasks(sizes), rates, list, batch_size=100, seed=3)
    drawn = Counter(ex["task"] for _ in range(200) for ex in stream.next_batch())  # 20,000 draws
    for i, rate in enumerate(rates):
        assert drawn[f"t{i}"] / 20_000 == pytest.approx(rate, abs=0.012), (strategy, drawn)


def test_the_sampler_goes_through_each_task_before_repeating_and_resumes_where_it_stopped():
    sizes = [30, 7]
    rates = mixing_rates(sizes, "equal")
    stream = MixedStream(_tasks(sizes), rates, list, batch_size=10, seed=1)
    first = [ex for _ in range(500) for ex in stream.next_batch()]
    small = [ex["n"] for ex in first if ex["task"] == "t1"]
    assert sorted(small[:7]) == list(range(7)) and sorted(small[7:14]) == list(range(7))  # an epoch each
    position = DataPosition(*divmod(4000, stream.epoch_size))
    again = MixedStream(_tasks(sizes), rates, list, batch_size=10, seed=1, position=position)
    assert again.position == position
    assert [ex for _ in range(100) for ex in again.next_batch()] == first[4000:5000]


# ---------------------------------------------------------------------------- a run
@pytest.fixture(scope="module")
def t5_base(tmp_path_factory, sentinel_tokenizer_dir, make_family_config):
    from trainer.training.engine import train

    config = make_family_config("t5", max_steps=30, checkpoint_every=30, eval_every=30, **T5_RECIPE)
    return train(config, data_dir=sentinel_tokenizer_dir, out_dir=tmp_path_factory.mktemp("t5"),
                 sink=ListSink()).last_checkpoint


WORDS = ["path", "file", "socket", "thread", "queue", "email", "header", "token"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """A text-to-text dataset (name the next word) and a classification one (the word's kind)."""
    from trainer.prep.labelled import ingest

    root = tmp_path_factory.mktemp("mix")
    summary, kinds = ["input,target,split"], ["text,label,split"]
    for i, word in enumerate(WORDS):
        for split in ("train", "validation", "test"):
            summary.append(f"the {word} object number {i} and its methods,{word} {WORDS[(i + 1) % 8]},{split}")
            kinds.append(f"a {word} is used by the program,{'storage' if i % 2 else 'network'},{split}")
    (root / "summary.csv").write_text("\n".join(summary) + "\n")
    (root / "kinds.csv").write_text("\n".join(kinds) + "\n")
    column = {"strategy": "column"}
    ingest(root / "summary.csv", root / "summary", original_filename="summary.csv", task="text_to_text",
           mapping={"input": "input", "target": "target", "split": "split"}, split_spec=column)
    ingest(root / "kinds.csv", root / "kinds", original_filename="kinds.csv", task="classification",
           mapping={"text": "text", "label": "label", "split": "split"}, split_spec=column)
    return root / "summary", root / "kinds"


def test_a_multi_task_run_trains_on_both_datasets_and_scores_each_task(t5_base, datasets, tmp_path):
    from trainer.finetune.engine import finetune

    summary, kinds = datasets
    config = FinetuneConfig(checkpoint=str(t5_base), dataset=str(summary), source_prefix="summarize: ",
                            extra_datasets=[{"dataset": str(kinds), "prefix": "classify: "}], mixing="temperature",
                            mixing_temperature=2.0, max_steps=60, batch_size=8, max_length=32, max_target_length=6,
                            lr=5e-3, warmup_ratio=0.0, eval_every=60, checkpoint_every=60, log_every=10,
                            device="cpu", num_threads=1, samples_shown=1)
    sink = ListSink()
    result = finetune(config, out_dir=tmp_path / "run", sink=sink)
    assert result.status == "succeeded"
    assert any(line.startswith("Multi-task mixing (temperature): summarize 50.0%") for line in sink.lines)
    (_, valid), = sink.split("valid")
    (_, test), = sink.split("test")
    for values in (valid, test):
        for task in ("summarize", "classify"):
            assert 0.0 <= values[f"exact_match/{task}"] <= 1.0
        assert values["exact_match/mean"] == pytest.approx(
            (values["exact_match/summarize"] + values["exact_match/classify"]) / 2)
        assert values["rouge_l/mean"] == pytest.approx((values["rouge_l/summarize"] + values["rouge_l/classify"]) / 2)
    # Two label words, learnt in 60 steps. Exact match over the test split's 8 inputs (0.125 each); before
    # training (1 step at lr 1e-8) T5 writes neither word: 0.0. Calibrated on the stored tokenizers
    # (2026-12-02, two processes, identical): 0.5 at 60 steps (0.625 at 90 and at 120), exactly the bound
    # 0.5 it had, no margin; and one label word written for every input scores 0.5 too, so what 60 steps
    # show is that the label words are learnt, not the classification. The bound 0.25 (at least 3 of 8)
    # leaves a margin of 0.25 and still fails a run that learns neither word (0.0).
    assert test["exact_match/classify"] > 0.25, test
    losses = [v["loss"] for _, v in sink.split("train")]
    # the sum of the first two logged losses 12.13 (7.245 + 4.887), of the last two 2.47: a margin of 9.7
    assert sum(losses[-2:]) < sum(losses[:2]), losses


def test_the_cli_reads_extra_datasets_beside_the_main_one(t5_base, datasets, tmp_path):
    from trainer.cli import main

    summary, kinds = datasets
    config = tmp_path / "mix.yaml"
    config.write_text(f"checkpoint: {t5_base}\ndataset: {summary}\noutput_dir: out\nsource_prefix: 'summarize: '\n"
                      f"extra_datasets:\n  - {{dataset: {kinds}, prefix: 'classify: ', name: kind}}\n"
                      f"mixing: equal\nmax_steps: 2\nbatch_size: 4\nmax_length: 24\nmax_target_length: 3\n"
                      f"eval_every: 2\ncheckpoint_every: 2\ndevice: cpu\nsamples_shown: 0\n")
    assert main(["finetune", str(config)]) == 0
    metrics = (tmp_path / "out" / "test_metrics.json").read_text()
    assert '"exact_match/kind"' in metrics and '"exact_match/summarize"' in metrics


def test_the_cli_runs_the_mix_then_fine_tunes_on_one_of_its_tasks(t5_base, datasets, tmp_path):
    """then_finetune_on: the multi-task phase, then its last checkpoint fine-tuned on one task
    alone (T5 section 3.5.3): a classification dataset as label words, with its own prefix."""
    import json

    from trainer.cli import main
    from trainer.training.checkpoints import list_checkpoints, read_state

    summary, kinds = datasets
    config = tmp_path / "mix.yaml"
    config.write_text(f"checkpoint: {t5_base}\ndataset: {summary}\noutput_dir: out\nsource_prefix: 'summarize: '\n"
                      f"extra_datasets:\n  - {{dataset: {kinds}, prefix: 'classify: ', name: kind}}\n"
                      f"max_steps: 2\nbatch_size: 4\nmax_length: 24\nmax_target_length: 3\n"
                      f"eval_every: 2\ncheckpoint_every: 2\ndevice: cpu\nsamples_shown: 1\n"
                      f"then_finetune_on: kind\nthen_steps: 3\n")
    assert main(["finetune", str(config)]) == 0
    mixed, then = tmp_path / "out", tmp_path / "out" / "then-kind"
    assert [step for step, _ in list_checkpoints(mixed)] == [2]
    assert [step for step, _ in list_checkpoints(then)][-1] == 3
    second = read_state(list_checkpoints(then)[-1][1])["config"]
    assert second["checkpoint"] == str(list_checkpoints(mixed)[-1][1]) and second["dataset"] == str(kinds)
    assert second["source_prefix"] == "classify: " and second["extra_datasets"] == []
    assert second["task"] == "classification" and sorted(second["label_words"]) == ["network", "storage"]
    test = json.loads((then / "test_metrics.json").read_text())
    assert "accuracy" in test and "exact_match/summarize" not in test  # that task alone, scored as a classifier
    sample = json.loads((then / "samples.json").read_text())["validations"][0]["samples"][0]
    assert sample["reference"] in ("storage", "network")  # the label as the target word


@pytest.mark.parametrize("extra, message", [
    ("then_finetune_on: nope\n", "must name one of the tasks of the mix (summarize, kind), not 'nope'"),
    ("then_finetune_on: kind\nthen_steps: -1\n", "then_steps must be a whole number"),
])
def test_the_cli_refuses_a_second_phase_it_cannot_run_before_training(t5_base, datasets, tmp_path, extra, message,
                                                                      capsys):
    from trainer.cli import main

    summary, kinds = datasets
    config = tmp_path / "mix.yaml"
    config.write_text(f"checkpoint: {t5_base}\ndataset: {summary}\noutput_dir: out\nsource_prefix: 'summarize: '\n"
                      f"extra_datasets:\n  - {{dataset: {kinds}, prefix: 'classify: ', name: kind}}\n"
                      f"max_steps: 2\ndevice: cpu\n{extra}")
    assert main(["finetune", str(config)]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_each_example_is_read_behind_its_own_task_prefix(t5_base):
    from trainer.finetune.text2text import TEXT_TO_TEXT
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(t5_base)
    config = FinetuneConfig(checkpoint="x", dataset="y", family="t5", source_prefix="summarize: ")
    examples = [{"input": "Open a file.", "target": "io", "prefix": "classify: ", "task": "classify"},
                {"input": "Open a file.", "target": "Open.", "prefix": "summarize: ", "task": "summarize"}]
    batch = TEXT_TO_TEXT.build_collator(tok, [], 32, config)(examples)
    for row, ex in enumerate(examples):
        ids = tok.tok.encode(ex["prefix"] + ex["input"], add_special_tokens=False).ids + [tok.sep_id]
        assert batch.input_ids[row, : batch.attention_mask[row].sum()].tolist() == ids
    assert batch.tasks == ["classify", "summarize"]


def test_a_multi_task_run_charts_each_task_and_their_mean():
    from trainer import finetune
    from trainer.finetune.config import mix_task_names

    config = FinetuneConfig(checkpoint="c", dataset="d", source_prefix="summarize: ",
                            extra_datasets=[{"dataset": "e", "prefix": "classify: "}, {"dataset": "f", "name": "nli"}])
    names = mix_task_names(config.to_dict())
    assert names == ["summarize", "classify", "nli"]
    charts = {c["id"]: c for c in finetune.charts_for("text_to_text", mix_tasks=names)}
    assert [s["metric"] for s in charts["ft_mix_exact"]["series"]] == [
        "exact_match/summarize", "exact_match/classify", "exact_match/nli", "exact_match/mean"]
    assert "rouge_l/mean" in [s["metric"] for s in charts["ft_mix_rouge"]["series"]]
    assert "ft_mix_exact" not in {c["id"] for c in finetune.charts_for("text_to_text")}
    with pytest.raises(ConfigError, match="Two tasks of the mix are both called 'classify'"):
        FinetuneConfig(checkpoint="c", dataset="d", source_prefix="classify: ",
                       extra_datasets=[{"dataset": "e", "prefix": "classify: "}])
