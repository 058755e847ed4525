"""TinyBERT's losses: each is 0 for a student that is its teacher, the attention loss reads the
unnormalised scores, the hidden loss follows the uniform layer map, and a narrower student
learns through its projections."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from models_lib.checkpoint import load_model, save_model
from models_lib.core.config import TinyBertConfig
from models_lib.families import presets
from models_lib.families.bert import BertForPreTraining
from models_lib.families.tinybert import (TinyBertForPreTraining, attention_scores, layer_map, prediction_loss,
                                          tinybert_losses)

V = 120


def bert(layers: int = 2, hidden: int = 64) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(presets.get("bert-tiny", vocab_size=V, hidden_size=hidden, num_heads=2,
                                          num_layers=layers)).eval()


def copy_of(teacher: BertForPreTraining) -> TinyBertForPreTraining:
    """A TinyBERT student of the teacher's shape with the teacher's weights (no projection)."""
    fields = {f.name: getattr(teacher.config, f.name) for f in dataclasses.fields(teacher.config)}
    fields.update(family="tinybert", use_pooler=False, teacher_hidden_size=teacher.config.hidden_size)
    student = TinyBertForPreTraining(TinyBertConfig(**fields)).eval()
    missing, _ = student.load_state_dict(teacher.state_dict(), strict=False)
    assert not missing and student.fit_hidden is None and student.fit_embedding is None
    return student


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    labels = torch.full((3, 12), -100)
    labels[:, [2, 5]] = ids[:, [2, 5]]
    return ids, mask, labels


def losses(student, teacher, temperature=1.0):
    ids, mask, labels = batch()
    with attention_scores(student) as s_scores:
        s = student(ids, mask, None, labels, output_hidden_states=True)
    with torch.no_grad(), attention_scores(teacher) as t_scores:
        t = teacher(ids, mask, None, labels, output_hidden_states=True)
    out = tinybert_losses(s.projected_states, s_scores, t.hidden_states, t_scores, mask)
    out["pred_loss"] = prediction_loss(s.mlm_logits, t.mlm_logits, temperature)
    return out, (s, s_scores, t, t_scores, mask)


def test_every_loss_is_zero_when_the_student_is_its_teacher():
    teacher = bert()
    out, _ = losses(copy_of(teacher), teacher, temperature=2.0)
    assert set(out) == {"emb_loss", "att_loss", "hid_loss", "pred_loss"}
    for name, value in out.items():
        assert value.item() == pytest.approx(0.0, abs=1e-6), name


def test_each_loss_sees_a_different_student():
    teacher = bert()
    student = copy_of(teacher)
    with torch.no_grad():
        student.bert.embeddings.word.weight.add_(0.05 * torch.randn_like(student.bert.embeddings.word.weight))
    out, _ = losses(student, teacher)
    assert all(value.item() > 1e-6 for value in out.values()), out


def test_the_attention_loss_compares_scores_before_the_softmax():
    """A bias on the keys adds q.b to every score of a query's row: the softmax, and so every
    hidden state and prediction, is unchanged, but the unnormalised scores are not."""
    teacher = bert()
    student = copy_of(teacher)
    attention = student.bert.encoder.layers[0].attention
    H = student.config.hidden_size
    with torch.no_grad():
        attention.qkv.bias[H:2 * H] += 0.5  # the key part of the fused Q/K/V bias
    out, (s, s_scores, t, t_scores, mask) = losses(student, teacher)
    assert out["hid_loss"].item() == pytest.approx(0.0, abs=1e-8) and out["pred_loss"].item() == pytest.approx(0.0, abs=1e-5)
    assert out["att_loss"].item() > 1e-3
    # the scores are q k^T / sqrt(d), one (B, heads, T, T) tensor per layer
    assert len(s_scores) == 2 and s_scores[0].shape == (3, 2, 12, 12)
    real = mask.bool()[:, None, :, None] & mask.bool()[:, None, None, :]
    diff = (s_scores[0] - t_scores[0]).expand(3, 2, 12, 12)[real.expand(3, 2, 12, 12)]
    assert out["att_loss"].item() == pytest.approx(diff.pow(2).mean().item(), rel=1e-5)


@pytest.mark.parametrize(("m", "n", "expected"), [(4, 12, [3, 6, 9, 12]), (6, 12, [2, 4, 6, 8, 10, 12]),
                                                  (1, 2, [2]), (2, 2, [1, 2]), (3, 4, [1, 2, 4])])
def test_the_uniform_layer_map(m, n, expected):
    assert layer_map(m, n) == expected


def test_a_student_deeper_than_its_teacher_is_refused():
    with pytest.raises(ValueError, match="between 1 and the teacher's 2 layers"):
        layer_map(3, 2)


def test_a_shallow_student_learns_from_the_mapped_teacher_layers():
    """One student layer against a two-layer teacher: g(1) = 2, so the hidden loss is against the
    teacher's last layer and the attention loss against its second layer's scores."""
    teacher = bert(layers=2)
    student = copy_of(bert(layers=1))
    out, (s, s_scores, t, t_scores, mask) = losses(student, teacher)
    keep = mask.bool()
    expected = F.mse_loss(s.hidden_states[1][keep], t.hidden_states[2][keep])
    assert out["hid_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    pairs = (keep[:, None, :, None] & keep[:, None, None, :]).expand(3, 2, 12, 12)
    assert out["att_loss"].item() == pytest.approx(F.mse_loss(s_scores[0][pairs], t_scores[1][pairs]).item(), rel=1e-5)


def test_a_narrower_student_projects_to_the_teacher_and_learns_the_projection(tmp_path):
    teacher = bert(hidden=64)
    torch.manual_seed(2)
    student = TinyBertForPreTraining(presets.get("tinybert-tiny", vocab_size=V, hidden_size=32, num_heads=2,
                                                 intermediate_size=128, num_layers=2, teacher_hidden_size=64))
    assert student.fit_hidden.weight.shape == (64, 32) and student.fit_embedding.weight.shape == (64, 32)
    out, (s, _, t, _, mask) = losses(student, teacher)
    keep = mask.bool()
    by_hand = sum(F.mse_loss(student.fit_hidden(s.hidden_states[m])[keep], t.hidden_states[m][keep]) for m in (1, 2))
    assert out["hid_loss"].item() == pytest.approx(by_hand.item(), rel=1e-5)
    (out["emb_loss"] + out["att_loss"] + out["hid_loss"]).backward()
    assert student.fit_hidden.weight.grad.abs().sum() > 0 and student.fit_embedding.weight.grad.abs().sum() > 0
    assert student.config.count_params(embeddings=True) == sum(p.numel() for p in student.parameters())
    save_model(student, tmp_path)  # the projections are part of the checkpoint
    again = load_model(tmp_path)
    assert type(again) is TinyBertForPreTraining and torch.equal(again.fit_hidden.weight, student.fit_hidden.weight)


def test_the_tinybert_4_preset_is_the_papers():
    cfg = presets.get("tinybert-4", vocab_size=30522, teacher_hidden_size=768)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size) == (4, 312, 12, 1200)
    assert type(cfg) is TinyBertConfig and cfg.projects


def test_a_tinybert_student_fine_tunes_like_a_bert():
    """The distilled student goes on to downstream tasks: its encoder moves into a BERT-style
    classifier (the projections, used only for distillation, stay behind)."""
    from models_lib.families.downstream import from_pretraining

    student = TinyBertForPreTraining(presets.get("tinybert-tiny", vocab_size=V, hidden_size=32, num_heads=2,
                                                 intermediate_size=128, teacher_hidden_size=64))
    classifier = from_pretraining(student, "sequence_classification", 3)
    assert classifier.backbone_name == "bert"
    ours = student.backbone.state_dict()
    assert all(torch.equal(v, ours[k]) for k, v in classifier.backbone.state_dict().items() if k in ours)
    ids, mask, _ = batch()
    assert classifier(ids, mask).logits.shape == (3, 3)
