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
#
#   bash bench/gpu_figures.sh            # from the repository root, on the GPU machine
#   bash bench/gpu_figures.sh --product  # 1-3, then 4
#   bash bench/gpu_figures.sh --smoke    # the same commands on the CPU with tiny presets and two
#                                        # steps (compile backend aot_eager): checks the plumbing
#                                        # (--smoke --product: and pretrain_product.py --smoke)
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
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    --product) PRODUCT=1 ;;
    *) echo "usage: bash bench/gpu_figures.sh [--smoke] [--product]" >&2; exit 2 ;;
  esac
done

if [ "$SMOKE" = 1 ]; then
  common=(--device cpu --precision fp32 --steps 2 --warmup 1 --compile-backend aot_eager)
  bert=(--model bert-mini --batch-size 2 --seq-len 32 --vocab 1000)
  t5=(--model t5-tiny --set version=1.1 --batch-size 2 --seq-len 32 --vocab 1000)
  gpt=(--model gpt-tiny --batch-size 2 --seq-len 32 --vocab 1000)
  limit=600
else
  common=(--device cuda --precision bf16)
  # bert-base as BERT's 90% phase trains it (128 tokens; batch 256 as in the paper), 20 timed steps
  bert=(--model bert-base --batch-size 256 --seq-len 128 --steps 20)
  # T5's span corruption shapes: 512 input tokens, 114 target tokens; 32 rows (64 ran out of the
  # H100's 80 GB with both models held; T5 used 128)
  t5=(--model t5-base --set version=1.1 --batch-size 32 --seq-len 512 --steps 10)
  # GPT-2's context of 1024 tokens, its 50257-token vocabulary
  gpt=(--model gpt2-small --vocab 50257 --batch-size 16 --seq-len 1024 --steps 20)
  limit=240
fi

log=/dev/null
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  log="$OUT/gpu_figures.txt"
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
  timeout "$limit" "$PY" bench/train_throughput.py "$@" 2>&1 | grep -v "Loading weights" | tee -a "$log"
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

run "bert-base MFU, bf16, eager and compiled (ours vs transformers)" "${bert[@]}" "${common[@]}" --compile
run "t5-v1.1-base step time, bf16, eager and compiled (ours vs transformers)" "${t5[@]}" "${common[@]}" --compile
run "gpt2-small MFU, bf16, eager and compiled (ours vs transformers)" "${gpt[@]}" "${common[@]}" --compile

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
say ""
say "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
