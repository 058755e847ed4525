"""trainer.training.flops: each family's FLOPs formula against a hand count and against the
matrix products torch's FlopCounterMode sees in one training step; the GPU peak table; the
measured CPU peak; MFU."""
from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from models_lib.families import presets
from models_lib.families.albert import AlbertForPreTraining
from models_lib.families.bert import BertConfig, BertForPreTraining
from models_lib.families.electra import ElectraForPreTraining
from models_lib.families.elmo import ElmoConfig
from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
from models_lib.families.t5 import T5Config, T5ForConditionalGeneration
from trainer.training import flops
from trainer.training.flops import Workload, training_flops_per_token

V, B, T, PREDICTED = 101, 4, 16, 4  # 4 of 16 positions predicted: p = 0.25


def test_bert_formula_against_a_hand_count():
    # H 32, 2 layers, FFN 64, vocabulary 101 (computed as 128: the model pads it to a multiple of 64),
    # T 16, a quarter of the tokens predicted, MLM + NSP.
    cfg = BertConfig.from_preset("bert-tiny", vocab_size=101, hidden_size=32, num_heads=2, intermediate_size=64,
                                 num_layers=2)
    # One token through one layer, forward: QKV 32x96, output 32x32, FFN 32x64 and 64x32 (2 FLOPs a
    # weight), attention scores and weighted values over 16 keys of width 32 (2 x 2 x 16 x 32).
    layer = 2 * (32 * 96 + 32 * 32 + 32 * 64 + 64 * 32) + 2 * 2 * 16 * 32    # 16384 + 2048
    mlm = 0.25 * 2 * (32 * 32 + 32 * 128)                                   # dense H -> H, decoder H -> V_pad
    nsp = 2 * (32 * 32 + 32 * 2) / 16                                        # pooler + classifier, once a row
    forward = 2 * layer + mlm + nsp
    assert layer == 18432
    got = training_flops_per_token(cfg, Workload(seq_len=16, predicted=0.25, objectives=("mlm", "nsp")))
    assert got == pytest.approx(3 * forward, rel=1e-12)
    # fine-tuning: the backbone alone
    assert training_flops_per_token(cfg, Workload(seq_len=16, pretraining=False)) == pytest.approx(3 * 2 * layer)


def test_elmo_formula_against_a_hand_count():
    cfg = ElmoConfig.from_preset("elmo-tiny", vocab_size=100)  # P 64, 128 cells, 2 layers
    # per direction and layer: input 64 -> 4x128, recurrent (projected) 64 -> 4x128, projection 128 -> 64
    lstm = 2 * (64 * 512 + 64 * 512 + 128 * 64)
    softmax = 2 * (15 / 16) * 2 * 64 * 128  # both directions predict 15 of 16 positions; 100 words padded to 128
    got = training_flops_per_token(cfg, Workload(seq_len=16))
    assert got == pytest.approx(3 * (2 * 2 * lstm + softmax), rel=1e-12)


def predicted_labels(ids: torch.Tensor) -> torch.Tensor:
    labels = torch.full_like(ids, -100)
    labels[:, 1:1 + PREDICTED] = ids[:, 1:1 + PREDICTED]
    return labels


def counted(model: torch.nn.Module, loss_of) -> float:
    """Matrix-product FLOPs of one forward + backward (attention on its math path, so that its
    products are seen too), per token that tokens/s counts."""
    model.train()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss, tokens = loss_of(model)
        loss.backward()
    return counter.get_total_flops() / tokens


def encoder_loss(model, *, pair: str | None = None):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    kwargs = {f"{pair}_labels": torch.zeros(B, dtype=torch.long)} if pair else {}
    out = model(ids, torch.ones(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long),
                mlm_labels=predicted_labels(ids), **kwargs)
    return out.loss, B * T


SMALL = dict(vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64, num_layers=2)


@pytest.mark.parametrize("family", ["bert", "albert", "electra", "roberta"])
def test_encoder_families_match_the_counted_products(family):
    torch.manual_seed(0)
    if family == "bert":
        model, objectives = BertForPreTraining(BertConfig.from_preset("bert-tiny", **SMALL)), ("mlm", "nsp")
    elif family == "albert":  # factorised embeddings, one block applied 3 times
        cfg = presets.get("albert-tiny", **{**SMALL, "num_layers": 3}, embedding_size=16)
        model, objectives = AlbertForPreTraining(cfg), ("mlm", "sop")
    elif family == "electra":
        cfg = presets.get("electra-tiny", **{**SMALL, "num_heads": 4}, embedding_size=16, generator_size=0.5)
        model, objectives = ElectraForPreTraining(cfg), ("mlm", "rtd")
    else:
        model, objectives = presets_model("roberta-tiny"), ("mlm",)
    pair = {"bert": "nsp", "albert": "sop"}.get(family)
    expected = training_flops_per_token(model.config, Workload(seq_len=T, predicted=PREDICTED / T,
                                                               objectives=objectives))
    assert counted(model, lambda m: encoder_loss(m, pair=pair)) == pytest.approx(expected, rel=1e-9)


