#!/usr/bin/env bash
# Issue 38 §1 and issue 37's vocabulary padding on one GPU, in one call of a few minutes:
#
#   bash benchmarks/gpu_student_stack.sh OUTDIR [PYTHON]
#
# Every row is `benchmarks/tinystories_gpu.py --steps 40` (the real loop, gpu_h100: bf16, torch.compile, fused
# AdamW, 32,768 tokens per step; the median of 40 steps after 10 warm-up steps), written as OUTDIR/NN_name.{json,md}.
# - a student's stack (the solutions' parts) with its loss compiled (train.compile_loss, the default) and
#   without (the code before), against the reference in the same call;
# - --reference-parts rows: where any remaining gap is (the loss alone; the optimizer and clipping);
# - the output layer with 10,000 rows (the configs' vocabulary) and padded to 10,048 (a multiple of 64),
#   alternated, each twice. The model's rows are data.vocab_size; throughput does not depend on the text.
set -u
source "$(dirname "$0")/_gpu_start.sh"  # $out, $py, OUTDIR/gpu.txt

row() {  # row NAME ARGS...: one measurement, its last lines printed
  local name=$1; shift
  echo "== $name: $*"
  timeout 120 "$py" benchmarks/tinystories_gpu.py --steps 40 "$@" --output "$out/$name" 2>&1 | tail -3
}
row 01_reference
row 02_solutions --stack solutions
row 03_solutions_loss_eager --stack solutions --set train.compile_loss=false
row 04_solutions_reference_loss --stack solutions --reference-parts loss
row 05_solutions_reference_optimizer_clipping --stack solutions --reference-parts optimizer,clipping
row 06_reference_vocab_10048 --set data.vocab_size=10048
row 07_reference_vocab_10000 --set data.vocab_size=10000
row 08_reference_vocab_10048 --set data.vocab_size=10048
row 09_reference_vocab_10000 --set data.vocab_size=10000
