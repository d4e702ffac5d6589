#!/usr/bin/env bash
# The learning protocol on CPU (docs/learning.md), for one loop, stage by stage:
#   sft      the warm start: white-box, oracle demonstrations through the tool loop; black-box,
#            demonstrations in the harness's own format (the real harness replaying the reference
#            program, captured as training captures: dagent.train.blackbox.harness_demos)
#   base     the warm start's pass@1 on a TRAIN slice (for the group-size check, F39)
#   grpo     per seed: GRPO on TRAIN_SPLIT (default train:easy) from the warm start
#   control  per seed: the same run with each batch's rewards permuted across its rollouts (F52)
#   watch    per seed: held-out pass@1 on TEST at every saved checkpoint (dagent eval watch)
#   eval     the warm start once, then per seed GRPO and its control, on the untouched EVAL split (the same
#            seeded tasks and samples for every arm: the warm start's evaluation is each seed's baseline)
#   pool     GRPO - warm start, GRPO - control, control - warm start: per seed and pooled over seeds
#            (dagent eval pool: a bootstrap that resamples seeds, then tasks)
#   report   one results.md (dagent.eval.learning_report): the sizes, each arm's pass@1, the pooled tables and
#            forest plots (a seed pools only with both arms), the held-out pass@1 per checkpoint per seed
#            (dagent.eval.watch_curves), the training curves; REPORT_FROM=docs/runs/lr-$LOOP reports the
#            records sittings on other machines published instead, into $OUT/report
#   publish  (named only) the records of this sitting's evaluations into PUBLISH (default docs/runs/lr-$LOOP):
#            base-train.jsonl, warm.jsonl, seed-S/grpo.jsonl, seed-S/control.jsonl, each with a .json beside it
#            (the warm start's sha256, the arm's steps, the commit, the CPU, the episode conditions), each
#            arm's trainer_state.json (its curves' data) and a finished watch's records (seed-S/watch/POINT.jsonl,
#            the held-out curve's data), so a run made in sittings on machines that do not outlive their
#            session is pooled and reported from the repository (docs/learning.md)
#
# Sittings of one arm (docs/learning.md): EVAL_ARMS="warm grpo control" (default) names the evaluations the
# eval stage opens, each once its own arm reached GRPO_STEPS; BASE_EVAL=docs/runs/lr-whitebox/base-train.jsonl
# takes the group-size check's per-task rates (and --mixed-only's tasks) from a published base evaluation
# instead of running the base stage again.
#
#   LOOP=whitebox bash scripts/learning_run.sh                # every stage, in order, into runs/lr-whitebox
#   LOOP=blackbox HARNESS=pi bash scripts/learning_run.sh     # the black-box loop (pi) into runs/lr-blackbox
#   STAGES="pool report" bash scripts/learning_run.sh         # from a stage on (each stage's output is kept)
#
# Resumable, so the protocol runs in sittings of under 2 hours: a finished piece (the warm start, an
# evaluation, an arm that reached GRPO_STEPS) is skipped, marked by $OUT/.done/<piece>; a GRPO or
# control arm that stopped short (killed, or at its sitting's GRPO_MINUTES) continues from its last
# checkpoint-N with its optimizer, scheduler and RNG state (--resume-from). REDO=1 ignores the marks.
# DRY_RUN=1 prints each command instead of running it.
#
# Sizes are environment variables (white-box defaults: about 3 x 2 hours on a 2-core CPU):
#   SEEDS="0 1 2" CONTROL_SEEDS= (the seeds with a permuted control arm; default: every seed) SFT_N=128 SFT_STEPS=-1 SFT_SPLIT=train:easy (where demonstrations come from: train or train:<tier>) GRPO_STEPS=400 (an arm is finished at GRPO_STEPS) GRPO_MINUTES=60 (one
#   sitting's budget for one arm: it checkpoints and stops there, and the next sitting resumes it)
#   MIXED_ONLY=1 (train only on the tasks the base stage measured between 0.2 and 0.8, F55) GROUPS_PER_STEP=1 (groups a step)
#   NUM_GENERATIONS= (rollouts a group; default: the preset's)
#   SAVE_STEPS=8 TRAIN_SPLIT=train:easy TRAIN_LIMIT=24 TRAIN_SAMPLES=2 EVAL_LIMIT=64 EVAL_SAMPLES=4 EVAL_SPLIT=eval:easy
#   WATCH_SPLIT=test:easy WATCH_LIMIT=32 WATCH_SAMPLES=1 MODEL=smollm2-135m SUITE= (default: the bundled one)
#   The control of a seed runs the GRPO run's own step count, its learning rate and its seed. The group-size
#   check reads each task's own rate from the base stage's evaluation (--base-eval, F55).
set -euo pipefail
cd "$(dirname "$0")/.."
LOOP=${LOOP:-whitebox}; HARNESS=${HARNESS:-pi}
case "$LOOP" in
  whitebox) AGENT=tools ;;
  blackbox) AGENT=$HARNESS ;;
  *) echo "LOOP must be whitebox or blackbox" >&2; exit 2 ;;
