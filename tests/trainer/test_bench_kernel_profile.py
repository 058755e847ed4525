"""bench/train_throughput.py --profile: the classifier that sorts a step's kernels (CUDA) and ops
(CPU) into categories, checked on names as the profiler reports them, and a tiny profiled run on the
CPU whose printed categories must add up to its step and whose figures must reach $OUT as JSON."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.bench_helpers import bench_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kp():
    with bench_module("kernel_profile") as module:
        yield module


# Kernel names as torch.profiler reports them on CUDA (eager, cuBLAS/cuBLASLt, flash and
# memory-efficient attention, inductor's triton kernels), with the category each belongs to.
CUDA_KERNELS = [
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "matmul/GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
     "kernel__5x_cublas", "matmul/GEMM"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>("
     "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "matmul/GEMM"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNT", "matmul/GEMM"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, true, "
     "false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*)",
     "matmul/GEMM"),
    ("triton_tem_fused_mm_5", "matmul/GEMM"),
    # both name cutlass: attention, not GEMM
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, false, false, "
     "false, false, true, false, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
     "cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, false, 64, 64, 64, false>::Params)", "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     "normalisation"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, "
     "float const*, float const*, float const*, float const*, float*, float*)", "normalisation"),
    ("triton_per_fused_add_native_layer_norm_native_layer_norm_backward_7", "normalisation"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_1", "normalisation"),  # T5's RMSNorm, fused
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
     "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl, "
     "std::array<char*, 2ul>)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     "elementwise"),
    ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, "
     "bool>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, float, at::PhiloxCudaState)",
     "elementwise"),
    ("triton_poi_fused_add_gelu_native_dropout_3", "elementwise"),
    ("Memset (Device)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::"
     "bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)",
     "casts/copies"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
     "std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, "
     "unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int)",
     "casts/copies"),
    ("triton_poi_fused__to_copy_t_0", "casts/copies"),
    ("Memcpy DtoD (Device -> Device)", "casts/copies"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::"
     "OpaqueType<2u>, unsigned int, 4, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
     "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::"
     "OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, "
     "4u>, int, unsigned int)", "cat/stack"),
    ("triton_poi_fused_cat_4", "cat/stack"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
     "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", "reductions/softmax/loss"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
     "float*, float const*, long const*, float const*, bool, long, long, long, long)", "reductions/softmax/loss"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4, 4>)", "reductions/softmax/loss"),
    ("triton_red_fused__log_softmax_nll_loss_forward_2", "reductions/softmax/loss"),
    ("triton_red_fused_sum_9", "reductions/softmax/loss"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, "
     "float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>)", "optimizer"),
]

# CPU ops (and annotations) by their names alone.
CPU_OPS = [
    ("aten::mm", "matmul/GEMM"), ("aten::addmm", "matmul/GEMM"), ("aten::linear", "matmul/GEMM"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::native_layer_norm_backward", "normalisation"), ("aten::rms_norm", "normalisation"),
    ("aten::gelu", "elementwise"), ("aten::native_dropout", "elementwise"), ("aten::add_", "elementwise"),
    ("aten::_to_copy", "casts/copies"), ("aten::copy_", "casts/copies"),
    ("aten::cat", "cat/stack"), ("aten::stack", "cat/stack"),
    ("aten::_log_softmax", "reductions/softmax/loss"), ("aten::nll_loss_forward", "reductions/softmax/loss"),
    ("aten::sum", "reductions/softmax/loss"),
    ("aten::_fused_adamw_", "optimizer"), ("aten::_foreach_add_", "optimizer"),
]

SDPA_MATH = ("aten::_scaled_dot_product_attention_math", "aten::scaled_dot_product_attention")
TO = ("aten::_to_copy", "aten::to")
GEMM, DIRECT_COPY, BF16_COPY, CAT_COPY = (next(n for n, _ in CUDA_KERNELS if key in n) for key in (
    "s16816gemm_bf16_128x128", "direct_copy_kernel", "bfloat16_copy_kernel", "CatArrayBatchedCopy"))


@pytest.mark.parametrize("name, category", CUDA_KERNELS + CPU_OPS, ids=lambda x: x[:40] if isinstance(x, str) else x)
def test_kernel_and_op_names_fall_in_their_category(kp, name, category):
    assert kp.classify(name) == (category, True)


def test_the_ops_a_kernel_ran_under_decide_what_its_name_cannot(kp):
    # an add is the optimizer's under Optimizer.step, the model's elsewhere
    assert kp.classify("aten::add_", ("Optimizer.step#AdamW.step", "ProfilerStep*"))[0] == "optimizer"
    assert kp.classify("aten::mul_", ("aten::_fused_adamw_",))[0] == "optimizer"
    # the math SDPA's bmm and softmax are attention
    assert kp.classify("aten::bmm", ("aten::matmul",) + SDPA_MATH)[0] == "attention"
    assert kp.classify("aten::_softmax", ("aten::softmax",) + SDPA_MATH)[0] == "attention"
    # a copy under _to_copy is a cast, also inside attention or the loss (autocast's fp32 logits)
    for outer in ((), SDPA_MATH, ("aten::cross_entropy_loss",)):
        assert kp.classify(DIRECT_COPY, ("aten::copy_",) + TO + outer)[0] == "casts/copies"
        assert kp.is_cast(DIRECT_COPY, ("aten::copy_",) + TO + outer)
    assert not kp.is_cast(DIRECT_COPY, ("aten::copy_", "aten::clone", "aten::contiguous"))
    # a conversion done by a kernel named only elementwise is still a cast
    convert = ("void at::native::unrolled_elementwise_kernel<at::native::(anonymous namespace)::"
               "float_to_bf16_lambda, std::array<char*, 2ul>, 4>(int)")
    assert kp.classify(convert) == ("elementwise", True)
    assert kp.classify(convert, ("aten::copy_",) + TO) == ("casts/copies", True) and kp.is_cast(convert, TO)
    assert kp.is_cast(BF16_COPY) and kp.is_cast("triton_poi_fused__to_copy_t_0")
    assert not kp.is_cast("triton_poi_fused__to_copy_add_gelu_1")  # fused with math: not a cast kernel
    assert kp.is_cast("aten::copy_", ("aten::_to_copy", "aten::to", "aten::linear"))
    # the CPU's addmm copies its bias into the output before the GEMM: that is the GEMM's
    assert kp.classify("aten::copy_", ("aten::addmm", "aten::linear"))[0] == "matmul/GEMM"
    # the loss's and a composite RMSNorm's elementwise work belong to them
    assert kp.classify("aten::masked_fill_", ("aten::nll_loss_backward",))[0] == "reductions/softmax/loss"
    assert kp.classify("aten::pow", ("aten::rms_norm",))[0] == "normalisation"
    # a GEMM is a GEMM wherever it runs
    assert kp.classify(GEMM, ("aten::mm", "aten::rms_norm"))[0] == "matmul/GEMM"


def test_what_no_rule_places_is_other_and_flagged_unless_known(kp):
    assert kp.classify("aten::view") == ("other", True)
    assert kp.classify("ProfilerStep*") == ("other", True)
    assert kp.classify("autograd::engine::evaluate_function: MmBackward0") == ("other", True)
    assert kp.classify("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, "
                       "2, 2, -2, true>(at::cuda::detail::TensorInfo<float, unsigned int>)") == ("other", True)
    assert kp.classify("aten::some_new_op") == ("other", False)
    assert kp.classify("Torch-Compiled Region: 0/0") == ("other", True)
    assert kp.classify("brand_new_vendor_kernel_128x64") == ("other", False)


def test_the_summary_adds_up_per_step_and_counts_kernels(kp):
    U = kp.Unit
    units = [U(GEMM, 3000.0), U(GEMM, 1000.0),  # 2 GEMMs
             U(DIRECT_COPY, 500.0, ("aten::copy_",) + TO), U(BF16_COPY, 500.0),  # 2 casts
             U(DIRECT_COPY, 200.0, ("aten::copy_", "aten::clone")),  # a copy, no cast
             U(CAT_COPY, 400.0),  # a cat
             U("aten::add_", 300.0, ("Optimizer.step#AdamW.step",)), U("aten::add_", 100.0),
             U("mystery_kernel", 100.0), U("aten::view", 0.0, counted=False)]
    s = kp.summarise(units, steps=2)
    assert s["total_ms_per_step"] == pytest.approx(6100 / 2 / 1000)
    assert sum(c["ms_per_step"] for c in s["categories"].values()) == pytest.approx(s["total_ms_per_step"])
    assert sum(c["share"] for c in s["categories"].values()) == pytest.approx(1.0)
    assert s["categories"]["matmul/GEMM"]["ms_per_step"] == pytest.approx(2.0)
    assert s["categories"]["casts/copies"]["ms_per_step"] == pytest.approx(0.6)
    assert s["counts_per_step"] == {"kernels": 4.5, "casts": 1.0, "cat_stack": 0.5}
    assert s["top"][0] == {"name": GEMM, "category": "matmul/GEMM", "ms_per_step": 2.0,
                           "calls_per_step": 1.0, "recognised": True}
    adds = {r["category"]: r["ms_per_step"] for r in s["top"] if r["name"] == "aten::add_"}
    assert adds == {"optimizer": pytest.approx(0.15), "elementwise": pytest.approx(0.05)}
    assert s["unrecognised"] == ["mystery_kernel"]
    assert [r["name"] for r in s["other"]] == ["mystery_kernel", "aten::view"]


def test_a_profiled_cpu_run_prints_categories_that_add_up_to_its_step_and_writes_json(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--model", "bert-tiny", "--vocab", "500",
           "--batch-size", "2", "--seq-len", "32", "--steps", "1", "--warmup", "1", "--device", "cpu",
           "--only", "ours", "--threads", "1", "--profile", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OUT": str(out)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    lines = text[text.index("profile of ours:"):].splitlines()
    step = re.search(r"([\d.]+) ms/step of ops = \d+% of the ([\d.]+) ms wall per profiled step", text)
    assert step, text
    ops_ms, wall_ms = float(step.group(1)), float(step.group(2))
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["category"])
    end = next(i for i, line in enumerate(lines) if line.split()[:1] == ["total"])
    rows = [line.rsplit(None, 2) for line in lines[start + 1:end]]
    assert [r[0].strip() for r in rows] == ["matmul/GEMM", "attention", "normalisation", "elementwise",
                                            "casts/copies", "cat/stack", "reductions/softmax/loss", "optimizer",
                                            "other"]
    total = float(lines[end].split()[1])
    assert sum(float(r[1]) for r in rows) == pytest.approx(total, abs=0.01)
    assert sum(float(r[2].rstrip("%")) for r in rows) == pytest.approx(100, abs=0.5)
    assert total == pytest.approx(ops_ms, abs=0.01)
    # the ops' own times, the step's Python outside them included (ProfilerStep's own), are the step
    assert 0.95 * wall_ms < total < 1.01 * wall_ms
    assert float(rows[0][1]) > 0 and float(rows[7][1]) > 0  # bert's GEMMs and AdamW are there
    assert re.search(r"ops per step: [\d,]+ in all, [\d,]+ casts, [\d,]+ cat/stack", text)
    assert "top 15 ops by time:" in text

    report = json.loads((out / "profile-bert-tiny-eager.json").read_text(encoding="utf-8"))
    assert (report["model"], report["device"], report["compiled"], report["steps"]) == ("bert-tiny", "cpu", False, 2)
    assert report["total_ms_per_step"] == pytest.approx(total, abs=0.01)
    assert sum(c["ms_per_step"] for c in report["categories"].values()) == pytest.approx(report["total_ms_per_step"])
    assert len(report["top"]) == 15 and report["counts_per_step"]["kernels"] > 0
    assert report["wall_ms_per_step"] == pytest.approx(wall_ms, abs=0.01) and report["unit"] == "op"
