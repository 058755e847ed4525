#!/usr/bin/env bash
# The GPU figures of bench/RESULTS.md (issue 10, point 4), in one go on one CUDA GPU, in under
# about 8 minutes on an H100:
#   1. bert-base, bf16: tokens/s and MFU, eager and torch.compile'd, ours vs transformers
#   2. t5-v1.1-base, bf16: step time and tokens/s, eager and compiled, ours vs transformers
#   3. gpt2-small, bf16: tokens/s and MFU, eager and torch.compile'd, ours vs transformers
# MFU divides by the GPU's datasheet bf16 dense peak (trainer/training/flops.py GPU_PEAKS).
# With --product (issue 20, point 4), then:
#   4. the product: `python -m trainer run` of the same three setups on a generated 20 MB corpus
#      (bench/pretrain_product.py --gpu), eager and compiled, its real tokens/s, fill and MFU beside
#      the model-step figures of 1-3 (read from this script's own log, not measured twice). It starts
#      no run after PRODUCT_BUDGET seconds of its own (default 240; later runs are listed as skipped),
#      so 1-4 take an estimated 9-10 minutes (not yet timed on a GPU). To stay near 8 minutes, run
#      `python3 bench/pretrain_product.py --gpu` alone instead: it measures the model step itself,
#      and its --budget (420 s) puts every setup's eager comparison before the compiled ones.
# With --profile (issue 20, point 3), last:
#   5. a kernel profile of our model step in the same three setups: train_throughput.py --only ours
#      --steps 5 --profile 3 (3 steps under torch.profiler after the 5 timed ones): CUDA time per step
#      by category (GEMM, attention, norms, elementwise, casts/copies, cat, softmax/loss, optimizer),
#      the top 15 kernels, the counts of cast and cat kernels; eager for all three, then compiled for
#      bert-base and gpt2-small. Each writes $OUT/profile-MODEL-eager|compiled.json. Estimated time
#      on an H100, from the figures of 1-3 in bench/RESULTS.md (not yet timed): an eager run is ~12
#      steps of 75-170 ms, the start-up (imports, the model built on the CPU and moved) and the
#      profiler's processing of ~4 steps of kernels, ~25-30 s each, ~1.5 min for three; 1-3 took
#      under 8 minutes for three runs each building two models, compiling one and training 75 steps,
#      so start-up and compile are at most ~2 min a run, estimated ~1 min for bert-base and
#      gpt2-small from a cold inductor cache (less after 1-3, same graphs): ~3-3.5 min in all. To hold
#      it near 3 minutes, a run is cut at 45 s (eager) or 90 s (compiled), and no run starts after
#      PROFILE_BUDGET seconds (default 180; later ones are listed as skipped) nor runs past it.
#      --profile-only runs 5 alone (no 1-3), to sit beside `bench/pretrain_product.py --gpu`
#      (~8 min) in one 15-minute call; its log is then "$OUT/gpu_profile.txt".
#
#   bash bench/gpu_figures.sh            # from the repository root, on the GPU machine
#   bash bench/gpu_figures.sh --product  # 1-3, then 4
#   bash bench/gpu_figures.sh --profile-only   # 5 alone (--profile: 1-3, then 5)
#   bash bench/gpu_figures.sh --smoke    # the same commands on the CPU with tiny presets and two
#                                        # steps (compile backend aot_eager): checks the plumbing
#                                        # (--smoke --product: and pretrain_product.py --smoke;
#                                        # --smoke --profile: 5 with the tiny presets, no budget
#                                        # unless PROFILE_BUDGET is set)
#
# Needs python3 with torch (CUDA), transformers, tokenizers, safetensors, numpy and pyyaml; no
# Django, no network. PYTHON=... picks another interpreter. When $OUT is set, the output is also
# written to "$OUT/gpu_figures.txt" (and 4's table to "$OUT/pretrain_product.json"). A figure whose
# command fails (or runs past its time limit) says so and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SMOKE=0
PRODUCT=0
PROFILE=0
FIGURES=1
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    --product) PRODUCT=1 ;;
    --profile) PROFILE=1 ;;
    --profile-only) PROFILE=1; FIGURES=0 ;;
    *) echo "usage: bash bench/gpu_figures.sh [--smoke] [--product] [--profile | --profile-only]" >&2; exit 2 ;;
  esac
done
if [ "$FIGURES" = 0 ] && [ "$PRODUCT" = 1 ]; then
  echo "--product reads the figures of 1-3: not with --profile-only" >&2; exit 2
fi

if [ "$SMOKE" = 1 ]; then
  device=(--device cpu --precision fp32 --warmup 1 --compile-backend aot_eager)
  common=("${device[@]}" --steps 2)
  bert=(--model bert-mini --batch-size 2 --seq-len 32 --vocab 1000)
  t5=(--model t5-tiny --set version=1.1 --batch-size 2 --seq-len 32 --vocab 1000)
  gpt=(--model gpt-tiny --batch-size 2 --seq-len 32 --vocab 1000)
  limit=600
  profile_limits=(600 600)  # eager, compiled
  profile_budget=${PROFILE_BUDGET:-0}  # none unless asked (to check the budget here)
