#!/usr/bin/env bash
# The prepared GPU check (scripts/gpu_check.py): SFT, white-box GRPO and the in-process engine on one
# accelerator, each with a receipt. `--device cpu` runs the same path on a CPU (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export TRL_EXPERIMENTAL_SILENCE=1
exec "$PY" scripts/gpu_check.py "$@"