def presets_model(name: str):
    from models_lib.families.roberta import RobertaForPreTraining

    return RobertaForPreTraining(presets.get(name, **SMALL))


def test_gpt_matches_the_counted_products():
    torch.manual_seed(0)
    model = GPTLMHeadModel(GPTConfig.from_preset("gpt-tiny", vocab_size=V, hidden_size=32, num_heads=2, num_layers=2))

    def loss_of(m):
        ids = torch.randint(5, V, (B, T), generator=torch.Generator().manual_seed(0))
        return m(ids, torch.ones(B, T, dtype=torch.long), labels=ids).loss, B * T

    expected = training_flops_per_token(model.config, Workload(seq_len=T, objectives=("clm",)))
    assert counted(model, loss_of) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_t5_counts_encoder_and_decoder_tokens_with_their_own_lengths(version):
    torch.manual_seed(0)
    cfg = T5Config.from_preset("t5-tiny", vocab_size=V, d_model=32, d_ff=64, d_kv=8, num_heads=2, num_layers=2,
                               num_decoder_layers=3, version=version, pad_token_id=0, eos_token_id=1)
    model, target = T5ForConditionalGeneration(cfg), 5

    def loss_of(m):
        g = torch.Generator().manual_seed(0)
        ids, labels = torch.randint(5, V, (B, T), generator=g), torch.randint(5, V, (B, target), generator=g)
        return m(ids, torch.ones(B, T, dtype=torch.long), labels=labels).loss, B * (T + target)

    expected = training_flops_per_token(cfg, Workload(seq_len=T, target_len=target, objectives=("span_corruption",)))
    assert counted(model, loss_of) == pytest.approx(expected, rel=1e-9)


def test_transfo_xl_matches_the_counted_products_of_a_step_with_memory():
    """Two consecutive training steps (SegmentLMStep, as training feeds the model); the second
    reads the first's memory, mem_len = 8 states a layer: counted, it is the formula's step."""
    from models_lib.families.transfo_xl import TransfoXLConfig, TransfoXLLMHeadModel
    from trainer.objectives.lm import LMBatch
    from trainer.objectives.memory import SegmentLMStep

    torch.manual_seed(0)
    cfg = TransfoXLConfig.from_preset("transfo-xl-tiny", vocab_size=V, hidden_size=32, num_heads=2, head_size=8,
                                      intermediate_size=64, mem_len=8)
    step = SegmentLMStep(None, TransfoXLLMHeadModel(cfg), "cpu")
    stream = torch.randint(5, V, (B, 2 * T + 1), generator=torch.Generator().manual_seed(0))
    batches = [LMBatch(input_ids=stream[:, i:i + T], attention_mask=torch.ones(B, T, dtype=torch.long),
                       labels=stream[:, i + 1:i + T + 1]) for i in (0, T)]
    step(batches[0], train=True).loss.backward()
    assert step.mems is not None and step.mems[0].shape == (B, 8, 32)

    expected = training_flops_per_token(cfg, Workload(seq_len=T, objectives=("xl_lm",), batch_size=B))
    assert counted(step.model, lambda m: (step(batches[1], train=True).loss, B * T)) == pytest.approx(expected, rel=1e-9)


def plm_batch(g: torch.Generator, targets: int):
    """XLNet's training rows, as PLMCollator makes them: segments A | B | CLS, `targets` positions
    last in a random factorisation order, the query stream fed their positions."""
    from trainer.objectives.memory import PLMBatch, order_mask

    ids = torch.randint(5, V, (B, T), generator=g)
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2:], types[:, -1] = 1, 2
    orders = torch.stack([torch.randperm(T - 1, generator=g)[:targets] for _ in range(B)])
    perm = torch.stack([torch.from_numpy(order_mask(o.numpy(), T)) for o in orders])
    mapping = torch.zeros(B, targets, T).scatter_(2, orders[:, :, None], 1.0)
    return PLMBatch(input_ids=ids, attention_mask=torch.ones(B, T, dtype=torch.long), token_type_ids=types,
                    perm_mask=perm, target_mapping=mapping, labels=ids.gather(1, orders), target_positions=orders)


