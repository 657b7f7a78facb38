#!/usr/bin/env bash
# Issue 30's GPU check, one command from a source tree (under 6 minutes on one H100):
#     bash benchmarks/gpu_check.sh [--out DIR] [--shm DIR]
# Needs python with torch (CUDA), numpy, h5py, click, rich, pyyaml, pillow; pytest is optional (the CUDA unit tests
# are skipped, and the table says so, without it). No MPI, no network. Prints one table at the end; the figures
# are also written to DIR/gpu_check.json (default results/gpu_check).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
exec "$PY" benchmarks/gpu_check.py "$@"
