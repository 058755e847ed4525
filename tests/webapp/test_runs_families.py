"""Launching every encoder family from the form and the API: family settings, the tokenizer's
algorithm, DistilBERT's teacher (one of the owner's BERT checkpoints), refusals with a
sentence, YAML export/import of the new fields, and the dashboard's family charts.

Training is not run here (test_runs_training.py and tests/e2e/test_families.py train for real)."""
from __future__ import annotations

import io
import json
import shutil

import pytest
import yaml
from django.urls import reverse

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from trainer.config import RunConfig
from webapp.runs.models import Checkpoint, CheckpointSource, Run, RunStatus

pytestmark = pytest.mark.django_db


TINY = {"max_steps": 20, "batch_size": 4, "seq_len": 32, "warmup_steps": 2, "eval_every": 10,
        "checkpoint_every": 10, "device": "cpu"}


def post_form(client, tokenizer, /, **changes):
    data = {"name": "family run", "corpus": tokenizer.corpus_id, "tokenizer": tokenizer.id,
            "family": "bert", "preset": "bert-tiny", "objectives": ["mlm", "nsp"], "max_steps": 120,
            "batch_size": 16, "seq_len": 64, "lr": 1e-4, "warmup_steps": 10, "grad_accum": 1, "eval_every": 50,
            "checkpoint_every": 60, "masking": "dynamic", "seed": 3, "device": "cpu", "mask_prob": 0.15,
            "schedule": "linear", "weight_decay": 0.01, "clip_grad": 1.0, "eval_batches": 5, "log_every": 10,
            "precision": "auto", "num_threads": 0}
    data.update(changes)
    return alice_post(client, {k: v for k, v in data.items() if v is not None})


def alice_post(client, data):
    return client.post(reverse("runs:new"), data)


def errors(response, field):
    return " ".join(response.context["form"].errors.get(field, []))


def bert_teacher(owner, *, tokenizer=None):
    """A real BERT checkpoint of `owner` (hidden 64, 2 layers), of a run on `tokenizer`."""
    corpus, tokenizer = (tokenizer.corpus, tokenizer) if tokenizer else make_data(owner, real=True)
    run = make_run(owner, corpus=corpus, tokenizer=tokenizer, status=RunStatus.SUCCEEDED)
    return make_checkpoint(run, step=20, real=True)


# ---------------------------------------------------------------------------- the page
def test_the_new_run_page_offers_every_family_with_its_settings(alice, alice_client):
    corpus, tokenizer = make_data(alice)
    teacher = make_checkpoint(make_run(alice, corpus=corpus, tokenizer=tokenizer), step=10)
    html = alice_client.get(reverse("runs:new")).content.decode()
    for name, label in (("roberta", "RoBERTa"), ("albert", "ALBERT"), ("spanbert", "SpanBERT"),
                        ("electra", "ELECTRA"), ("distilbert", "DistilBERT"), ("unilm", "UniLM")):
        assert f'<option value="{name}">{label}</option>' in html
        assert f'data-family="{name}"' in html  # its presets
    for objective in ("sop", "sbo", "rtd", "distill", "unilm"):
        assert f'data-objective="{objective}"' in html
    assert 'name="masking_unit"' in html and "Whole words (BERT-wwm)" in html and 'name="packing"' in html
    assert 'data-families="electra"' in html and 'name="generator_size"' in html and 'name="rtd_weight"' in html
    assert 'data-families="albert"' in html and 'name="share_layers"' in html
    assert 'data-families="distilbert"' in html and 'name="teacher_checkpoint"' in html
    assert f'value="{teacher.id}" data-tokenizer="{tokenizer.id}"' in html
    assert 'data-algorithm="wordpiece"' in html and 'id="tokenizer-warning"' in html
    registry = json.loads(html.split('id="registry-data" type="application/json">')[1].split("</script>")[0])
    assert {a["name"] for a in registry["families"]} >= {"roberta", "albert", "electra", "distilbert"}


