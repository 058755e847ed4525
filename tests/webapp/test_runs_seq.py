"""Launching T5, GPT and ELMo from the form and the API: their presets, objectives and model
fields, the optimizer (Adafactor for T5) and AdamW's settings, refusals with a sentence (T5's
span corruption without sentinel tokens, GPT with NSP), YAML round trips, the dashboard's
language-model charts, and one real tiny run of each family through the worker's code."""
from __future__ import annotations

import io
import json
import os
import threading

import pytest
import yaml
from django.urls import reverse

from tests.webapp.runs_helpers import cache_dir, make_data, make_run, prepared_data
from trainer.config import RunConfig
from webapp.runs import execution
from webapp.runs.models import MetricPoint, Run, RunStatus

pytestmark = pytest.mark.django_db

TINY = {"max_steps": 20, "batch_size": 4, "seq_len": 32, "warmup_steps": 2, "eval_every": 10,
        "checkpoint_every": 10, "device": "cpu"}
NEW_OBJECTIVES = ("span_corruption", "prefix_lm", "t5_mlm", "deshuffle", "drop_tokens", "text_infilling",
                  "sentence_permutation", "clm", "bilm")
_lock = threading.Lock()


def tokenizer_for(owner, algorithm: str, *, extra_ids: int = 0, name: str = ""):
    """A ready tokenizer row of `owner` (no files) of an algorithm, with T5 sentinels or not."""
    _, tokenizer = make_data(owner, algorithm=algorithm, name=name or f"{algorithm}-{extra_ids}")
    tokenizer.extra_ids = extra_ids
    tokenizer.stats = {"vocab_size": 1000, "extra_ids": extra_ids}
    tokenizer.save()
    return tokenizer


