"""Each fine-tuning task type end to end (issue 9, point 9), with real processes: the task's demo
dataset created and ingested through the API, a fine-tuning run launched with POST /api/finetune/
on a tiny checkpoint of the right family, trained by the live stack's Celery worker, and its test
split scored clearly above chance, read back over HTTP (token auth) from GET /api/runs/<id>/, the
test report and the test predictions.

The base checkpoints are the suite's real tiny ones on the standard-library corpus's 1,000-token
WordPiece tokenizer (the one the demo datasets' text comes from), registered as rows of the test
database that the live stack shares: BERT is runs_helpers' 20-step pre-trained bert-tiny (hidden
64, two layers); GPT and ELMo are tiny random models of inference_generate_helpers (hidden 32,
two layers); T5 is a random t5-tiny (d_model 64, d_ff 256, four heads of 16, two + two layers,
dropout 0.1), built here (tiny_t5), since inference_generate_helpers' T5 (d_model 32, no dropout)
stayed below chance on text to text: test ROUGE-L 0.111 / 0.120 / 0.102 at seeds 0/1/2 after 300
steps, and at seed 0 a validation ROUGE-L that fell from 0.131 (300 steps) to 0.080 (1,500 steps)
as it learnt the train split by heart. Every run sends seed 0 (FinetuneConfig's default) and
num_threads 1 (the worker trains two runs at once), so each threshold below was set from that
setting trained in-process (trainer.finetune.engine.finetune, one thread) at seeds 0, 1 and 2 (the
values in the comments, "seeds 0/1/2"); the worst of them clears the threshold with room. The
tokenizer is the stored one (tests/tokenizer_store.py: the library's trainer breaks ties in a
different order in each process, about 90 of the 1,000 ids and a token or two apart), so every
session fine-tunes the same start; the values below also include seed 0 on three other builds of
the tokenizer (and of the bases on it), which vary about as much as the seeds do, for the margin.

Chance levels come from the test split's gold: the most frequent label's share (classification),
the best fixed label set given to every example (multi-label, by micro F1: every subset of the
labels tried), the best single fixed output (text to text, by ROUGE-L: the most common target,
strings of the targets' most frequent words, and FIXED_OUTPUT, a word string searched for on these
targets), and so on per task in CHECKS.

tests/e2e/calibrate_finetune_tasks.py trains any of these runs in-process at chosen seeds and settings
and prints each one's metric beside its bound. Fewer steps were tried with it (2026-12-03, seeds 0/1/2,
all failing their bounds): text to text at 600 steps 0.284 / 0.300 / 0.258 (bound 0.263); multi-label
at 800 steps and lr 5e-3 0.449 / 0.502 / 0.444 (bound 0.744); extractive QA at 150 steps 0.280 /
0.266 / 0.273 (bound 0.460; at 300 steps 0.699). Its batches hold 60-135 windows of 64 tokens (each
question's context in several windows), so its steps cost about 4x the others'.

Sentence pairs came in last: the old pair demo (a module's consecutive paragraphs against a random
paragraph of another module) left this file's 20-step BERT at 0.56-0.57 against 0.5. Its
replacement, sentence-order prediction on a docstring's first two paragraphs, is learnt (see CHECKS).
"""
from __future__ import annotations

import itertools
import json
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest
import requests

from tests.livestack import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DONE = {"succeeded", "failed", "crashed", "cancelled"}
# Every run: the seed the thresholds were calibrated at, and one thread (the worker trains two runs at once).
RUNTIME = dict(seed=0, num_threads=1)
ENCODER = dict(max_length=64, max_steps=300, batch_size=32, lr=2e-3, warmup_ratio=0.1, eval_every=300)
GENERATIVE = dict(ENCODER, lr=3e-3, max_target_length=32, samples_shown=0)

