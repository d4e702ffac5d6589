#!/usr/bin/env bash
# The white-box learning protocol on CPU (docs/learning.md), stage by stage: SFT warm start from
# oracle demonstrations of the train split, the warm start's pass@1 on a TRAIN slice (for the
# group-size check), then for each seed GRPO on train:easy and its permuted-reward control (the same
# run, each batch's rewards shuffled across its rollouts, F52), and the paired evaluation of every
# arm against the warm start and GRPO against its control on the held-out EVAL split (eval:easy),
# which no choice looks at (`test` is for choosing), under the cpu preset's episode conditions.
#
#   bash scripts/learning_run.sh                      # every stage, in order, into runs/lr
#   STAGES="grpo eval" bash scripts/learning_run.sh   # from a stage on (each stage's output is kept)
#
# Sizes are environment variables (defaults: about 3 x 2 hours on a 2-core CPU):
#   SEEDS="0 1 2" SFT_N=128 GRPO_MINUTES=60 (as many steps as fit; GRPO_STEPS caps them) SAVE_STEPS=8
#   TRAIN_LIMIT=24 TRAIN_SAMPLES=2 EVAL_LIMIT=64 EVAL_SAMPLES=4 EVAL_SPLIT=eval:easy
#   The control of a seed runs the GRPO run's own step count, its learning rate and its seed.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/lr}
PY=.venv/bin/python
DAGENT=.venv/bin/dagent
STAGES=${STAGES:-"sft base grpo control eval"}
SEEDS=${SEEDS:-"0 1 2"}; EVAL_SPLIT=${EVAL_SPLIT:-eval:easy}
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
  for S in $SEEDS; do
    stage "grpo seed $S: $GRPO_MINUTES minutes (at most $GRPO_STEPS steps) on train:easy from the warm start (base pass@1 on train $P)"
    $DAGENT train whitebox --preset cpu --model "$OUT/sft/final" --base-pass1 "$P" --max-steps "$GRPO_STEPS" --seed "$S" \
      --max-minutes "$GRPO_MINUTES" --save-steps "$SAVE_STEPS" --out "$OUT/grpo-$S" --run-name "grpo-$S" ${FORCE:+--force}
    LAST=$(ls -d "$OUT/grpo-$S"/checkpoint-* | sort -t- -k2 -n | tail -1)
    $PY -m dagent.train.curves "$LAST" --out "$OUT/grpo-${S}_curves.png"
  done
fi
grpo_steps() {
  .venv/bin/python - "$1" <<'EOF'
import json, sys
from pathlib import Path
last = max(Path(sys.argv[1]).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
print(json.loads((last / "trainer_state.json").read_text())["global_step"])
EOF
}
if has control; then
  P=$(base_pass1)
  for S in $SEEDS; do
    G_STEPS=$(grpo_steps "$OUT/grpo-$S")
    stage "control seed $S: rewards permuted within each batch, $G_STEPS steps (the GRPO run's), same lr, seed and code path"
    $DAGENT train whitebox --preset cpu --model "$OUT/sft/final" --base-pass1 "$P" --max-steps "$G_STEPS" --seed "$S" \
      --control permuted --save-steps "$SAVE_STEPS" --out "$OUT/control-$S" --run-name "control-$S" ${FORCE:+--force}
  done
fi
if has eval; then
  for S in $SEEDS; do
    stage "eval seed $S: GRPO and its control vs the warm start, $EVAL_SPLIT $EVAL_LIMIT seeded tasks x $EVAL_SAMPLES"
    $DAGENT eval --agent tools --preset cpu --model "$OUT/grpo-$S/final" --baseline "$OUT/sft/final" --split "$EVAL_SPLIT" \
      --limit "$EVAL_LIMIT" --task-seed 0 --samples "$EVAL_SAMPLES" --workers "$WORKERS" --out "$OUT/eval-$S"
    $DAGENT eval --agent tools --preset cpu --model "$OUT/control-$S/final" --baseline "$OUT/sft/final" \
      --split "$EVAL_SPLIT" --limit "$EVAL_LIMIT" --task-seed 0 --samples "$EVAL_SAMPLES" --workers "$WORKERS" \
      --out "$OUT/eval-control-$S"
    arm() { find "$1" -mindepth 1 -maxdepth 1 -type d ! -name baseline ! -name trackio | head -1; }
    ARM=$(arm "$OUT/eval-$S"); CARM=$(arm "$OUT/eval-control-$S")
    $DAGENT eval compare "$CARM" "$ARM" --out "$OUT/grpo-vs-control-$S"
  done
fi
stage done