esac
OUT=${OUT:-runs/lr-$LOOP}
PY=.venv/bin/python
DAGENT=.venv/bin/dagent
STAGES=${STAGES:-"sft base grpo control watch eval pool report"}  # publish: only when named
SEEDS=${SEEDS:-"0 1 2"}; CONTROL_SEEDS=${CONTROL_SEEDS:-$SEEDS}; EVAL_SPLIT=${EVAL_SPLIT:-eval:easy}; EVAL_ARMS=${EVAL_ARMS:-"warm grpo control"}
BASE_EVAL=${BASE_EVAL:-}
SFT_N=${SFT_N:-128}; SFT_STEPS=${SFT_STEPS:--1}; SFT_SPLIT=${SFT_SPLIT:-train:easy}; NUM_GENERATIONS=${NUM_GENERATIONS:-}
GRPO_MINUTES=${GRPO_MINUTES:-60}; GRPO_STEPS=${GRPO_STEPS:-400}; SAVE_STEPS=${SAVE_STEPS:-8}
TRAIN_SPLIT=${TRAIN_SPLIT:-train:easy}; TRAIN_LIMIT=${TRAIN_LIMIT:-24}; TRAIN_SAMPLES=${TRAIN_SAMPLES:-2}
EVAL_LIMIT=${EVAL_LIMIT:-64}; EVAL_SAMPLES=${EVAL_SAMPLES:-4}
WATCH_SPLIT=${WATCH_SPLIT:-test:easy}; WATCH_LIMIT=${WATCH_LIMIT:-32}; WATCH_SAMPLES=${WATCH_SAMPLES:-1}
WORKERS=${WORKERS:-4}; MODEL=${MODEL:-smollm2-135m}; MIXED_ONLY=${MIXED_ONLY:-}; GROUPS_PER_STEP=${GROUPS_PER_STEP:-1}
SUITE_ARGS=(); [ -n "${SUITE:-}" ] && SUITE_ARGS=(--suite "$SUITE")
mkdir -p "$OUT/.done"
stage() { echo "== $(date -u +%H:%M:%S) $LOOP: $1"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
controlled() { [[ " $CONTROL_SEEDS " == *" $1 "* ]]; }  # a seed with a permuted control arm
trained() { [ "$1" = grpo ] || controlled "$2"; }  # trained RUN SEED: the seed has that arm (GRPO: every seed)
run() { if [ -n "${DRY_RUN:-}" ]; then echo "+ $*"; else "$@"; fi; }
finished() { [ -z "${REDO:-}" ] && [ -f "$OUT/.done/$1" ] && echo "   $1: finished in an earlier sitting, skipped"; }
mark() { [ -n "${DRY_RUN:-}" ] || touch "$OUT/.done/$1"; }
last_checkpoint() {  # the highest checkpoint-N by N (the path's other dashes do not count)
  { ls -d "$1"/checkpoint-* 2>/dev/null || true; } | awk -F'checkpoint-' '{print $NF "\t" $0}' | sort -n | tail -1 | cut -f2
}
step_of() {  # the global step a checkpoint holds (0 for none)
  if [ -n "$1" ] && [ -f "$1/trainer_state.json" ]; then
    $PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["global_step"])' "$1/trainer_state.json"
  else echo 0; fi
}
arm_run() {  # arm_run NAME STEPS ARGS...: train an arm to STEPS, resuming from its last checkpoint; marks it finished there
  local name=$1 steps=$2; shift 2
  finished "$name" && return 0
  local dir="$OUT/$name" resume=() last
  last=$(last_checkpoint "$dir")
  if [ -n "$last" ]; then
    if [ "$(step_of "$last")" -ge "$steps" ]; then mark "$name"; echo "   $name: at step $steps already"; return 0; fi
    echo "   $name: resuming from $last (step $(step_of "$last") of $steps: optimizer, scheduler and RNG state)"
    resume=(--resume-from "$last")
  fi
  run train "$@" --max-steps "$steps" --out "$dir" "${resume[@]}"
  last=$(last_checkpoint "$dir")
  if [ -n "${DRY_RUN:-}" ] || [ "$(step_of "$last")" -ge "$steps" ]; then mark "$name"
  else echo "   $name: stopped at step $(step_of "$last") of $steps (its sitting's GRPO_MINUTES); rerun to resume"; fi
}
train() {  # the loop's trainer, with the arguments both arms share
  if [ "$LOOP" = whitebox ]; then $DAGENT train whitebox --preset cpu "${SUITE_ARGS[@]}" "$@"
  else $DAGENT train blackbox --mode sync --preset cpu --harness "$HARNESS" "${SUITE_ARGS[@]}" "$@"; fi
}
evaluate() { run $DAGENT eval --agent "$AGENT" --preset cpu --task-seed 0 --workers "$WORKERS" "${SUITE_ARGS[@]}" "$@"; }
evaluated() {  # evaluated NAME ARGS...: one evaluation into $OUT/NAME, skipped once finished, redone whole if cut short
  local name=$1; shift
  finished "$name" && return 0
  [ -n "${DRY_RUN:-}" ] || rm -rf "${OUT:?}/$name"
  evaluate "$@" --out "$OUT/$name" && mark "$name"
}
arm() { find "$1" -mindepth 1 -maxdepth 1 -type d ! -name baseline ! -name trackio | head -1; }

