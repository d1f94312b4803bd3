#!/usr/bin/env bash
# Issue 38 §1: a student's stack with its loss compiled together with the logits' cast, in one graph
# (tinystories.train.batch_loss), against the reference in the same call:
#
#   bash benchmarks/gpu_compiled_parts.sh OUTDIR [PYTHON]
#   ROWS="01_reference 02_solutions" bash benchmarks/gpu_compiled_parts.sh OUTDIR   # only the rows named
#
# Every row is `benchmarks/tinystories_gpu.py --steps 40` (the real loop, gpu_h100: bf16, torch.compile, fused
# AdamW for the reference, 32,768 tokens per step; the median of 40 steps after 10 warm-up steps), written as
# OUTDIR/NN_name.{json,md}, and each row's result line to OUTDIR/summary.txt. The two stacks alternate; then
# --split-at-masks (the loss cut at its boolean mask, as before) and --reference-parts rows for where the rest
# of the gap is. The most important rows run first, so a call that runs out of time keeps them. At the end
# everything is packed into OUTDIR.tgz: the device tool brings back only a few files per call.
# (benchmarks/tinystories_gpu.md, 2026-11-27 late: call 1 ran this at commit 1a10150, where a compiled
# clipping, train.compile_clipping, was the default and row 06 turned it off; measured slower, it was removed.)
set -u
source "$(dirname "$0")/_gpu_start.sh"  # $out, $py, OUTDIR/gpu.txt

row() {  # row NAME ARGS...: one measurement, its result line printed and kept in summary.txt
  local name=$1; shift
  [ -z "${ROWS:-}" ] || [[ " $ROWS " == *" $name "* ]] || return 0
  local start=$SECONDS
  timeout 90 "$py" benchmarks/tinystories_gpu.py --steps 40 "$@" --output "$out/$name" > "$out/$name.log" 2>&1
  echo "$name [$*] rc=$? $((SECONDS - start)) s: $(grep -A2 'tokens/s' "$out/$name.md" 2>/dev/null | tail -1)" \
    | tee -a "$out/summary.txt"
  grep -h "could not compile\|Recompil" "$out/$name.log" | head -3
}
row 01_reference
row 02_solutions --stack solutions
row 03_reference
row 04_solutions --stack solutions
row 05_solutions_split_at_masks --stack solutions --split-at-masks
row 06_solutions_reference_loss --stack solutions --reference-parts loss
row 07_solutions_reference_optimizer --stack solutions --reference-parts optimizer
row 08_solutions_reference_clipping --stack solutions --reference-parts clipping
row 09_reference
row 10_solutions --stack solutions
tar czf "$out.tgz" -C "$out" .