def test_the_corpus_page_offers_the_tokenizer_algorithms_the_families_need(alice, alice_client):
    corpus, _ = make_data(alice)
    html = alice_client.get(reverse("corpora:detail", args=[corpus.id])).content.decode()
    for algorithm in ("wordpiece", "bpe", "unigram"):
        assert f'value="{algorithm}"' in html


# ---------------------------------------------------------------------------- the form
def test_roberta_from_the_form_takes_its_papers_adam_settings(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice, algorithm="bpe")
    response = post_form(alice_client, tokenizer, family="roberta", preset="roberta-tiny", objectives=["mlm"],
                         packing="doc-sentences", masking_unit="word")
    assert response.status_code == 302, response.context["form"].errors
    config = Run.objects.get().config
    assert config["family"] == "roberta" and config["betas"] == [0.9, 0.98] and config["eps"] == 1e-6
    assert (config["packing"], config["masking_unit"]) == ("doc-sentences", "word")


def test_the_form_refuses_a_tokenizer_of_the_wrong_algorithm_and_says_where_to_get_one(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)  # wordpiece
    response = post_form(alice_client, tokenizer, family="roberta", preset="roberta-tiny", objectives=["mlm"])
    assert response.status_code == 200
    message = errors(response, "tokenizer")
    assert "RoBERTa needs a bpe tokenizer; this one is wordpiece." in message
    assert "Train a Byte-level BPE (GPT-2, RoBERTa) tokenizer on the corpus" in message
    assert not Run.objects.exists()


@pytest.mark.parametrize("changes, field, message", [
    ({"family": "roberta", "preset": "roberta-tiny", "objectives": ["mlm", "nsp"]}, "objectives",
     "RoBERTa is trained without next sentence prediction (NSP)"),
    ({"packing": "doc-sentences"}, "packing", 'packing "doc-sentences" applies to single-segment inputs'),
    ({"masking_unit": "span"}, "masking_unit", "Span masking (masking_unit \"span\") belongs to SpanBERT"),
    ({"family": "spanbert", "preset": "spanbert-tiny", "objectives": ["mlm", "sbo"], "masking_unit": "word"},
     "masking_unit", "SpanBERT's span boundary objective (SBO) needs span masking"),
    ({"family": "electra", "preset": "electra-tiny", "objectives": ["mlm", "rtd"], "generator_size": 0.1},
     "generator_size", "greater than or equal to 0.25"),
    ({"family": "distilbert", "preset": "distilbert-tiny", "objectives": ["mlm", "distill"]},
     "teacher_checkpoint", "DistilBERT distils a trained BERT model: choose one of your BERT checkpoints"),
    ({"family": "albert", "preset": "albert-tiny", "objectives": ["mlm", "sop"], "share_layers": "some"},
     "share_layers", "Select a valid choice"),
])
def test_the_form_refuses_family_mistakes_on_the_right_field(alice, alice_client, enqueued, changes, field, message):
    _, tokenizer = make_data(alice, algorithm="unigram" if changes.get("family") == "albert" else "wordpiece")
    response = post_form(alice_client, tokenizer, **changes)
    assert response.status_code == 200
    assert message in errors(response, field), response.context["form"].errors
    assert not Run.objects.exists()


def test_family_settings_reach_the_config_and_other_families_settings_do_not(alice, alice_client, enqueued):
    _, wordpiece = make_data(alice)
    _, unigram = make_data(alice, algorithm="unigram", name="sp")
    response = post_form(alice_client, wordpiece, family="electra", preset="electra-tiny",
                         objectives=["mlm", "rtd"], generator_size=0.5, rtd_weight=20, share_layers="ffn")
    assert response.status_code == 302, response.context["form"].errors
    electra = Run.objects.get().config
    assert electra["model_overrides"] == {"generator_size": 0.5} and electra["rtd_weight"] == 20.0
    assert electra["lr"] == 1e-4  # the posted value (the page's script proposes the paper's on a change)
    response = post_form(alice_client, unigram, family="albert", preset="albert-tiny", objectives=["mlm", "sop"],
                         share_layers="attention", generator_size=0.5, rtd_weight=20, distill_temperature=4)
    assert response.status_code == 302, response.context["form"].errors
    albert = Run.objects.get(family="albert").config
    assert albert["model_overrides"] == {"share_layers": "attention"} and albert["masking_unit"] == "ngram"
    assert albert["rtd_weight"] == 50.0 and albert["distill_temperature"] == 2.0


