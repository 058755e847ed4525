"""DistilBERT: a student made from every other teacher layer; the distillation losses."""
from __future__ import annotations

import pytest
import torch

from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertForPreTraining
from models_lib.families.distilbert import DistilBertForPreTraining, distil_from_teacher, distillation_losses
from tests.models_lib.helpers import randomise

V = 101


def teacher(layers: int = 4) -> BertForPreTraining:
    torch.manual_seed(0)
    config = presets.get("bert-tiny", vocab_size=V, hidden_size=64, num_heads=4, num_layers=layers)
    return randomise(BertForPreTraining(config), seed=1)


@pytest.mark.parametrize("layers, student_layers", [(4, 2), (3, 2)])
def test_student_layer_i_is_teacher_layer_2i(layers, student_layers):
    t = teacher(layers)
    s = distil_from_teacher(t)
    assert isinstance(s, DistilBertForPreTraining)
    assert (s.config.family, s.config.num_layers, s.config.type_vocab_size, s.config.use_pooler) == (
        "distilbert", student_layers, 0, False)
    for i, layer in enumerate(s.distilbert.encoder.layers):
        theirs = t.bert.encoder.layers[2 * i].state_dict()
        for k, v in layer.state_dict().items():
            assert torch.equal(v, theirs[k]), (i, k)
        assert layer.attention.qkv.weight is not t.bert.encoder.layers[2 * i].attention.qkv.weight  # copies
    for k, v in s.mlm_head.state_dict().items():
        assert torch.equal(v, t.mlm_head.state_dict()[k])


def test_student_embeddings_equal_the_teachers_for_one_segment():
    t = teacher()
    s = distil_from_teacher(t)
    ids = torch.randint(5, V, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(s.encode(ids, output_hidden_states=True)[0],
                                   t.encode(ids, output_hidden_states=True)[0])
        # With one layer each way the first student layer is teacher layer 0 on the same input.
        torch.testing.assert_close(s.encode(ids, output_hidden_states=True)[1],
                                   t.encode(ids, output_hidden_states=True)[1])


def test_distillation_losses_vanish_when_student_equals_teacher_and_not_otherwise():
    t = teacher()
    s = distil_from_teacher(t)
    ids = torch.randint(5, V, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    tout = t(ids, mask, output_hidden_states=True)
    sout = s(ids, mask, output_hidden_states=True)
    soft, cosine = distillation_losses(tout.mlm_logits[mask.bool()], tout.mlm_logits[mask.bool()],
                                       tout.hidden_states[-1], tout.hidden_states[-1], mask)
    assert soft.abs() < 1e-5 and cosine.abs() < 1e-5
    soft, cosine = distillation_losses(sout.mlm_logits[mask.bool()], tout.mlm_logits[mask.bool()],
                                       sout.hidden_states[-1], tout.hidden_states[-1], mask)
    assert soft > 0 and cosine > 0 and torch.isfinite(soft + cosine)


def test_student_has_no_token_types_and_refuses_shared_teachers():
    s = distil_from_teacher(teacher())
    with pytest.raises(ValueError, match="no token type"):
        s(torch.randint(5, V, (1, 4)), token_type_ids=torch.zeros(1, 4, dtype=torch.long))
    albert = AlbertForPreTraining(presets.get("albert-tiny", vocab_size=V))
    with pytest.raises(ValueError, match="BERT-style teacher"):
        distil_from_teacher(albert)