def real_tokenizer(owner, algorithm: str, *, extra_ids: int = 0):
    """tokenizer_for with real files: a 1,000-token tokenizer and shards of the test corpus, built
    once per session into the test cache and linked into the row's folder."""
    tokenizer = tokenizer_for(owner, algorithm, extra_ids=extra_ids)
    corpus_dir, _ = prepared_data()
    cached = cache_dir() / f"tokenizer-{algorithm}-{extra_ids}"
    with _lock:
        if not (cached / "shards" / "valid").is_dir():
            from trainer.prep.shards import encode_corpus
            from tests.tokenizer_store import stored_tokenizer

            stored_tokenizer(corpus_dir, cached, algorithm=algorithm, vocab_size=1000, lowercase=True,
                            extra_ids=extra_ids)
            encode_corpus(corpus_dir, cached)
    for src, dst in ((corpus_dir, tokenizer.corpus.folder), (cached, tokenizer.folder)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            os.symlink(src, dst, target_is_directory=True)
    return tokenizer


def post_form(client, tokenizer, /, **changes):
    data = {"name": "seq run", "corpus": tokenizer.corpus_id, "tokenizer": tokenizer.id,
            "family": "t5", "preset": "t5-tiny", "objectives": ["span_corruption"], "max_steps": 120,
            "batch_size": 16, "seq_len": 64, "lr": 0.01, "warmup_steps": 10, "grad_accum": 1, "eval_every": 50,
            "checkpoint_every": 60, "masking": "dynamic", "seed": 3, "device": "cpu", "mask_prob": 0.15,
            "schedule": "inverse_sqrt", "weight_decay": 0.0, "clip_grad": 1.0, "eval_batches": 5, "log_every": 10,
            "precision": "auto", "num_threads": 0}
    data.update(changes)
    return client.post(reverse("runs:new"), {k: v for k, v in data.items() if v is not None})


def errors(response, field):
    return " ".join(response.context["form"].errors.get(field, []))


def api_launch(api, tokenizer, **payload):
    return api.post("/api/runs/", {"tokenizer": str(tokenizer.id), **TINY, **payload}, format="json")


# ---------------------------------------------------------------------------- the page
def test_the_new_run_page_offers_t5_gpt_and_elmo_with_their_settings(alice, alice_client):
    tokenizer_for(alice, "unigram", extra_ids=100)
    html = alice_client.get(reverse("runs:new")).content.decode()
    for name, label in (("t5", "T5"), ("gpt", "GPT"), ("elmo", "ELMo")):
        assert f'<option value="{name}">{label}</option>' in html
    for preset in ("t5-tiny", "t5-base", "gpt-tiny", "gpt2-small", "elmo-tiny", "elmo-small"):
        assert f'value="{preset}" data-family="{preset.split("-")[0].replace("gpt2", "gpt")}"' in html
    for objective in NEW_OBJECTIVES:
        assert f'data-objective="{objective}"' in html
    assert "Text infilling (BART)" in html and "mean length 3" in html
    assert 'data-families="t5"' in html and 'name="version"' in html and "v1.1 (gated-GELU, untied)" in html
    assert 'data-families="gpt"' in html and 'name="norm_placement"' in html and "Post-LN (GPT-1)" in html
    assert 'data-families="elmo"' in html and 'name="char_cnn"' in html
    assert 'name="optimizer"' in html and "Adafactor (T5)" in html and 'name="betas"' in html and 'name="eps"' in html
    assert "Inverse square root (T5)" in html and 'id="sentinel-warning"' in html
    assert 'data-algorithm="unigram" data-extra-ids="100"' in html
    registry = json.loads(html.split('id="registry-data" type="application/json">')[1].split("</script>")[0])
    archs = {a["name"]: a for a in registry["families"]}
    assert archs["t5"]["one_objective"] and archs["t5"]["default_objectives"] == ["span_corruption"]
    assert "mask_prob" in archs["gpt"]["hidden_fields"] and "packing" in archs["t5"]["hidden_fields"]
    assert "64 → 17" in archs["t5"]["seq_len_help"]


# ---------------------------------------------------------------------------- the API
def test_api_launches_each_new_family_with_its_papers_optimizer(alice, alice_api, enqueued):
    tokenizers = {"t5": tokenizer_for(alice, "unigram", extra_ids=100), "gpt": tokenizer_for(alice, "bpe"),
                  "elmo": tokenizer_for(alice, "wordpiece")}
    expected = {
        "t5": (["span_corruption"], "adafactor", 0.01, "inverse_sqrt", 0.0),
        "gpt": (["clm"], "adamw", 6e-4, "cosine", 0.1),
        "elmo": (["bilm"], "adamw", 1e-3, "constant", 0.0),
    }
    for arch, (objectives, optimizer, lr, schedule, wd) in expected.items():
        response = api_launch(alice_api, tokenizers[arch], family=arch)
        assert response.status_code == 201, (arch, response.json())
        config = response.json()["config"]
        assert (config["preset"], config["objectives"], config["masking_unit"]) == (f"{arch}-tiny", objectives, "token")
        assert (config["optimizer"], config["lr"], config["schedule"], config["weight_decay"]) == (
            optimizer, lr, schedule, wd)
    assert sorted(Run.objects.filter(status=RunStatus.QUEUED).values_list("family", flat=True)) == [
        "elmo", "gpt", "t5"]
    gpt = Run.objects.get(family="gpt").config
    assert gpt["betas"] == [0.9, 0.95] and gpt["eps"] == 1e-8  # GPT-3 Small's Adam


def test_api_takes_the_families_options(alice, alice_api, enqueued):
    t5 = tokenizer_for(alice, "unigram", extra_ids=100)
    response = api_launch(alice_api, t5, family="t5", objectives=["text_infilling"], version="1.1",
                          optimizer="adamw", betas=[0.9, 0.98], eps=1e-8)
    assert response.status_code == 201, response.json()
    config = response.json()["config"]
    assert config["objectives"] == ["text_infilling"] and config["model_overrides"] == {"version": "1.1"}
    assert (config["optimizer"], config["betas"], config["eps"]) == ("adamw", [0.9, 0.98], 1e-8)
    response = api_launch(alice_api, tokenizer_for(alice, "bpe"), family="gpt", norm_placement="post")
    assert response.status_code == 201 and response.json()["config"]["model_overrides"] == {"norm_placement": "post"}
    response = api_launch(alice_api, tokenizer_for(alice, "unigram", name="sp"), family="elmo", char_cnn=True)
    assert response.status_code == 201 and response.json()["config"]["model_overrides"] == {"char_cnn": True}
    # T5's other objectives need no sentinels
    response = api_launch(alice_api, tokenizer_for(alice, "unigram", name="plain"), family="t5",
                          objectives=["deshuffle"])
    assert response.status_code == 201, response.json()
    # an encoder family may choose Adafactor too
    bert = api_launch(alice_api, tokenizer_for(alice, "wordpiece", name="wp"), optimizer="adafactor")
    assert bert.status_code == 201 and bert.json()["config"]["optimizer"] == "adafactor"


@pytest.mark.parametrize("tokenizer_kind, payload, message", [
    (("unigram", 0), {"family": "t5"},
     "Span corruption (T5) replaces each noise span by a sentinel token (<extra_id_0>, <extra_id_1>, ...), and this "
     "tokenizer has none"),
    (("bpe", 0), {"family": "gpt", "objectives": ["clm", "nsp"]},
     "GPT is a decoder-only causal language model: it reads left to right and predicts the next token, with no [CLS] "
     "classifier for next sentence prediction (NSP)"),
    (("bpe", 0), {"family": "gpt", "objectives": ["mlm"]}, "GPT's causal mask hides every later token"),
    (("wordpiece", 0), {"family": "gpt"}, "GPT needs a bpe tokenizer; this one is wordpiece. Train a Byte-level"),
    (("unigram", 100), {"family": "t5", "objectives": ["span_corruption", "t5_mlm"]},
     "T5 trains one objective per run"),
    (("wordpiece", 0), {"family": "elmo", "objectives": ["bilm", "mlm"]}, "ELMo's LSTMs each read in one"),
    (("wordpiece", 0), {"family": "elmo", "masking_unit": "word"}, "masking_unit applies to masked-LM"),
    (("unigram", 100), {"family": "t5", "version": "2.0"}, "version"),
    (("unigram", 100), {"family": "t5", "optimizer": "sgd"}, "optimizer"),
    (("unigram", 100), {"family": "t5", "betas": [0.9]}, "betas"),
    (("bpe", 0), {"family": "gpt", "seq_len": 1024}, "seq_len must be between 16 and the model's 256"),
])
def test_api_refuses_what_the_new_families_cannot_train(alice, alice_api, enqueued, tokenizer_kind, payload, message):
    algorithm, extra_ids = tokenizer_kind
    response = api_launch(alice_api, tokenizer_for(alice, algorithm, extra_ids=extra_ids), **payload)
    assert response.status_code == 400
    assert message in response.json()["error"], response.json()
    assert not Run.objects.exists()


# ---------------------------------------------------------------------------- the form
def test_the_form_launches_t5_with_adafactor_and_gpt_with_its_adamw_settings(alice, alice_client, enqueued):
    t5 = tokenizer_for(alice, "unigram", extra_ids=100)
    response = post_form(alice_client, t5, optimizer="", betas="", eps="", version="1.1")
    assert response.status_code == 302, response.context["form"].errors
    config = Run.objects.get().config
    assert (config["optimizer"], config["schedule"], config["lr"]) == ("adafactor", "inverse_sqrt", 0.01)
    assert config["model_overrides"] == {"version": "1.1"} and config["masking_unit"] == "token"
    gpt = tokenizer_for(alice, "bpe")
    response = post_form(alice_client, gpt, family="gpt", preset="gpt-tiny", objectives=["clm"], lr=6e-4,
                         schedule="cosine", optimizer="adamw", betas="0.9, 0.95", eps=1e-8, norm_placement="post",
                         name="gpt run")
    assert response.status_code == 302, response.context["form"].errors
    config = Run.objects.get(name="gpt run").config
    assert (config["optimizer"], config["betas"], config["eps"]) == ("adamw", [0.9, 0.95], 1e-8)
    assert config["model_overrides"] == {"norm_placement": "post"}
    # empty betas and eps: GPT's paper values
    response = post_form(alice_client, gpt, family="gpt", preset="gpt-tiny", objectives=["clm"], lr=6e-4,
                         schedule="cosine", optimizer="", betas="", eps="", name="gpt defaults")
    assert response.status_code == 302, response.context["form"].errors
    config = Run.objects.get(name="gpt defaults").config
    assert (config["optimizer"], config["betas"], config["eps"]) == ("adamw", [0.9, 0.95], 1e-8)
    elmo = tokenizer_for(alice, "wordpiece")
    response = post_form(alice_client, elmo, family="elmo", preset="elmo-tiny", objectives=["bilm"], lr=1e-3,
                         schedule="constant", char_cnn="True", name="elmo run")
    assert response.status_code == 302, response.context["form"].errors
    assert Run.objects.get(name="elmo run").config["model_overrides"] == {"char_cnn": True}


@pytest.mark.parametrize("tokenizer_kind, changes, field, message", [
    (("unigram", 0), {}, "tokenizer",
     "Span corruption (T5) replaces each noise span by a sentinel token (<extra_id_0>, <extra_id_1>, ...), and this "
     "tokenizer has none; train a Unigram"),
    (("bpe", 0), {"family": "gpt", "preset": "gpt-tiny", "objectives": ["clm", "nsp"]}, "objectives",
     "GPT is a decoder-only causal language model"),
    (("unigram", 100), {"objectives": ["span_corruption", "prefix_lm"]}, "objectives",
     "T5 trains one objective per run"),
    (("unigram", 100), {"betas": "0.9"}, "betas", "Give two numbers separated by a comma, like 0.9, 0.999."),
    (("unigram", 100), {"version": "2.0"}, "version", "Select a valid choice"),
    (("unigram", 100), {"family": "gpt", "preset": "gpt-tiny", "objectives": ["clm"]}, "tokenizer",
     "GPT needs a bpe tokenizer; this one is unigram."),
])
def test_the_form_refuses_mistakes_on_the_right_field(alice, alice_client, enqueued, tokenizer_kind, changes, field,
                                                       message):
    algorithm, extra_ids = tokenizer_kind
    response = post_form(alice_client, tokenizer_for(alice, algorithm, extra_ids=extra_ids), **changes)
    assert response.status_code == 200
    assert message in errors(response, field), response.context["form"].errors
    assert not Run.objects.exists()


# ---------------------------------------------------------------------------- YAML
def test_yaml_export_and_import_keep_t5s_optimizer_and_version(alice, alice_client, enqueued):
    tokenizer = tokenizer_for(alice, "unigram", extra_ids=100)
    config = RunConfig(family="t5", preset="t5-tiny", objectives=["sentence_permutation"],
                       model_overrides={"version": "1.1", "d_model": 32}, lr=0.01, schedule="inverse_sqrt",
                       weight_decay=0.0, **TINY)
    run = make_run(alice, tokenizer=tokenizer, name="t5", family="t5", preset="t5-tiny",
                   objectives=["sentence_permutation"], config=config.to_dict())
    exported = alice_client.get(reverse("runs:config-yaml", args=[run.id]))
    data = yaml.safe_load(exported.content)
    assert (data["optimizer"], data["schedule"], data["model_overrides"]["version"]) == ("adafactor", "inverse_sqrt", "1.1")
    upload = io.BytesIO(exported.content)
    upload.name = "t5.yaml"
    form = alice_client.post(reverse("runs:new"), {"config_file": upload}).context["form"]
    assert form["family"].value() == "t5" and form["version"].value() == "1.1"
    assert form["optimizer"].value() == "adafactor" and form["schedule"].value() == "inverse_sqrt"
    assert "0.9, 0.999" in str(form["betas"])
    assert json.loads(form["extra_settings"].value())["model_overrides"] == {"d_model": 32}


# ---------------------------------------------------------------------------- dashboard
@pytest.mark.parametrize("family, objectives, charts, absent", [
    ("t5", ["span_corruption"], ["loss", "lm_acc", "perplexity"], ["mlm_acc", "nsp_acc", "elmo_perplexity"]),
    ("t5", ["deshuffle"], ["lm_acc", "perplexity"], ["mlm_acc"]),
    ("gpt", ["clm"], ["loss", "lm_acc", "perplexity"], ["mlm_acc", "elmo_perplexity"]),
    ("elmo", ["bilm"], ["loss", "elmo_perplexity", "elmo_loss", "elmo_acc"], ["mlm_acc", "lm_acc", "perplexity"]),
    ("bert", ["mlm", "nsp"], ["mlm_acc", "nsp_acc"], ["lm_acc", "elmo_perplexity"]),
])
def test_the_dashboard_charts_the_language_models_metrics(alice, alice_client, family, objectives, charts,
                                                           absent):
    run = make_run(alice, family=family, objectives=objectives, status=RunStatus.RUNNING)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    for chart in charts:
        assert f'id="chart-{chart}"' in html
    for chart in absent:
        assert f'id="chart-{chart}"' not in html
    assert ('data-stat="forward_perplexity"' in html) == (family == "elmo")
    assert ('data-stat="lm_acc"' in html) == (family in ("t5", "gpt"))


# ---------------------------------------------------------------------------- real runs
@pytest.mark.parametrize("family, algorithm, extra_ids, keys", [
    ("t5", "unigram", 100, {"lm_loss", "lm_acc"}),
    ("gpt", "bpe", 0, {"lm_loss", "lm_acc"}),
    ("elmo", "wordpiece", 0, {"forward_loss", "backward_loss", "forward_acc", "backward_acc"}),
])
def test_a_launched_run_of_each_family_trains_in_the_worker(alice, alice_api, enqueued, family, algorithm,
                                                            extra_ids, keys):
    tokenizer = real_tokenizer(alice, algorithm, extra_ids=extra_ids)
    response = api_launch(alice_api, tokenizer, family=family, max_steps=4, warmup_steps=1, eval_every=4,
                          eval_batches=2, checkpoint_every=4, num_threads=1)  # one thread: quick on a busy CPU
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    execution.run_execute(run_id=run.id)  # what the Celery task does
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.current_step == 4 and run.tokens_seen > 0
    train = MetricPoint.objects.filter(run=run, split="train").order_by("step")
    assert train.count() >= 2 and keys <= set(train.first().values)
    valid = MetricPoint.objects.get(run=run, split="valid", step=4).values
    assert "perplexity" in valid and keys <= set(valid)
    assert [c.step for c in run.checkpoints.all()] == [4]
    html = alice_api.get(f"/api/runs/{run.id}/").json()
    assert html["last_checkpoint"]["step"] == 4