# task -> (demo dataset, base family, settings); the checks are in CHECKS below. The longest runs first:
# the worker takes them in this order, two at a time.
TASKS = {
    # The source cut to 32 tokens (the first sentence is at its start; its median is 27 tokens) and a high
    # lr. Test ROUGE-L at seed 0 otherwise: 0.209 (max_length 64, lr 3e-3, 900 steps; 0.162 with d_model 128),
    # 0.304 (max_length 64, lr 1e-2, 900 steps), 0.249 (the same at 600 steps), 0.113 (lr 2e-2, 600 steps).
    "text_to_text": ("text_to_text", "t5", dict(GENERATIVE, max_length=32, max_steps=900, lr=1e-2, eval_every=900)),
    # 2,000 steps: at 1,000 some starts had not yet learnt the rarer topics (see CHECKS).
    "multilabel": ("multilabel", "bert", dict(ENCODER, max_steps=2000, eval_every=2000)),
    "extractive_qa": ("extractive_qa", "bert", ENCODER),
    "classification": ("classification", "bert", ENCODER),
    "pair_classification": ("pair_classification", "bert", ENCODER),
    "regression": ("regression", "bert", ENCODER),
    "token_classification": ("token_classification", "bert", ENCODER),
    "sft": ("sft", "gpt", GENERATIVE),
    "gpt1_classification": ("classification", "gpt", ENCODER),  # GPT-1's classifier (trainer/finetune/gpt1.py)
    # GENERATIVE's lr; ELMo's classifier generates nothing, so the API refuses its generation settings.
    "elmo_classification": ("classification", "elmo", dict(ENCODER, lr=3e-3)),
}


# ---------------------------------------------------------------- chance levels, from the test split's gold
def majority_share(gold: list) -> float:
    """Accuracy of always answering the test split's most frequent label."""
    return Counter(json.dumps(g) for g in gold).most_common(1)[0][1] / len(gold)


def unanswerable_share(gold: list[list[str]]) -> float:
    """SQuAD 2.0 F1 of always answering "no answer": the share of unanswerable questions."""
    return sum(1 for answers in gold if not answers) / len(gold)


def best_fixed_label_set(gold: list[list[str]]) -> float:
    """The best micro F1 of one label set given to every example: every subset of the labels tried."""
    from trainer.finetune.metrics import multilabel_metrics

    labels = sorted({label for row in gold for label in row})
    subsets = (set(s) for k in range(len(labels) + 1) for s in itertools.combinations(labels, k))
    return max(multilabel_metrics([s] * len(gold), gold)["f1_micro"] for s in subsets)


# One fixed output for every first sentence, found by a greedy search (insert, delete or replace one of
# the targets' 40 most frequent words while ROUGE-L rises) on this test split's targets: ROUGE-L 0.205.
FIXED_OUTPUT = "if the be is a and used to for the a in of the"


def best_fixed_output(gold: list[str]) -> float:
    """The best ROUGE-L of one output given to every example: the most common target, the targets'
    k most frequent words (k = 1 to 15, most frequent first) and FIXED_OUTPUT."""
    from trainer.finetune.metrics import text_to_text_metrics

    words = [w for w, _ in Counter(w for target in gold for w in re.findall(r"[a-z0-9]+", target.lower()))
             .most_common(15)]
    outputs = [Counter(gold).most_common(1)[0][0], FIXED_OUTPUT, *(" ".join(words[:k]) for k in range(1, 16))]
    return max(text_to_text_metrics([output] * len(gold), gold)["rouge_l"] for output in outputs)