if has sft && ! finished sft; then
  if [ "$LOOP" = whitebox ]; then
    stage "sft: $SFT_N tool-loop demonstrations of $SFT_SPLIT"
    run $PY jobs/sft_warmstart.py --model "$MODEL" --tools bash --split "$SFT_SPLIT" --n "$SFT_N" --max-steps "$SFT_STEPS" \
      --batch-size 4 --grad-accum 2 --out "$OUT/sft" "${SUITE_ARGS[@]}"
  else
    stage "sft: $SFT_N $HARNESS demonstrations of $SFT_SPLIT in the harness's own format"
    run $PY jobs/sft_warmstart.py --model "$MODEL" --harness "$HARNESS" --split "$SFT_SPLIT" --n "$SFT_N" --max-steps "$SFT_STEPS" \
      --batch-size 2 --grad-accum 1 --out "$OUT/sft" "${SUITE_ARGS[@]}"  # docs/training.md: 64 rows, 32 steps
  fi
  mark sft
fi
if has base; then
  stage "base: the warm start's pass@1 on $TRAIN_SPLIT ($TRAIN_LIMIT seeded tasks x $TRAIN_SAMPLES), cpu preset"
  if [ -n "$BASE_EVAL" ]; then echo "   base: taken from the published evaluation $BASE_EVAL"
  else evaluated base-train --model "$OUT/sft/final" --split "$TRAIN_SPLIT" --limit "$TRAIN_LIMIT" --samples "$TRAIN_SAMPLES"; fi
fi
base_records() { if [ -n "$BASE_EVAL" ]; then echo "$BASE_EVAL"; else echo "$OUT/base-train"; fi; }
base_pass1() {
  if [ -n "${DRY_RUN:-}" ] && [ -z "$BASE_EVAL" ] && [ ! -f "$OUT/base-train/scores.json" ]; then echo 0.5; return; fi
  $PY - "$(base_records)" <<'EOF'
import json, sys
from pathlib import Path
where = Path(sys.argv[1])
if where.suffix == ".jsonl":  # a published evaluation's records: the mean over its graded samples
    from dagent.train.preflight import TaskRates
    print(TaskRates.read(where).mean)
else:
    s = json.loads((where / "scores.json").read_text())
    print(next(iter(s.values()))["pass_at"]["1"])
EOF
}
shared() {  # what both arms of a seed train with: the base evaluation's per-task rates (F55), a sitting's budget
  echo --model "$OUT/sft/final" --split "$TRAIN_SPLIT" --base-pass1 "$(base_pass1)" --base-eval "$(base_records)" \
    ${MIXED_ONLY:+--mixed-only} --save-steps "$SAVE_STEPS" --max-minutes "$GRPO_MINUTES" ${FORCE:+--force}
}
group_args() {  # GROUPS_PER_STEP groups a step, of the preset's G=4 or NUM_GENERATIONS rollouts
  [ "$GROUPS_PER_STEP" = 1 ] || echo --groups-per-step "$GROUPS_PER_STEP"
  [ -z "$NUM_GENERATIONS" ] || echo --num-generations "$NUM_GENERATIONS"
}
if has grpo; then
  for S in $SEEDS; do
    stage "grpo seed $S: to step $GRPO_STEPS on $TRAIN_SPLIT from the warm start (at most $GRPO_MINUTES minutes this sitting)"
    # shellcheck disable=SC2046
    arm_run "grpo-$S" "$GRPO_STEPS" $(shared) $(group_args) --seed "$S" --run-name "grpo-$S"
  done
