# Sourced by the GPU scripts (gpu_session.sh, gpu_student_stack.sh, gpu_compiled_parts.sh) with their arguments,
# OUTDIR [PYTHON]: sets $out and $py (python3 by default: the GPU machine's own torch), creates OUTDIR and
# records the GPU, its driver and torch's version in OUTDIR/gpu.txt.
out=${1:?usage: $(basename "$0") OUTDIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
"$py" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"
