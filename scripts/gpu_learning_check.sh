#!/usr/bin/env bash
# The learning check on a lent GPU (prepared; run it with the `device` tool when a session has one):
# the training signal's direction (tests/train/test_direction.py's white-box check: real steered
# rollouts, one step, each rollout's trained tokens move its advantage's way, a flipped sign fails)
# on the GPU, then a short white-box GRPO run of the tiny Qwen3 through dagent's tool environment for
# MINUTES (default 8), printing the reward per step and rollouts trained per hour. No vLLM there:
# transformers generation. Never needed for CI.
#
#   bash scripts/gpu_learning_check.sh --prepare      # HERE: wheels of what the GPU image lacks -> .gpu_wheels/
#   device run: bash scripts/gpu_learning_check.sh    # THERE, carry [".gpu_wheels"], timeout_s 600
#   bash scripts/gpu_learning_check.sh --device cpu   # the same path on this CPU (MINUTES=1 for a quick look)
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${MINUTES:-8}
if [ "${1:-}" = "--prepare" ]; then
  # the GPU image has torch, transformers, accelerate, peft, pandas, pyarrow, httpx, pydantic; not these
  mkdir -p .gpu_wheels
  grep -q '^/.gpu_wheels/' .git/info/exclude 2>/dev/null || echo /.gpu_wheels/ >> .git/info/exclude
  .venv/bin/pip download --only-binary=:all: --no-deps -d .gpu_wheels \
    "$(.venv/bin/pip freeze | grep -i '^trl==')" "$(.venv/bin/pip freeze | grep -i '^datasets==')" \
    "$(.venv/bin/pip freeze | grep -i '^openenv-core==\|^openenv==' | head -1)" "$(.venv/bin/pip freeze | grep -i '^multiprocess==')" \
    "$(.venv/bin/pip freeze | grep -i '^dill==')" "$(.venv/bin/pip freeze | grep -i '^math-verify==')" \
    "$(.venv/bin/pip freeze | grep -i '^latex2sympy2-extended==')" "$(.venv/bin/pip freeze | grep -i '^fastapi==')" \
    "$(.venv/bin/pip freeze | grep -i '^starlette==')" "$(.venv/bin/pip freeze | grep -i '^uvicorn==')"
  du -sh .gpu_wheels
  exit 0
fi
PY=${PYTHON:-python3}
DEVICE=cuda
[ "${1:-}" = "--device" ] && DEVICE=$2
if [ "$DEVICE" = cuda ]; then
  [ -d .gpu_wheels ] && $PY -m pip install -q --no-index --no-deps .gpu_wheels/*.whl
  command -v bwrap >/dev/null || echo "note: no bubblewrap on this machine: the sandbox falls back as dagent's local backend allows"
  $PY -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null || export PYTHONPATH=$PWD
else
  PY=.venv/bin/python
fi
export TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py --device "$DEVICE" --stages direction,learning --minutes "$MINUTES"
