"""DistilBERT's loss, checked against its formula worked out by hand on a fixed teacher/student pair.

trainer/objectives/distill.py and models_lib/families/distilbert.py document the soft-target loss as
KL(softmax(teacher / T) || softmax(student / T)) * T^2, averaged over the masked positions, and
the step's loss as soft_weight * soft + mlm_weight * MLM + cos_weight * cosine (MLM: cross-entropy
at the masked positions; cosine: 1 - cos(student hidden, teacher hidden) over the real tokens).
Here each part is computed in float64 from the two models' raw outputs, written out term by term
(no F.kl_div, no distillation_losses), and compared with what DistillationStep reports.
"""
from __future__ import annotations

import pytest
import torch

from models_lib.families.bert import BertConfig, BertForPreTraining
from models_lib.families.distilbert import distil_from_teacher, distillation_losses
from trainer.objectives.distill import DistillationStep
from trainer.objectives.encoder import MaskedBatch as Batch

VOCAB, T, B = 50, 12, 3


@pytest.fixture(scope="module")
def pair():
    """A 2-layer BERT teacher (hidden 64) with weights of std 0.3, so its predictions are peaked;
    a 1-layer student started from it and then perturbed, so the two disagree."""
    torch.manual_seed(0)
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=VOCAB, hidden_size=64, num_heads=2, num_layers=2,
                                 intermediate_size=128, max_position_embeddings=T, hidden_dropout=0.0,
                                 attention_dropout=0.0)
    teacher = BertForPreTraining(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in teacher.named_parameters():
            if "norm" not in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    student = distil_from_teacher(teacher.eval())
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    teacher.eval().requires_grad_(False)
    return teacher, student.eval()


def batch() -> Batch:
    """Three rows, the last two padded; 3, 2 and 1 masked positions (6 in all)."""
    g = torch.Generator().manual_seed(2)
    input_ids = torch.randint(5, VOCAB, (B, T), generator=g)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, 9:] = 0
    attention_mask[2, 6:] = 0
    input_ids[attention_mask == 0] = 0
    labels = torch.full((B, T), -100)
    for row, cols in enumerate([[1, 4, 10], [2, 7], [3]]):
        labels[row, cols] = input_ids[row, cols]
        input_ids[row, cols] = 4  # [MASK]
    return Batch(input_ids=input_ids, attention_mask=attention_mask,
                 token_type_ids=torch.zeros(B, T, dtype=torch.long), mlm_labels=labels)


def by_hand(teacher, student, b: Batch, temperature: float) -> dict[str, float]:
    """soft, mlm and cos losses from the formulas, in float64."""
    with torch.no_grad():
        s_out = student(b.input_ids, b.attention_mask, None, output_hidden_states=True)
        t_out = teacher(b.input_ids, b.attention_mask, b.token_type_ids, output_hidden_states=True)
    masked = b.mlm_labels != -100
    s_logits = s_out.mlm_logits[masked].double()  # (N, V), row-major order of the masked positions
    t_logits = t_out.mlm_logits[masked].double()

    def softmax(z):
        e = torch.exp(z - z.max(-1, keepdim=True).values)
        return e / e.sum(-1, keepdim=True)

    p_teacher = softmax(t_logits / temperature)
    p_student = softmax(s_logits / temperature)
    kl = (p_teacher * (torch.log(p_teacher) - torch.log(p_student))).sum(-1)  # (N,)
    soft = kl.mean() * temperature ** 2

    targets = b.mlm_labels[masked]
    p_hard = softmax(s_logits)
    mlm = -torch.log(p_hard[torch.arange(len(targets)), targets]).mean()

    real = b.attention_mask.bool()
    hs, ht = s_out.hidden_states[-1][real].double(), t_out.hidden_states[-1][real].double()
    cos = (hs * ht).sum(-1) / (hs.norm(dim=-1) * ht.norm(dim=-1))
    return {"soft_loss": float(soft), "mlm_loss": float(mlm), "cos_loss": float((1.0 - cos).mean())}


@pytest.mark.parametrize("temperature", [3.0, 0.5])
def test_distillation_step_losses_follow_the_formula(pair, make_family_config, temperature):
    teacher, student = pair
    config = make_family_config("distilbert", teacher_checkpoint="unused", distill_temperature=temperature,
                                distill_soft_weight=5.0, distill_mlm_weight=2.0, distill_cos_weight=1.0)
    step = DistillationStep(config, student, "cpu", teacher)
    b = batch()
    out = step(b, train=True)
    expected = by_hand(teacher, student, b, temperature)
    for name, value in expected.items():
        assert float(out.losses[name]) == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert float(out.loss.detach()) == pytest.approx(
        5.0 * expected["soft_loss"] + 2.0 * expected["mlm_loss"] + 1.0 * expected["cos_loss"], rel=1e-5)
    assert out.weights["soft_loss"] == out.weights["mlm_loss"] == 6.0
    assert float(out.weights["cos_loss"]) == float(b.attention_mask.sum())

    # The fixture tells the temperature apart: at T = 1, or without the T^2 factor, the soft
    # loss would be clearly different.
    at_one = by_hand(teacher, student, b, 1.0)["soft_loss"]
    assert abs(at_one - expected["soft_loss"]) > 0.1 * expected["soft_loss"]
    assert abs(expected["soft_loss"] / temperature ** 2 - expected["soft_loss"]) > 0.1 * expected["soft_loss"]
    assert expected["soft_loss"] > 1e-2


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_distillation_losses_soft_term_is_kl_at_t_times_t_squared(temperature):
    g = torch.Generator().manual_seed(4)
    student_logits = 3.0 * torch.randn(5, 20, generator=g)
    teacher_logits = 3.0 * torch.randn(5, 20, generator=g)
    hidden = torch.randn(1, 5, 8, generator=g)
    soft, _ = distillation_losses(student_logits, teacher_logits, hidden, hidden, torch.ones(1, 5),
                                  temperature=temperature)
    s = (student_logits.double() / temperature).log_softmax(-1)
    t = (teacher_logits.double() / temperature).log_softmax(-1)
    expected = (t.exp() * (t - s)).sum(-1).mean() * temperature ** 2
    assert float(soft) == pytest.approx(float(expected), rel=1e-5)
