#!/usr/bin/env bash
# Every GPU measurement of benchmarks/tinystories_gpu.md in one go, for a GPU lent for a few minutes.
#
#   bash benchmarks/gpu_session.sh OUTDIR [PYTHON]
#
# Writes OUTDIR/{reference,solutions,math}.{json,md} (benchmarks/tinystories_gpu.py), OUTDIR/preflight.txt
# (the student's first command on a rented GPU, on the shipped sample) and OUTDIR/train_step_gpu_*.json
# (benchmarks/train_step.py). Each step has its own time limit, so one that hangs costs only itself. PYTHON defaults to python3 (the GPU machine's own torch).
set -u
source "$(dirname "$0")/_gpu_start.sh"  # $out, $py, OUTDIR/gpu.txt

timeout 150 "$py" benchmarks/tinystories_gpu.py --output "$out/reference" | tail -4
timeout 150 "$py" benchmarks/tinystories_gpu.py --stack solutions --output "$out/solutions" | tail -4
timeout 120 "$py" benchmarks/tinystories_gpu.py --set train.attention=math --output "$out/math" | tail -4
# Which of a student's parts costs the time (each row keeps the solutions' parts except the one named).
for part in loss optimizer clipping; do
  timeout 100 "$py" benchmarks/tinystories_gpu.py --stack solutions --reference-parts $part \
    --output "$out/solutions_reference_$part" | tail -4
done
# Whether a warm FX graph cache still trains slower (23% with PyTorch 2.11 on an H100 and an H200, which is why
# train.compile_cache defaults to false; benchmarks/tinystories_gpu.md): the first run with the cache on fills
# it, the second loads it. Compare the second with the reference row above.
for round in fill load; do
  timeout 120 "$py" benchmarks/tinystories_gpu.py --set train.compile_cache=true \
    --output "$out/reference_compile_cache_$round" | tail -4
done

data=$(mktemp -d)
timeout 60 "$py" -m tinystories prepare --config gpu_h100 --set data.source=sample --set "data.dir=$data" --quiet \
  > /dev/null
timeout 150 "$py" -m tinystories preflight --config gpu_h100 --stack reference --quiet --set data.source=sample \
  --set "data.dir=$data" --out "$data/run" 2>&1 | tee "$out/preflight.txt"

# One training step of the course's ModernDecoder against HF's LlamaForCausalLM (sdpa), same shapes, bf16
# autocast, each config's own micro-batch (benchmarks/train_step.md): OUTDIR/train_step_gpu_{eager,compile}.json
# and OUTDIR/train_step.md. Copy the two JSON files to benchmarks/ and run
# `python benchmarks/train_step.py --render` to put them next to the CPU numbers.
timeout 180 "$py" benchmarks/train_step.py --device cuda --dtype bf16 --modes eager \
  --output "$out/train_step_gpu_eager" | grep -E "tokens/s|parameters"
timeout 360 "$py" benchmarks/train_step.py --device cuda --dtype bf16 --modes compile \
  --output "$out/train_step_gpu_compile" | grep -E "tokens/s|parameters"
