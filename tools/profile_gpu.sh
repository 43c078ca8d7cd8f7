#!/usr/bin/env bash
# The measurement run behind the shipped *_profiled tables (src/archplace/cost/measured/): on a
# machine with one CUDA GPU and a CUDA build of PyTorch, from the repository root,
#
#     PRESET=h200-141gb TAG=h200 OUT=/some/dir tools/profile_gpu.sh
#
# times archplace profile's full grid in bf16 (GEMMs, FlashAttention-2, softmax, layer norm,
# GeLU, copy), the GEMMs again in FP8, attention again with cuDNN's fused kernel, then loads the
# GPU for SUSTAINED_S seconds to read the SM clock it sustains, and records nvidia-smi's view of
# the board before and after.  Everything lands in $OUT/profile_$TAG.tgz (rewritten after each
# step, so a run stopped early keeps what it measured).  Runs from a source tree: archplace is
# imported from src/ (PYTHONPATH), with the machine's own torch; no install.
set -u
PRESET=${PRESET:--}
TAG=${TAG:-gpu}
GRID=${GRID:-full}
DEVICE=${DEVICE:-cuda}
SUSTAINED_S=${SUSTAINED_S:-60}
OUT=${OUT:-.}
PY=${PY:-python3}
DIR=measured-$TAG
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
rm -rf "$DIR" && mkdir -p "$DIR"

pack() { tar czf "$OUT/profile_$TAG.tgz" "$DIR"; }
smi() { command -v nvidia-smi >/dev/null && nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,TEMPERATURE >"$DIR/nvidia_smi_$1.txt" 2>&1; }
profile() { "$PY" -m archplace.cli profile --grid "$GRID" --device "$DEVICE" --preset "$PRESET" "$@" 2>&1 | tee -a "$DIR/log.txt"; pack; }

smi before
{ "$PY" -c 'import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda)'
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.max.mem,memory.total --format=csv
} >"$DIR/machine.txt" 2>&1
pack
profile --out-dir "$DIR/bf16" --dtype bf16 --tag "$TAG" --max-seconds 240
profile --out-dir "$DIR/fp8" --dtype fp8 --kernel gemm --tag "$TAG-fp8" --max-seconds 120
if [ "$DEVICE" != cpu ]; then
  profile --out-dir "$DIR/cudnn" --dtype bf16 --kernel attention --attention cudnn --tag "$TAG-cudnn" \
          --max-seconds 60 --sustained "$SUSTAINED_S"
fi
smi after
pack
ls -lR "$DIR"
