#!/usr/bin/env bash
# The white-box learning run on CPU, stage by stage (README, "Training"): SFT warm start from oracle
# demonstrations of the train split, the warm start's pass@1 on a TRAIN slice (for the group-size
# check, never the held-out split), GRPO on train:easy, an lr=0 control of the same code path, and
# the paired evaluation on held-out test:easy tasks under the cpu preset's episode conditions.
#
#   bash scripts/learning_run.sh                 # every stage, in order, into runs/lr
#   STAGES="grpo eval" bash scripts/learning_run.sh   # from a stage on (each stage's output is kept)
#
# Sizes are environment variables (defaults: the issue's scale, about 4 hours on a 2-core CPU):
#   SFT_N=128 GRPO_MINUTES=60 (as many steps as fit; GRPO_STEPS caps them) SAVE_STEPS=8
#   TRAIN_LIMIT=24 TRAIN_SAMPLES=2 EVAL_LIMIT=64 EVAL_SAMPLES=4
#   CONTROL_STEPS: default the GRPO run's own step count (an lr=0 run of the same length; AdamW
#   with lr 0 leaves every weight bit-identical, which the stage checks, and the control is then
#   evaluated like the other arms: what moves there is evaluation noise, not learning)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/lr}
PY=.venv/bin/python
DAGENT=.venv/bin/dagent
STAGES=${STAGES:-"sft base grpo control eval eval-control"}
SFT_N=${SFT_N:-128}; GRPO_MINUTES=${GRPO_MINUTES:-60}; GRPO_STEPS=${GRPO_STEPS:-400}; SAVE_STEPS=${SAVE_STEPS:-8}
TRAIN_LIMIT=${TRAIN_LIMIT:-24}; TRAIN_SAMPLES=${TRAIN_SAMPLES:-2}
EVAL_LIMIT=${EVAL_LIMIT:-64}; EVAL_SAMPLES=${EVAL_SAMPLES:-4}
WORKERS=${WORKERS:-4}
mkdir -p "$OUT"
stage() { echo "== $(date -u +%H:%M:%S) $1"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has sft; then
  stage "sft: $SFT_N demonstrations of train:easy"
  $PY jobs/sft_warmstart.py --model smollm2-135m --tools bash --n "$SFT_N" --batch-size 4 --grad-accum 2 --out "$OUT/sft"
fi
if has base; then
  stage "base: the warm start's pass@1 on train:easy ($TRAIN_LIMIT seeded tasks x $TRAIN_SAMPLES), cpu preset"
  $DAGENT eval --agent tools --preset cpu --model "$OUT/sft/final" --split train:easy --limit "$TRAIN_LIMIT" \
    --task-seed 0 --samples "$TRAIN_SAMPLES" --workers "$WORKERS" --out "$OUT/base-train"
fi
base_pass1() {
  .venv/bin/python - "$OUT/base-train" <<'EOF'
import json, sys
from pathlib import Path
s = json.loads((Path(sys.argv[1]) / "scores.json").read_text())
print(next(iter(s.values()))["pass_at"]["1"])
EOF
}
if has grpo; then
  P=$(base_pass1)
  stage "grpo: $GRPO_MINUTES minutes (at most $GRPO_STEPS steps) on train:easy from the warm start (base pass@1 on train $P)"
  $DAGENT train whitebox --preset cpu --model "$OUT/sft/final" --base-pass1 "$P" --max-steps "$GRPO_STEPS" \
    --max-minutes "$GRPO_MINUTES" --save-steps "$SAVE_STEPS" --out "$OUT/grpo" --run-name grpo ${FORCE:+--force}
  LAST=$(ls -d "$OUT"/grpo/checkpoint-* | sort -t- -k2 -n | tail -1)
  $PY -m dagent.train.curves "$LAST" --out "$OUT/grpo_curves.png"
  $PY benchmarks/train.py --from "$OUT/grpo"
fi
grpo_steps() {
  .venv/bin/python - "$OUT/grpo" <<'EOF'
import json, sys
from pathlib import Path
last = max(Path(sys.argv[1]).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
print(json.loads((last / "trainer_state.json").read_text())["global_step"])
EOF
}
if has control; then
  P=$(base_pass1)
  G_STEPS=$(grpo_steps); CONTROL_STEPS=${CONTROL_STEPS:-$G_STEPS}
  stage "control: lr=0, $CONTROL_STEPS steps (the GRPO run's length: $G_STEPS), same code path"
  $DAGENT train whitebox --preset cpu --model "$OUT/sft/final" --base-pass1 "$P" --max-steps "$CONTROL_STEPS" \
    --learning-rate 0 --save-steps "$CONTROL_STEPS" --out "$OUT/control" --run-name control ${FORCE:+--force}
  $PY - "$OUT/sft/final" "$OUT/control/final" <<'EOF'
import sys
from safetensors.torch import load_file
a, b = (load_file(f"{d}/model.safetensors") for d in sys.argv[1:])
same = a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and bool((a[k] == b[k]).all()) for k in a)
print(f"control weights bit-identical to the warm start: {same} ({len(a)} tensors)")
sys.exit(0 if same else 1)
EOF
fi
if has eval; then
  CKPT=${CKPT:-$OUT/grpo/final}
  stage "eval: $CKPT vs the warm start, test:easy $EVAL_LIMIT seeded tasks x $EVAL_SAMPLES, both served at once"
  $DAGENT eval --agent tools --preset cpu --model "$CKPT" --baseline "$OUT/sft/final" --split test:easy \
    --limit "$EVAL_LIMIT" --task-seed 0 --samples "$EVAL_SAMPLES" --workers "$WORKERS" --out "$OUT/eval"
fi
if has eval-control; then
  stage "eval-control: the lr=0 control vs the warm start, the same tasks and samples, both served at once"
  $DAGENT eval --agent tools --preset cpu --model "$OUT/control/final" --baseline "$OUT/sft/final" --split test:easy \
    --limit "$EVAL_LIMIT" --task-seed 0 --samples "$EVAL_SAMPLES" --workers "$WORKERS" --out "$OUT/eval-control"
fi
stage done