else
  device=(--device cuda --precision bf16)
  common=("${device[@]}")
  # bert-base as BERT's 90% phase trains it (128 tokens; batch 256 as in the paper), 20 timed steps
  bert=(--model bert-base --batch-size 256 --seq-len 128 --steps 20)
  # T5's span corruption shapes: 512 input tokens, 114 target tokens; 32 rows (64 ran out of the
  # H100's 80 GB with both models held; T5 used 128)
  t5=(--model t5-base --set version=1.1 --batch-size 32 --seq-len 512 --steps 10)
  # GPT-2's context of 1024 tokens, its 50257-token vocabulary
  gpt=(--model gpt2-small --vocab 50257 --batch-size 16 --seq-len 1024 --steps 20)
  limit=240
  profile_limits=(45 90)
  profile_budget=${PROFILE_BUDGET:-180}
fi
# 5: ours alone, 5 timed steps, then 3 under the profiler (after the setups' own arguments: last wins)
profile=(--only ours --steps 5 --profile 3)

log=/dev/null
if [ -n "${OUT:-}" ]; then
  export OUT  # train_throughput.py --profile writes its JSON there
  mkdir -p "$OUT"
  log="$OUT/gpu_figures.txt"
  [ "$FIGURES" = 0 ] && log="$OUT/gpu_profile.txt"
  : > "$log"
elif [ "$PRODUCT" = 1 ]; then  # 4 reads the model-step figures of 1-3 from the log
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
fi

say() { echo "$@" | tee -a "$log"; }

run() {  # run TITLE ARGS...: one benchmark, its output tee'd; a failure is reported, not fatal
  local title=$1; shift
  say ""
  say "=== $title"
  say "\$ $PY bench/train_throughput.py $*"
  timeout "$limit" "$PY" bench/train_throughput.py "$@" 2>&1 | grep -v -e "Loading weights" -e "^USDT:" | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || say "!!! $title: the command failed (exit $rc$([ "$rc" = 124 ] && echo ", over ${limit}s"))"
}

say "gpu_figures.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
[ "$SMOKE" = 1 ] && say "(--smoke: tiny presets on the CPU, two steps; the figures mean nothing, the plumbing is checked)"
"$PY" - <<'EOF' 2>&1 | tee -a "$log"
import platform, torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
print(f"python {platform.python_version()}, torch {torch.__version__}, {gpu}")
try:
    import transformers
    print(f"transformers {transformers.__version__}")
except ImportError:
    print("transformers is missing: the ours-vs-transformers ratios cannot be measured")
EOF

if [ "$FIGURES" = 1 ]; then
  run "bert-base MFU, bf16, eager and compiled (ours vs transformers)" "${bert[@]}" "${common[@]}" --compile
  run "t5-v1.1-base step time, bf16, eager and compiled (ours vs transformers)" "${t5[@]}" "${common[@]}" --compile
  run "gpt2-small MFU, bf16, eager and compiled (ours vs transformers)" "${gpt[@]}" "${common[@]}" --compile
fi

if [ "$PRODUCT" = 1 ]; then
  if [ "$SMOKE" = 1 ]; then
    product=(--smoke)
  else
    product=(--gpu --model-step-from "$log" --budget "${PRODUCT_BUDGET:-240}")
  fi
  say ""
  say "=== the product: python -m trainer run of the same setups (bench/pretrain_product.py)"
  say "\$ $PY bench/pretrain_product.py ${product[*]}"
  "$PY" bench/pretrain_product.py "${product[@]}" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || say "!!! the product benchmark: a run failed or was skipped (exit $rc; see its table)"
fi
if [ "$PROFILE" = 1 ]; then
  say ""
  say "=== kernel profiles of our model step (train_throughput.py --profile 3)$([ "$profile_budget" != 0 ] && echo ", no run started or running past ${profile_budget}s")"
  profile_start=$SECONDS
  profile_run() {  # profile_run TITLE LIMIT ARGS...: run with LIMIT cut to what the budget leaves
    local title=$1 cap=$2; shift 2
    if [ "$profile_budget" != 0 ]; then
      local left=$((profile_budget - (SECONDS - profile_start)))
      if [ "$left" -lt 20 ]; then
        say ""
        say "=== $title"
        say "!!! $title: skipped (PROFILE_BUDGET=${profile_budget}s spent)"
        return
      fi
      [ "$left" -lt "$cap" ] && cap=$left
    fi
    limit=$cap run "$title" "$@"
  }
  profile_run "profile: bert-base, eager" "${profile_limits[0]}" "${bert[@]}" "${device[@]}" "${profile[@]}"
  profile_run "profile: t5-v1.1-base, eager" "${profile_limits[0]}" "${t5[@]}" "${device[@]}" "${profile[@]}"
  profile_run "profile: gpt2-small, eager" "${profile_limits[0]}" "${gpt[@]}" "${device[@]}" "${profile[@]}"
  profile_run "profile: bert-base, compiled" "${profile_limits[1]}" "${bert[@]}" "${device[@]}" "${profile[@]}" --compile
  profile_run "profile: gpt2-small, compiled" "${profile_limits[1]}" "${gpt[@]}" "${device[@]}" "${profile[@]}" --compile
  say "(kernel profiles: $((SECONDS - profile_start))s)"
fi

say ""
say "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