def test_distilbert_from_the_form_with_a_bert_teacher_of_yours(alice, alice_client, enqueued):
    teacher = bert_teacher(alice)
    response = post_form(alice_client, teacher.run.tokenizer, family="distilbert", preset="distilbert-tiny",
                         objectives=["mlm", "distill"], teacher_checkpoint=teacher.id, distill_temperature=3)
    assert response.status_code == 302, response.context["form"].errors
    run = Run.objects.get(family="distilbert")
    assert run.config["teacher_checkpoint"] == str(teacher.folder) and run.config["distill_temperature"] == 3.0
    # the student's shape follows the teacher (hidden 64, 2 -> 1 layer): set for the user
    assert run.config["model_overrides"] == {"hidden_size": 64}  # FFN 4H follows


def test_distilbert_refuses_a_teacher_with_another_tokenizer_or_of_another_family(alice, alice_client, enqueued):
    teacher = bert_teacher(alice)
    tampered = teacher.folder / "tokenizer.json"
    tampered.write_text(tampered.read_text() + " ")
    response = post_form(alice_client, teacher.run.tokenizer, family="distilbert", preset="distilbert-tiny",
                         objectives=["mlm", "distill"], teacher_checkpoint=teacher.id)
    assert "The teacher was trained with another tokenizer" in errors(response, "teacher_checkpoint")
    other = bert_teacher(alice, tokenizer=teacher.run.tokenizer)
    meta = other.folder / "model_config.json"
    meta.write_text(meta.read_text().replace('"family": "bert"', '"family": "albert"'))
    response = post_form(alice_client, teacher.run.tokenizer, family="distilbert", preset="distilbert-tiny",
                         objectives=["mlm", "distill"], teacher_checkpoint=other.id)
    assert "holds a model of another family (ALBERT)" in errors(response, "teacher_checkpoint")
    assert not Run.objects.filter(family="distilbert").exists()


def test_only_your_bert_checkpoints_are_offered_as_teachers(alice, bob, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    mine = make_checkpoint(make_run(alice, tokenizer=tokenizer), step=10)
    roberta = make_checkpoint(make_run(alice, tokenizer=tokenizer, family="roberta"), step=10)
    bobs = make_checkpoint(make_run(bob), step=10)
    choices = {c.pk for c in alice_client.get(reverse("runs:new")).context["form"].fields["teacher_checkpoint"].queryset}
    assert choices == {mine.pk}
    response = post_form(alice_client, tokenizer, family="distilbert", preset="distilbert-tiny",
                         objectives=["mlm", "distill"], teacher_checkpoint=bobs.id)
    assert "Select a valid choice" in errors(response, "teacher_checkpoint")
    assert roberta.pk not in choices


# ---------------------------------------------------------------------------- the API
def test_api_launches_each_family_with_its_defaults(alice, alice_api, enqueued):
    _, wordpiece = make_data(alice)
    _, bpe = make_data(alice, algorithm="bpe", name="bpe")
    _, unigram = make_data(alice, algorithm="unigram", name="sp")
    tokenizers = {"wordpiece": wordpiece, "bpe": bpe, "unigram": unigram}
    expected = {"roberta": ("bpe", ["mlm"], "token"), "albert": ("unigram", ["mlm", "sop"], "ngram"),
                "spanbert": ("wordpiece", ["mlm", "sbo"], "span"), "electra": ("wordpiece", ["mlm", "rtd"], "token"),
                "unilm": ("wordpiece", ["mlm", "unilm"], "token")}
    for arch, (algorithm, objectives, unit) in expected.items():
        response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizers[algorithm].id), "family": arch,
                                                 **TINY}, format="json")
        assert response.status_code == 201, (arch, response.json())
        config = response.json()["config"]
        assert (config["preset"], config["objectives"], config["masking_unit"]) == (f"{arch}-tiny", objectives, unit)
    roberta = Run.objects.get(family="roberta").config
    assert roberta["betas"] == [0.9, 0.98] and roberta["lr"] == 6e-4
    assert Run.objects.get(family="electra").config["lr"] == 5e-4


