# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[all]"]
# ///
"""Benchmark: where a white-box GRPO step's seconds go, on this machine.

Runs `--steps` GRPO steps of the cpu preset (TRL's GRPOTrainer, the in-process white-box
environment, real local sandboxes) and prints, per step and summed, the split the trainer's step
timer records (`dagent.train.timing`): generation (the model decoding every turn), tools in the
sandbox (exec / read / write), sandbox set-up (create, stage, close), environment overhead
(dagent's env code around them: registry, clipping, grading), trainer scoring (old/ref logprobs,
reward bookkeeping) and the optimizer step (forward, backward, step). The target: the
environment's share (overhead + set-up) under 10% of a step.

    python benchmarks/train.py --model runs/sft/final --steps 3
    python benchmarks/train.py --model tiny-qwen3 --steps 2 --max-completion-length 384
    python benchmarks/train.py --from runs/grpo          # the split a finished run logged

A random model (tiny-qwen3) never calls a tool, so its split has no tool time; use a model that
calls tools (an SFT warm start) for a representative one.

Side by side on one machine (2-core Sapphire Rapids with AMX; the 96-demonstration SmolLM2-135M warm
start; 3 steps of 2 groups of 4 on train:easy, seed 0, the same completions in each arm; one arm at a
time, nothing else running):

    python benchmarks/train.py --model DIR --steps 3 --batch 8 --generation-dtype float32   # as TRL generates
    python benchmarks/train.py --model DIR --steps 3 --batch 8                              # bfloat16 generation
    python benchmarks/train.py --model DIR --steps 3 --batch 8 --lora 16                    # + LoRA r=16 (peft 0.21.2)

generation 130.8 s -> 88.9 s (float32 -> bfloat16), the step 220.3 s -> 179.7 s: 392 -> 481 rollouts
trained per hour. LoRA r=16 on top: 319 an hour (generation 171.9 s through the unmerged adapters,
the optimizer phase 67.3 -> 73.6 s: the backward pass still runs through every layer).

On a 2-core AMD EPYC with AVX2 only (bfloat16 emulated, so float32 throughout; the same warm start,
2 steps of 2 groups of 4, seed 0, one arm at a time, nothing else running):

    python benchmarks/train.py --model DIR --steps 2 --batch 8 --generator transformers --gradient-checkpointing on
    python benchmarks/train.py --model DIR --steps 2 --batch 8 --generator engine --gradient-checkpointing on
    python benchmarks/train.py --model DIR --steps 2 --batch 8 --generator engine --gradient-checkpointing off

TRL's generation -> dagent's engine (dagent.train.whitebox.engine_generation): generation 231.6 s -> 92.3 s,
the two steps 579.3 s -> 445.3 s, 99 -> 129 rollouts trained per hour, peak memory 7.5 -> 8.0 GiB.
Gradient checkpointing off on top (an engine that still emptied its prefix cache every turn):
optimizer phase 271.6 -> 227.8 s, 135 an hour, but peak memory 19.4 GiB, so the preset keeps it on.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

PHASES = ("generation", "sandbox_tools", "sandbox_setup", "env_overhead", "scoring", "optimizer")


def table(steps: list[dict[str, float]]) -> str:
    head = f"{'step':>4} {'total s':>8} " + " ".join(f"{p:>13}" for p in PHASES)
    rows = [head]
    for i, s in enumerate(steps, 1):
        rows.append(f"{i:>4} {s['step']:>8.1f} " + " ".join(f"{s[p]:>13.2f}" for p in PHASES))
    total = sum(s["step"] for s in steps)
    sums = {p: sum(s[p] for s in steps) for p in PHASES}
    rows.append(f"{'all':>4} {total:>8.1f} " + " ".join(f"{sums[p]:>13.2f}" for p in PHASES))
    rows.append(f"{'%':>4} {100.0:>8.1f} " + " ".join(f"{100 * sums[p] / total:>13.1f}" for p in PHASES))
    env = sums["env_overhead"] + sums["sandbox_setup"]
    rows.append(
        f"environment share (overhead + sandbox set-up): {100 * env / total:.1f}% of a step "
        f"(target < 10%); tools in the sandbox {100 * sums['sandbox_tools'] / total:.1f}%"
    )
    return "\n".join(rows)


def from_run(path: Path) -> list[dict[str, float]]:
    """The per-step split a finished run logged (trainer_state.json of its last checkpoint)."""
    states = sorted(path.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        raise SystemExit(f"no checkpoint-*/trainer_state.json under {path}")
    history = json.loads(states[-1].read_text())["log_history"]
    if any("time/unsplit" in h for h in history):
        raise SystemExit(f"{states[-1]}: the run's TRL had no methods to split a step by (time/unsplit)")
    steps = [{p: h[f"time/{p}"] for p in (*PHASES, "step")} for h in history if "time/step" in h]
    if not steps:
        raise SystemExit(f"{states[-1]} holds no time/* metrics (a run from before the step timer)")
    return steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-qwen3")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--split", default="train:easy")
    p.add_argument("--num-generations", type=int, default=None)
    p.add_argument("--max-completion-length", type=int, default=None)
    p.add_argument("--batch", type=int, default=None, help="rollouts a step (groups x G; default: the preset's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    p.add_argument(
        "--generation-dtype",
        default="auto",
        choices=["auto", "float32"],
        help="auto: bfloat16 generation on a CPU with native bfloat16; float32: as TRL does",
    )
    p.add_argument(
        "--generator",
        default=None,
        choices=["transformers", "engine"],
        help="transformers: TRL's generate; engine: dagent's continuous batching over the same module "
        "(default: the preset's)",
    )
    p.add_argument(
        "--gradient-checkpointing",
        default=None,
        choices=["on", "off"],
        help="recompute activations in the backward pass (default: the preset's)",
    )
    p.add_argument("--from", dest="from_run", default=None, help="Print the split a finished run logged.")
    args = p.parse_args()
    if args.from_run:
        print(table(from_run(Path(args.from_run))))
        return

    from dagent.engine.models import model_dir
    from dagent.recipes import WhiteboxRecipe
    from dagent.suites.sources import load_tasks
    from dagent.tools.episode import close_all
    from dagent.train.whitebox.grpo import build_trainer

    given = {
        k: v
        for k, v in dict(
            num_generations=args.num_generations,
            per_device_train_batch_size=args.batch,
            max_completion_length=args.max_completion_length,
            generator=args.generator,
            gradient_checkpointing=None if args.gradient_checkpointing is None else args.gradient_checkpointing == "on",
        ).items()
        if v is not None
    }
    recipe = WhiteboxRecipe.cpu(
        split=args.split,
        max_steps=args.steps,
        save_steps=10_000,
        seed=args.seed,
        generation_dtype=args.generation_dtype,
        **given,
    )
    peft_config = None
    if args.lora:
        try:
            from peft import LoraConfig
        except ImportError as e:
            raise SystemExit(
                "--lora needs peft: .venv/bin/pip install peft==0.21.2 (not a dependency of dagent: "
                "LoRA measured slower than full fine-tuning on a CPU, see the module's docstring)"
            ) from e
        peft_config = LoraConfig(
            r=args.lora, lora_alpha=2 * args.lora, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    with tempfile.TemporaryDirectory() as out:
        run = build_trainer(model_dir(args.model), load_tasks(None), recipe, out, force=True, peft_config=peft_config)
        try:
            run.trainer.train()
        finally:
            close_all()
    print(
        f"{args.model}: {args.steps} steps, G={recipe.num_generations}, "
        f"{recipe.max_completion_length} completion tokens, split {args.split}, generation {args.generation_dtype} "
        f"by {recipe.generator}, "
        f"gradient checkpointing {'on' if recipe.gradient_checkpointing else 'off'}, "
        f"{f'LoRA rank {args.lora}' if args.lora else 'full fine-tuning'}"
    )
    print(table(run.timer.steps))
    rollouts = args.steps * recipe.per_device_train_batch_size
    print(
        f"rollouts trained per hour: {3600 * rollouts / sum(s['step'] for s in run.timer.steps):.0f} "
        f"({rollouts} rollouts, {recipe.per_device_train_batch_size} a step)"
    )
    import resource

    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB")
    logged = [h for h in run.trainer.state.log_history if "completions/mean_length" in h]
    for key in ("completions/mean_length", "completions/max_length", "completions/clipped_ratio", "num_turns"):
        values = [h[k] for h in logged for k in h if k.startswith(key)]
        if values:
            print(f"{key}: " + ", ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main()
