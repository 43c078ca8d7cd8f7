#!/usr/bin/env bash
# Measure this machine's GPU (an H100) with `archplace profile` and keep the tables, the
# command and the machine's description together, for committing.
#
#   bash benchmarks/profile_h100.sh [OUT_DIR] [MAX_SECONDS]
#
# OUT_DIR defaults to benchmarks/profiled/h100; MAX_SECONDS (the budget: no shape starts after
# it, what was measured is written) to 420, which leaves a 10-minute device slot room for the
# start of Python and CUDA.  The full grid (512 GEMMs, 48 attention calls, 30 softmax and 30
# layer-norm shapes, 15 GeLU and 15 copy sizes) is expected to fit; the summary says if the
# budget cut it short.  It uses the machine's own CUDA build of torch (pip extra [gpu] adds
# nothing); run it from the repository root, or anywhere: it changes there itself.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/profiled/h100}"
budget="${2:-420}"
python="${PYTHON:-python3}"
mkdir -p "$out"
{
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# git: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "# command: PYTHONPATH=src $python -m archplace.cli profile --out-dir $out --grid full --device cuda --dtype bf16 --tag h100 --preset h100-80gb --max-seconds $budget"
  "$python" -c 'import torch; print("# torch:", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())'
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv || true
} | tee "$out/machine.txt"
PYTHONPATH=src "$python" -m archplace.cli profile --out-dir "$out" --grid full --device cuda --dtype bf16 \
  --tag h100 --preset h100-80gb --max-seconds "$budget" 2>&1 | tee "$out/summary.txt"