# task -> (metric, chance level from the test split's gold answers, margin above it). The seeds' values are
# at one thread (num_threads 1, as the runs here); the older ones, at torch's default threads, are in brackets.
CHECKS = {
    # The best fixed output scores 0.205 (FIXED_OUTPUT; the most frequent words: at most 0.162; the most
    # common target: 0.021). ROUGE-L seeds 0/1/2: 0.341 / 0.330 / 0.329; seed 0 on three other tokenizer
    # builds: 0.338 / 0.328 / 0.409 (1,200 steps would give 0.357 / 0.342 / 0.367 and 0.408 / 0.359 / 0.371).
    # This test's live stack (2026-12-02, two runs, identical): 0.342, bound 0.205 + 0.07 = 0.275: margin 0.067.
    "text_to_text": ("rouge_l", best_fixed_output, 0.07),
    # Five keyword topics; the best fixed label set, {returns, text}, has micro F1 0.521. Seeds 0/1/2:
    # 0.926 / 0.948 / 0.947; seed 0 on three other tokenizer builds: 0.925 / 0.955 / 0.890. At 1,000 steps
    # seeds 0/1/2 gave 0.792 / 0.918 / 0.903 and seed 0 on other builds 0.958 / 0.846 / 0.791, and 0.709 in
    # this file; at 300 steps, 0.862 / 0.691 / 0.625.
    # This test's live stack (2026-12-02, two runs, identical): 0.937, bound 0.521 + 0.25 = 0.771: margin 0.166.
    "multilabel": ("f1_micro", best_fixed_label_set, 0.25),
    # 5 packages; majority share 0.257 (asyncio or xml, 26 of 101). Accuracy seeds 0/1/2: 0.673 / 0.753 / 0.634
    # (0.634 / 0.693 / 0.545); seed 0 on the other tokenizer builds: 0.614 / 0.594 / 0.604.
    # This test's live stack (2026-12-02, two runs, identical): 0.733, bound 0.257 + 0.15 = 0.407: margin 0.325.
    "classification": ("accuracy", majority_share, 0.15),
    # A docstring's first two paragraphs in order or swapped; majority share about 0.52 (in_order). Accuracy
    # seeds 0/1/2: 0.850 / 0.842 / 0.857; the same three seeds on two other tokenizer builds: 0.850 / 0.850 /
    # 0.857 and 0.887 / 0.865 / 0.842 (max_length 128 instead: 0.827 to 0.857).
    # This test's live stack (2026-12-02, two runs, identical): 0.865, bound 0.519 + 0.2 = 0.719: margin 0.146.
    "pair_classification": ("accuracy", majority_share, 0.2),
    # A constant predicts with Pearson 0. Seeds 0/1/2: 0.743 / 0.739 / 0.799 (0.793 / 0.775 / 0.794); other
    # tokenizer builds: 0.782 / 0.784 / 0.756.
    # This test's live stack (2026-12-02, two runs, identical): 0.787, bound 0.5: margin 0.287.
    "regression": ("pearson", lambda gold: 0.0, 0.5),
    # Tagging every word "O" finds no entity: entity F1 0. Seeds 0/1/2: 0.292 / 0.267 / 0.286 (0.260 / 0.251 / 0.258);
    # other tokenizer builds: 0.290 / 0.302 / 0.266.
    # This test's live stack (2026-12-02, two runs, identical): 0.284, bound 0.15: margin 0.134.
    "token_classification": ("entity_f1", lambda gold: 0.0, 0.15),
    # Always "no answer" scores the unanswerable share: 0.260 (19 of 73). F1 seeds 0/1/2: 0.684 / 0.664 / 0.735
    # (seeds 0/1: 0.673 / 0.641); other tokenizer builds: 0.702 / 0.674 / 0.641.
    # This test's live stack (2026-12-02, two runs, identical): 0.699, bound 0.260 + 0.2 = 0.460: margin 0.239.
    "extractive_qa": ("f1", unanswerable_share, 0.2),
    # A model that knows nothing gives each of the tokenizer's 1,000 tokens 1/1000: perplexity 1000 (lower is
    # better; it must be under 400). Seeds 0/1/2: 182.8 / 191.3 / 198.5 (seed 0: 177.8); other tokenizer
    # builds: 176.6 / 167.5 / 166.4.
    # This test's live stack (2026-12-02, two runs, identical): 168.8, bound 400: margin 231.
    "sft": ("perplexity", lambda gold: 1000.0, 600.0),
    # ELMo's features (the random tiny biLM frozen, a scalar mix, a BiLSTM): the same majority share, 0.257.
    # Seeds 0/1/2: 0.465 / 0.406 / 0.446 (0.436 / 0.505 / 0.475); other tokenizer builds: 0.446 / 0.416 / 0.416.
    # This test's live stack (2026-12-02, two runs, identical): 0.416, bound 0.257 + 0.1 = 0.357: margin 0.058
    # (the seeds' lowest, 0.406: 0.049).
    "elmo_classification": ("accuracy", majority_share, 0.1),
    # GPT-1's classifier (start, text, extract; the auxiliary LM loss, length-grouped batches as every task
    # here) on the tiny GPT: the same majority share, 0.257. Seeds 0/1/2: 0.733 / 0.762 / 0.772; seed 0 on
    # three other tokenizer builds: 0.782 / 0.782 / 0.753.
    # This test's live stack (2026-12-02, two runs, identical): 0.752, bound 0.257 + 0.35 = 0.607: margin 0.145.
    "gpt1_classification": ("accuracy", majority_share, 0.35),
}