@pytest.mark.parametrize("payload, message", [
    ({"family": "roberta", "objectives": ["mlm", "nsp"]}, "RoBERTa is trained without next sentence prediction"),
    ({"family": "roberta"}, "RoBERTa needs a bpe tokenizer; this one is wordpiece. Train a Byte-level BPE"),
    ({"objectives": ["mlm", "nsp"], "packing": "doc-sentences"}, 'packing "doc-sentences" applies to single-segment'),
    ({"family": "electra", "generator_size": 0.1}, "generator_size: Ensure this value is greater than or equal"),
    ({"family": "electra", "model_overrides": {"generator_size": 0.9}},
     "generator_size must be between 0.25 and 0.5 for ELECTRA"),
    ({"rtd_weight": 20}, "rtd_weight applies to ELECTRA only"),
    ({"family": "spanbert", "masking_unit": "token"}, "needs span masking"),
    ({"masking_unit": "syllable"}, "masking_unit"),
    ({"family": "distilbert"}, "DistilBERT distils a trained BERT teacher"),
    ({"family": "distilbert", "teacher_checkpoint": "/etc"}, "teacher_checkpoint must be one of your checkpoints"),
])
def test_api_refuses_family_mistakes_with_a_400_sentence(alice, alice_api, enqueued, payload, message):
    _, tokenizer = make_data(alice)
    response = alice_api.post("/api/runs/", {"tokenizer": str(tokenizer.id), **TINY, **payload}, format="json")
    assert response.status_code == 400
    assert message in response.json()["error"], response.json()
    assert not Run.objects.exists()


def test_api_distilbert_takes_a_teacher_id_of_yours_only(alice, bob, alice_api, bob_api, enqueued):
    teacher = bert_teacher(alice)
    payload = {"tokenizer": str(teacher.run.tokenizer_id), "family": "distilbert", **TINY,
               "teacher_checkpoint": str(teacher.id), "distill_cos_weight": 0.5}
    response = alice_api.post("/api/runs/", payload, format="json")
    assert response.status_code == 201, response.json()
    config = response.json()["config"]
    assert config["teacher_checkpoint"] == str(teacher.folder) and config["distill_cos_weight"] == 0.5
    assert config["objectives"] == ["mlm", "distill"] and config["model_overrides"]["hidden_size"] == 64
    _, bobs_tokenizer = make_data(bob)
    response = bob_api.post("/api/runs/", {**payload, "tokenizer": str(bobs_tokenizer.id)}, format="json")
    assert response.status_code == 400 and "not yours" in response.json()["error"]
    # the clone resolves the stored folder back to Alice's checkpoint
    clone = alice_api.post(f"/api/runs/{response_id(alice)}/clone/", {}, format="json")
    assert clone.status_code == 201, clone.json()


def response_id(owner) -> str:
    return str(Run.objects.filter(owner=owner, family="distilbert").get().id)