fi
if has control; then
  for S in $SEEDS; do
    controlled "$S" || continue
    stage "control seed $S: rewards permuted within each batch, $GRPO_STEPS steps (the GRPO run's), same lr, seed and code path"
    # shellcheck disable=SC2046
    arm_run "control-$S" "$GRPO_STEPS" $(shared) $(group_args) --seed "$S" --control permuted --run-name "control-$S"
  done
fi
if has watch; then
  for S in $SEEDS; do
    finished "watch-$S" && continue
    N=$(ls -d "$OUT/grpo-$S"/checkpoint-* 2>/dev/null | wc -l)
    stage "watch seed $S: $WATCH_SPLIT ($WATCH_LIMIT tasks x $WATCH_SAMPLES) at each of $N checkpoints, warm start first"
    run $DAGENT eval watch "$OUT/grpo-$S" --agent "$AGENT" --preset cpu --split "$WATCH_SPLIT" --limit "$WATCH_LIMIT" \
      --samples "$WATCH_SAMPLES" --workers "$WORKERS" --baseline "$OUT/sft/final" --max-checkpoints "$N" \
      --deadline 60 --poll 1 --out "$OUT/watch-$S" "${SUITE_ARGS[@]}" && mark "watch-$S"
  done
fi
wants() { [[ " $EVAL_ARMS " == *" $1 "* ]]; }
if has eval; then
  for S in $SEEDS; do  # an arm's evaluation is opened once, after that arm reached its steps
    for RUN in grpo control; do
      trained "$RUN" "$S" || continue
      if wants "$RUN" && [ ! -f "$OUT/.done/$RUN-$S" ]; then
        echo "$RUN-$S has not reached step $GRPO_STEPS: finish it first (STAGES=\"grpo control\"); eval stays closed" >&2
        exit 3
      fi
    done
  done
  if wants warm; then
    stage "eval: the warm start on $EVAL_SPLIT ($EVAL_LIMIT seeded tasks x $EVAL_SAMPLES), once: every seed's paired baseline"
    evaluated eval-warm --model "$OUT/sft/final" --split "$EVAL_SPLIT" --limit "$EVAL_LIMIT" --samples "$EVAL_SAMPLES"
  fi
  for S in $SEEDS; do
    for RUN in grpo control; do
      wants "$RUN" || continue
      trained "$RUN" "$S" || continue
      stage "eval seed $S: $RUN on $EVAL_SPLIT ($EVAL_LIMIT seeded tasks x $EVAL_SAMPLES)"
      evaluated "eval-$RUN-$S" --model "$OUT/$RUN-$S/final" --split "$EVAL_SPLIT" --limit "$EVAL_LIMIT" --samples "$EVAL_SAMPLES"
    done
  done
fi
if has pool; then
  stage "pool: per seed and pooled over seeds ($SEEDS)"
  G=(); GC=(); CW=()
  for S in $SEEDS; do
    WARM=$(arm "$OUT/eval-warm"); GRPO=$(arm "$OUT/eval-grpo-$S")
    G+=("$WARM" "$GRPO")
    controlled "$S" || continue  # GRPO - control pairs a seed's arms; seeds without a control are not in it
    CTRL=$(arm "$OUT/eval-control-$S"); GC+=("$CTRL" "$GRPO"); CW+=("$WARM" "$CTRL")
  done
  run $DAGENT eval pool "${G[@]}" --a-arm "warm start" --b-arm GRPO --out "$OUT/pool-grpo-vs-warm"
  run $DAGENT eval pool "${GC[@]}" --a-arm control --b-arm GRPO --out "$OUT/pool-grpo-vs-control"
  run $DAGENT eval pool "${CW[@]}" --a-arm "warm start" --b-arm control --out "$OUT/pool-control-vs-warm"