# ---------------------------------------------------------------- base checkpoints
def base_folder(family: str) -> Path:
    """The folder of the suite's tiny `family` checkpoint (see the module's doc), built into the
    test cache on first use."""
    from tests.trainer.inference_generate_helpers import make_checkpoint as write_checkpoint
    from tests.webapp.runs_helpers import cache_dir, prepared_data, trained_checkpoints

    if family == "bert":
        return trained_checkpoints()[-1][1]
    source = cache_dir() / f"fte2e-{family}"
    if not (source / "model_config.json").is_file():
        tmp = source.with_name(source.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if family == "t5":
            tiny_t5(tmp, prepared_data()[1])
        else:
            write_checkpoint(family, tmp, prepared_data()[1])
        tmp.rename(source)
    return source


def base_checkpoint(owner, family: str):
    """A Checkpoint row of `owner`'s: a copy of base_folder(family)."""
    from django.conf import settings

    from tests.webapp.runs_helpers import make_checkpoint, make_run
    from webapp.runs.models import Checkpoint, RunStatus

    if family == "bert":
        return make_checkpoint(make_run(owner, status=RunStatus.SUCCEEDED, name="tiny bert"), step=20, real=True)
    run = make_run(owner, status=RunStatus.SUCCEEDED, name=f"tiny {family}", family=family)
    rel = Path("runs") / str(run.id) / "checkpoints" / "step-00000010"
    shutil.copytree(base_folder(family), Path(settings.STORAGE_ROOT) / rel)
    return Checkpoint.objects.create(run=run, step=10, path=str(rel), metrics={})


def tiny_t5(folder: Path, tokenizer_dir: Path) -> Path:
    """A random t5-tiny (its preset: d_model 64, d_ff 256, four heads of 16, two + two layers, dropout
    0.1) for the tokenizer, saved by inference_generate_helpers.make_checkpoint."""
    import torch

    from models_lib.families.t5 import T5Config, T5ForConditionalGeneration
    from tests.trainer.inference_generate_helpers import make_checkpoint
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    torch.manual_seed(0)
    config = T5Config.from_preset("t5-tiny", vocab_size=tok.vocab_size, pad_token_id=tok.pad_id,
                                  eos_token_id=tok.sep_id, dropout_rate=0.1)
    return make_checkpoint("t5", folder, tokenizer_dir, model=T5ForConditionalGeneration(config).eval())


# ---------------------------------------------------------------- all runs at once (the worker trains two at a time)
@pytest.fixture(scope="module")
def finished(live_stack, django_db_blocker):
    """{task: (the run, its test report, the gold answers of its test predictions)} once every run has ended."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    api = live_stack.url + "/api"
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user(username="fte2e", password="fte2e-password-123")
        s = requests.Session()
        s.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
        bases = {family: str(base_checkpoint(user, family).id) for family in {f for _, f, _ in TASKS.values()}}

    datasets = {}
    for demo in {d for d, _, _ in TASKS.values()}:
        r = s.post(f"{api}/datasets/demos/", json={"name": demo})
        assert r.status_code == 201, r.text
        datasets[demo] = r.json()["id"]
    for demo, dataset_id in datasets.items():
        ready = wait_for(s, f"{api}/datasets/{dataset_id}/", "status", {"ready", "failed"}, 180, live_stack)
        assert ready["status"] == "ready", (demo, ready)

    runs, pending = {}, list(TASKS)
    deadline = time.time() + 600
    while pending and time.time() < deadline:  # at most MAX_ACTIVE_RUNS_PER_USER (8) queued or running at once
        task = pending[0]
        demo, family, training = TASKS[task]
        r = s.post(f"{api}/finetune/", json={"checkpoint": bases[family], "dataset": datasets[demo],
                                             "name": task, "device": "cpu", **RUNTIME, **training})
        if r.status_code == 429:
            time.sleep(1)
            continue
        assert r.status_code == 201, (task, r.text)
        runs[task] = r.json()["id"]
        pending.pop(0)
    assert not pending, pending

    out = {}
    for task, run_id in runs.items():
        run = wait_for(s, f"{api}/runs/{run_id}/", "status", DONE, 600, live_stack)
        report = s.get(f"{api}/runs/{run_id}/test-report/")
        predictions = s.get(f"{api}/runs/{run_id}/predictions.jsonl")
        gold = [json.loads(line)["gold"] for line in predictions.text.splitlines() if line.strip()] \
            if predictions.status_code == 200 else []
        out[task] = (run, report.json() if report.status_code == 200 else {"error": report.text}, gold)
    yield out, live_stack


@pytest.mark.parametrize("task", list(TASKS))
def test_the_task_trains_on_a_real_worker_and_beats_chance_on_its_test_split(finished, task):
    results, stack = finished
    run, report, gold = results[task]
    assert run["status"] == "succeeded", (task, run, stack.logs())
    assert run["kind"] == "finetune", run
    metric, chance_of, margin = CHECKS[task]
    assert "metrics" in report, (task, report)
    value = report["metrics"][metric]
    assert gold or task == "sft", (task, "no test predictions")
    chance = chance_of(gold)
    if metric == "perplexity":  # lower is better
        assert value < chance - margin, (task, metric, value, chance, report["metrics"])
    else:
        assert value > chance + margin, (task, metric, value, chance, report["metrics"])