# ---------------------------------------------------------------------------- YAML
def test_yaml_export_and_import_keep_the_family_fields(alice, alice_client, enqueued):
    _, tokenizer = make_data(alice)
    config = RunConfig(family="electra", preset="electra-tiny", objectives=["mlm", "rtd"],
                       model_overrides={"hidden_size": 64, "num_heads": 2, "generator_size": 0.5}, rtd_weight=30.0,
                       masking_unit="word", **TINY)
    run = make_run(alice, tokenizer=tokenizer, name="electra", family="electra", preset="electra-tiny",
                   objectives=["mlm", "rtd"], config=config.to_dict())
    exported = alice_client.get(reverse("runs:config-yaml", args=[run.id]))
    data = yaml.safe_load(exported.content)
    assert (data["rtd_weight"], data["masking_unit"], data["packing"]) == (30.0, "word", "full-sentences")
    assert data["model_overrides"]["generator_size"] == 0.5 and "teacher_checkpoint" in data
    upload = io.BytesIO(exported.content)
    upload.name = "electra.yaml"
    form = alice_client.post(reverse("runs:new"), {"config_file": upload}).context["form"]
    assert form["family"].value() == "electra" and form["generator_size"].value() == 0.5
    assert form["rtd_weight"].value() == 30.0 and form["masking_unit"].value() == "word"
    assert json.loads(form["extra_settings"].value())["model_overrides"] == {"hidden_size": 64, "num_heads": 2}
    response = alice_client.post(reverse("runs:new"), {
        **{k: v for k, v in {**config.to_dict(), **TINY}.items() if isinstance(v, (int, float, str)) and v != ""},
        "objectives": ["mlm", "rtd"], "corpus": tokenizer.corpus_id, "tokenizer": tokenizer.id, "name": "again",
        "extra_settings": form["extra_settings"].value(), "generator_size": 0.5})
    assert response.status_code == 302, response.context["form"].errors
    again = Run.objects.get(name="again").config
    assert again["model_overrides"] == config.model_overrides and again["rtd_weight"] == 30.0


def test_api_yaml_with_a_teacher_folder_of_yours(alice, alice_api, enqueued):
    teacher = bert_teacher(alice)
    text = f"family: distilbert\npreset: distilbert-tiny\nobjectives: [mlm, distill]\nmax_steps: 10\n" \
           f"warmup_steps: 1\nteacher_checkpoint: {teacher.folder}\n"
    response = alice_api.post("/api/runs/", {"tokenizer": str(teacher.run.tokenizer_id), "config_yaml": text},
                              format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["config"]["teacher_checkpoint"] == str(teacher.folder)
    elsewhere = teacher.folder.parent / "copied-by-hand"
    shutil.copytree(teacher.folder, elsewhere)
    response = alice_api.post("/api/runs/", {"tokenizer": str(teacher.run.tokenizer_id),
                                             "config_yaml": text.replace(str(teacher.folder), str(elsewhere))},
                              format="json")
    assert response.status_code == 400 and "one of your checkpoints" in response.json()["error"]


# ---------------------------------------------------------------------------- dashboard
@pytest.mark.parametrize("objectives, charts, absent", [
    (["mlm", "nsp"], ["loss", "mlm_acc", "nsp_acc"], ["sop_acc", "sbo_loss", "electra_loss", "rtd", "distill"]),
    (["mlm", "sop"], ["sop_acc"], ["nsp_acc", "rtd"]),
    (["mlm", "sbo"], ["sbo_loss", "sbo_acc"], ["nsp_acc"]),
    (["mlm", "rtd"], ["electra_loss", "rtd"], ["nsp_acc", "distill"]),
    (["mlm", "distill"], ["distill"], ["rtd", "nsp_acc"]),
])
def test_the_dashboard_charts_the_families_metrics(alice, alice_client, objectives, charts, absent):
    run = make_run(alice, objectives=objectives, status=RunStatus.RUNNING)
    html = alice_client.get(reverse("runs:detail", args=[run.id])).content.decode()
    for chart in charts:
        assert f'id="chart-{chart}"' in html
    for chart in absent:
        assert f'id="chart-{chart}"' not in html


def test_an_imported_bert_model_can_be_a_teacher(alice, settings):
    from webapp.runs.forms import teacher_checkpoints

    source = bert_teacher(alice)
    imported = Checkpoint.objects.create(owner=alice, source=CheckpointSource.IMPORT, name="hf bert",
                                         path=source.path)
    assert imported in teacher_checkpoints(alice)