def test_xlnet_matches_the_counted_products_of_a_step_with_memory():
    """Both streams (the query stream at T // plm_k targets only), the relative segment term, the
    output layer at the targets; the second of two PermutationLMStep steps, reading the memory."""
    from models_lib.families.xlnet import XLNetConfig, XLNetLMHeadModel
    from trainer.objectives.memory import PermutationLMStep

    torch.manual_seed(0)
    cfg = XLNetConfig.from_preset("xlnet-tiny", vocab_size=V, hidden_size=32, num_heads=2, intermediate_size=64,
                                  mem_len=8)
    step = PermutationLMStep(None, XLNetLMHeadModel(cfg), "cpu")
    g, targets = torch.Generator().manual_seed(0), T // 4  # plm_k = 4
    batches = [plm_batch(g, targets) for _ in range(2)]
    step(batches[0], train=True).loss.backward()
    assert step.mems is not None and step.mems[0].shape == (B, 8, 32)

    expected = training_flops_per_token(cfg, Workload(seq_len=T, objectives=("plm",), targets=targets, batch_size=B))
    assert counted(step.model, lambda m: (step(batches[1], train=True).loss, B * T)) == pytest.approx(expected, rel=1e-9)
    # without the once-a-batch position projection, and with plm_k's default of 6
    less = training_flops_per_token(cfg, Workload(seq_len=T, targets=targets))
    H, inner, P = 32, 32, 8 + 2 * T
    assert expected - less == pytest.approx(2 * 2 * (2 * H * inner * P) / B / T, rel=1e-12)
    assert training_flops_per_token(cfg, Workload(seq_len=T)) < less  # T // 6 = 2 targets, not 4


def test_unknown_family_has_no_formula():
    class Other:
        family = "lstm-of-my-own"

    assert training_flops_per_token(Other(), Workload(seq_len=16)) is None


@pytest.mark.parametrize("name, precision, label, tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", "NVIDIA H100 SXM", 989.4),
    ("NVIDIA H100 80GB HBM3", "fp32", "NVIDIA H100 SXM", 494.7),
    ("NVIDIA H100 PCIe", "bf16", "NVIDIA H100 PCIe", 756),
    ("NVIDIA H200", "bf16", "NVIDIA H200 SXM", 989.4),
    ("NVIDIA A100-SXM4-80GB", "bf16", "NVIDIA A100", 312),
    ("NVIDIA A100 80GB PCIe", "fp32", "NVIDIA A100", 156),
    ("NVIDIA L4", "bf16", "NVIDIA L4", 121),
    ("NVIDIA A10", "fp32", "NVIDIA A10", 62.5),
    ("NVIDIA GeForce RTX 4090", "bf16", "NVIDIA GeForce RTX 4090", 165.2),
    ("Tesla V100-SXM2-16GB", "fp32", "NVIDIA V100 SXM2", 15.7),
    ("Tesla V100-SXM2-16GB", "bf16", "NVIDIA V100 SXM2", 15.7),  # no bf16 tensor cores: the fp32 peak
    ("Tesla T4", "fp32", "NVIDIA T4", 8.1),
])
def test_gpu_peak_table(name, precision, label, tflops):
    peak = flops.gpu_peak(name, precision)
    assert peak is not None and peak.source.startswith(label) and peak.flops == pytest.approx(tflops * 1e12)


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090 Laptop GPU", "AMD MI300X"])
def test_gpus_not_in_the_table_are_measured(name):
    assert flops.gpu_peak(name, "bf16") is None


def test_cpu_peak_is_measured_once_per_process():
    flops._measured.cache_clear()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    peak = flops.peak_for("cpu", "fp32")
    assert peak.flops > 1e8 and peak.source.startswith("measured fp32 matmul on the CPU")
    assert flops.peak_for("cpu", "fp32").flops == peak.flops  # cached: the same figure
    assert flops._measured.cache_info().misses == flops.CPU_PROBES  # its probes, once
    # measuring leaves the global RNG where it was: a run's dropout masks do not depend on whether
    # the process had measured before
    assert torch.equal(torch.rand(3), expected)


def test_mfu():
    peak = flops.Peak(1e12, "test")
    assert flops.mfu(1e6, 2e5, peak) == pytest.approx(0.2)
    assert flops.mfu(None, 2e5, peak) is None and flops.mfu(1e6, 2e5, None) is None