fi
publish() {  # publish NAME DEST ARM: an evaluation's records as DEST.jsonl, and DEST.json saying what made them
  local name=$1 dest=$2 arm=$3
  [ -n "${DRY_RUN:-}" ] || [ -f "$OUT/.done/$name" ] || { echo "$name is not finished: not published" >&2; exit 3; }
  run mkdir -p "$(dirname "$dest")"
  run cp "$(arm "$OUT/$name")/records.jsonl" "$dest.jsonl"
  # every episode's transcript (dagent.harness.play.write_records), compressed, beside its records
  if [ -f "$(arm "$OUT/$name")/transcripts.jsonl.gz" ]; then run cp "$(arm "$OUT/$name")/transcripts.jsonl.gz" "$dest.transcripts.jsonl.gz"; fi
  [ -n "${DRY_RUN:-}" ] || SFT_N=$SFT_N SFT_STEPS=$SFT_STEPS TRAIN_SPLIT=$TRAIN_SPLIT TRAIN_LIMIT=$TRAIN_LIMIT \
    TRAIN_SAMPLES=$TRAIN_SAMPLES GROUPS_PER_STEP=$GROUPS_PER_STEP GRPO_STEPS=$GRPO_STEPS EVAL_SPLIT=$EVAL_SPLIT \
    EVAL_LIMIT=$EVAL_LIMIT EVAL_SAMPLES=$EVAL_SAMPLES MODEL=$MODEL CONTROL_SEEDS="$CONTROL_SEEDS" BASE_RECORDS="$(base_records)" \
    $PY - "$OUT" "$arm" "$dest.json" "$(arm "$OUT/$name")" "$WARM_SHA" <<'EOF'
import hashlib, json, os, platform, shutil, sys
from pathlib import Path
from dagent.recipes.hardware import cpu_has_bf16
out, arm, dest, made, warm_sha = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
# the commit the evaluation RAN at (its own provenance), not this sitting's: a record published again later keeps it
summary = made / "summary.json"
project, conditions = {}, None
if summary.is_file():  # the episode conditions travel with the records: a pool of published arms checks them (F47)
    made_by = json.loads(summary.read_text())
    project, conditions = made_by.get("provenance", {}).get("project") or {}, made_by.get("conditions")
commit = (project.get("revision") or "unknown")[:7] + (" (uncommitted changes)" if project.get("dirty") else "")
record = {"evaluation": dest.stem, "arm": arm, "commit": commit, "warm_start_sha256": warm_sha,
          "base_evaluation": os.environ["BASE_RECORDS"], "cpus": os.cpu_count(), "machine": platform.machine(),
          "bf16_native": cpu_has_bf16(), "conditions": conditions}
final = out / ("sft" if arm in ("warm", "base") else arm) / "final"
if sorted(final.glob("*.safetensors")):  # the weights this arm evaluated, digested as WARM_SHA is
    h = hashlib.sha256()
    for f in sorted(final.glob("*.safetensors")):
        h.update(f.read_bytes())
    record["weights_sha256"] = h.hexdigest()
if arm not in ("warm", "base"):
    last = max((out / arm).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    record["steps"] = json.loads((last / "trainer_state.json").read_text())["global_step"]
    shutil.copy(last / "trainer_state.json", dest.with_suffix(".trainer_state.json"))  # the curves' data
record["sizes"] = {k: os.environ[k] for k in ("SFT_N", "SFT_STEPS", "TRAIN_SPLIT", "TRAIN_LIMIT", "TRAIN_SAMPLES",
                                              "GROUPS_PER_STEP", "GRPO_STEPS", "EVAL_SPLIT", "EVAL_LIMIT",
                                              "EVAL_SAMPLES", "MODEL", "CONTROL_SEEDS")}
dest.write_text(json.dumps(record, indent=1) + "\n")
print(dest)
EOF
}
if has publish; then
  DEST=${PUBLISH:-docs/runs/lr-$LOOP}
  stage "publish: this sitting's evaluations into $DEST"
  [ -n "${DRY_RUN:-}" ] || WARM_SHA=$(cat "$OUT"/sft/final/*.safetensors | sha256sum | cut -d' ' -f1)  # once for all
  if [ -z "$BASE_EVAL" ] && [ -f "$OUT/.done/base-train" ]; then publish base-train "$DEST/base-train" base; fi
  if wants warm; then publish eval-warm "$DEST/warm" warm; fi
  for S in $SEEDS; do
    for RUN in grpo control; do
      trained "$RUN" "$S" || continue
      if wants "$RUN"; then publish "eval-$RUN-$S" "$DEST/seed-$S/$RUN" "$RUN-$S"; fi
    done
    if [ -f "$OUT/.done/watch-$S" ]; then  # the held-out curve's data: each point's records, seed-S/watch/POINT.jsonl
      run mkdir -p "$DEST/seed-$S/watch"
      for POINT in "$OUT/watch-$S"/*/; do
        P=$(basename "$POINT")
        if [ -f "$POINT/$P/records.jsonl" ]; then run cp "$POINT/$P/records.jsonl" "$DEST/seed-$S/watch/$P.jsonl"; fi
      done
    fi
  done
fi
if has report; then  # dagent.eval.learning_report: this sitting's evaluations, or (REPORT_FROM) the published ones
  if [ -n "${REPORT_FROM:-}" ]; then
    stage "report: the records published in $REPORT_FROM -> $OUT/report/results.md"
    run mkdir -p "$OUT/report"
    for STATE in "$REPORT_FROM"/seed-*/*.trainer_state.json; do  # seed-S/RUN.trainer_state.json -> RUN-S_curves.png
      [ -f "$STATE" ] || continue
      S=$(basename "$(dirname "$STATE")"); RUN=$(basename "$STATE" .trainer_state.json)
      run $PY -m dagent.train.curves "$STATE" --out "$OUT/report/$RUN-${S#seed-}_curves.png"
    done
    WATCH=()  # each seed's published watch records (seed-S/watch/POINT.jsonl): the held-out curves
    for W in "$REPORT_FROM"/seed-*/watch; do
      if [ -d "$W" ]; then S=$(basename "$(dirname "$W")"); WATCH+=("$W" --label "seed ${S#seed-}"); fi
    done
    [ ${#WATCH[@]} -gt 0 ] && run $PY -m dagent.eval.watch_curves "${WATCH[@]}" \
      --title "$WATCH_SPLIT pass@1 at each checkpoint" --out "$OUT/report/watch_curves.png"
    run $PY -m dagent.eval.learning_report "$REPORT_FROM" --out "$OUT/report"
  else
    stage "report: $OUT/results.md"
    STEPS=()
    for S in $SEEDS; do
      for RUN in grpo control; do
        LAST=$(last_checkpoint "$OUT/$RUN-$S")
        [ -n "$LAST" ] || continue
        [ "$RUN" = control ] || STEPS+=("seed $S: $(step_of "$LAST") steps")
        run $PY -m dagent.train.curves "$LAST" --out "$OUT/$RUN-${S}_curves.png"
      done
    done
    WATCH=(); for S in $SEEDS; do [ -d "$OUT/watch-$S" ] && WATCH+=("$OUT/watch-$S" --label "seed $S"); done
    [ ${#WATCH[@]} -gt 0 ] && run $PY -m dagent.eval.watch_curves "${WATCH[@]}" \
      --title "$WATCH_SPLIT pass@1 at each checkpoint" --out "$OUT/watch_curves.png"
    ABOUT="Protocol: docs/learning.md. Sizes: warm start from $SFT_N demonstrations (SFT_STEPS=$SFT_STEPS, -1: one \
epoch); per seed ($SEEDS) GRPO on $TRAIN_SPLIT for at most $GRPO_MINUTES minutes a sitting ($(IFS=,; echo "${STEPS[*]}")) \
and the permuted-reward control (seeds $CONTROL_SEEDS) for the same steps; the final claim on $EVAL_SPLIT ($EVAL_LIMIT seeded tasks x \
$EVAL_SAMPLES samples), never looked at before; checkpoint curves on $WATCH_SPLIT ($WATCH_LIMIT tasks x $WATCH_SAMPLES)."
    # shellcheck disable=SC2086
    run $PY -m dagent.eval.learning_report "$OUT" --seeds $SEEDS --control-seeds $CONTROL_SEEDS --out "$OUT" \
      --title "Learning, measured: the $LOOP loop ($AGENT agent), $MODEL on CPU" --about "$ABOUT"
  fi
fi
stage done
