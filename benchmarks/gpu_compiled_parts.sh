#!/usr/bin/env bash
# Issue 38 §1: a student's stack with its loss compiled together with the logits' cast, in one graph, and its
# gradient clipping compiled (tinystories.train.batch_loss, step_parts), against the reference in the same call:
#
#   bash benchmarks/gpu_compiled_parts.sh OUTDIR [PYTHON]
#
# Every row is `benchmarks/tinystories_gpu.py --steps 40` (the real loop, gpu_h100: bf16, torch.compile, fused
# AdamW for the reference, 32,768 tokens per step; the median of 40 steps after 10 warm-up steps), written as
# OUTDIR/NN_name.{json,md}. The two stacks alternate; then one row per change, each turned off alone
# (--split-at-masks: the loss cut at its boolean mask; compile_clipping=false), and --reference-parts rows for
# where the rest of the gap is. The most important rows run first, so a call that runs out of time keeps them.
set -u
out=${1:?usage: gpu_compiled_parts.sh OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
"$py" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"

row() {  # row NAME ARGS...: one measurement, its result line printed
  local name=$1; shift
  local start=$SECONDS
  echo "== $name: $*"
  timeout 90 "$py" benchmarks/tinystories_gpu.py --steps 40 "$@" --output "$out/$name" > "$out/$name.log" 2>&1
  echo "   rc=$? $((SECONDS - start)) s: $(grep -A2 'tokens/s' "$out/$name.md" 2>/dev/null | tail -1)"
  grep -h "could not compile\|Recompil" "$out/$name.log" | head -3
}
row 01_reference
row 02_solutions --stack solutions
row 03_reference
row 04_solutions --stack solutions
row 05_solutions_split_at_masks --stack solutions --split-at-masks
row 06_solutions_clipping_eager --stack solutions --set train.compile_clipping=false
row 07_solutions_reference_loss --stack solutions --reference-parts loss
row 08_solutions_reference_optimizer --stack solutions --reference-parts optimizer
row 09_reference
row 10_solutions --stack solutions
