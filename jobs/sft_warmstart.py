# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # None here on purpose: PyPI's `dagent` is another package. `dagent jobs run` adds this project
#   # pinned at a commit (--with "dagent[gpu] @ git+URL@SHA" on GPUs); locally run it from the venv.
# ]
# ///
"""SFT warm start: fine-tune a small model on oracle demonstrations (real episodes of the train
split, pre-tokenised exactly as GRPO will see them) so that GRPO starts from a policy that calls
tools. Writes `<out>/final` (model + tokenizer with its chat template) for the GRPO job to start
from, checkpoints with optimizer state under `<out>/checkpoint-*`, and `<out>/sft_summary.json`.

Locally:  .venv/bin/python jobs/sft_warmstart.py --model tiny-qwen3 --max-steps 5 --out runs/sft-smoke
Black-box (the harness's own format, dagent.train.blackbox.harness_demos):
          .venv/bin/python jobs/sft_warmstart.py --model smollm2-135m --harness pi --n 64 --out runs/sft-pi
HF Jobs:  dagent jobs run --flavor a10g-small --secret HF_TOKEN sft \\
            --model smollm2-135m --suite OWNER/SUITE --push-to-hub OWNER/SFT-CHECKPOINT
Then:     jobs/train_whitebox.py --model runs/sft/final ...  (same --tools and split family)
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class SFTArgs:
    model: str = field(
        default="tiny-qwen3",
        metadata={
            "help": "tiny-qwen3, smollm2-135m, a local model directory or a Hub model repo OWNER/NAME[@REVISION]."
        },
    )
    suite: str | None = field(
        default=None, metadata={"help": "Local build, Hub repo id or hf://datasets/...; default: the bundled build."}
    )
    split: str = field(
        default="train:easy",
        metadata={"help": "Where demonstrations come from: train or train:<tier> only (held-out tasks would leak)."},
    )
    tools: str = field(
        default="all",
        metadata={"help": "Toolsets the GRPO run serves (bash, seta, all): the prompt's tool schemas (white-box)."},
    )
    harness: str | None = field(
        default=None,
        metadata={
            "help": (
                "Black-box warm start: demonstrations in each harness's own format (opencode, pi or pi,opencode), made "
                "by the real harness against an engine replaying the reference program, captured as black-box GRPO "
                "captures (default: white-box tool-loop demonstrations)."
            )
        },
    )
    n: int = field(default=48, metadata={"help": "Demonstrations to build (fewer when --max-steps needs fewer)."})
    epochs: float = field(
        default=1.0, metadata={"help": "Passes over the demonstrations (ignored when --max-steps > 0)."}
    )
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; -1: as many as --epochs take."})
    lr: float = field(
        default=1e-4, metadata={"help": "Learning rate (1e-4 took SmolLM2-135M to calling tools in 6 steps)."}
    )
    batch_size: int = field(default=1, metadata={"help": "Demonstrations per device batch (each is a whole episode)."})
    grad_accum: int = field(default=1, metadata={"help": "Batches per optimizer step."})
    max_length: int | None = field(
        default=None,
        metadata={"help": "Skip demonstrations longer than this many tokens; default: the model's context."},
    )
    save_steps: int = field(
        default=50, metadata={"help": "Checkpoint (with optimizer state) every N steps, and at the end."}
    )
    out: str = field(default="runs/sft", metadata={"help": "Output directory: checkpoints, final/, sft_summary.json."})
    seed: int = field(default=0, metadata={"help": "Seed of the task order and of training."})
    report_to: str = field(
        default="none", metadata={"help": "none or trackio (local store under $TRACKIO_DIR, project dagent-sft)."}
    )
    push_to_hub: str | None = field(default=None, metadata={"help": "Hub model repo (OWNER/NAME) to upload final/ to."})
    processes: int = field(
        default=0,
        metadata={
            "help": (
                "Trainer processes: 0 = one per visible GPU (relaunched under `accelerate launch` on a multi-GPU "
                "machine), N = that many."
            )
        },
    )
    accelerate_config: str = field(
        default="multi_gpu",
        metadata={
            "help": (
                "With more than one process: TRL's accelerate config (multi_gpu, zero1/zero2/zero3, fsdp1/fsdp2) or a "
                "YAML path."
            )
        },
    )


def main(args: SFTArgs) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from dagent.cli.app import load_suite
    from dagent.engine.models import model_dir
    from dagent.errors import ConfigError
    from dagent.launch.processes import relaunch
    from dagent.sandbox.local import LocalBackend
    from dagent.tools import select
    from dagent.train.blackbox.harness_demos import build_harness_demonstrations
    from dagent.train.sft import build_demonstrations, sft_trainer, trainer_chat_template

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # on a multi-GPU machine this process becomes N data-parallel trainer processes (each builds the
    # same demonstrations: same seed); only the first writes the summary and pushes
    relaunch(
        args.processes,
        args.accelerate_config,
        mixed_precision="bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no",
    )
    started = time.monotonic()
    path = model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    template = trainer_chat_template(tokenizer)  # refuses a template that renders no tools, before any work
    tools = select(args.tools)
    context = int(getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", 0) or 0) or None
    max_length = args.max_length or context
    n = args.n
    if args.max_steps > 0:
        n = min(n, args.max_steps * args.batch_size * args.grad_accum)

    suite = load_suite(args.suite)
    if args.harness:  # each harness its share of the demonstrations, in its own format
        names = [h.strip() for h in args.harness.split(",") if h.strip()]
        rows = [
            row
            for k, name in enumerate(names)
            for row in build_harness_demonstrations(
                suite,
                args.split,
                n=n // len(names) + (k < n % len(names)),
                model_dir=path,
                harness=name,
                served=args.model,
                seed=args.seed + k,
                max_length=max_length,
                echo=print,
            )
        ]
    else:
        rows = build_demonstrations(
            suite,
            args.split,
            n=n,
            backend=LocalBackend(),
            tokenizer=tokenizer,
            tools=tools,
            seed=args.seed,
            max_length=max_length,
        )
    built = time.monotonic()
    print(
        f"{len(rows)} demonstrations from {args.split} in {built - started:.1f}s "
        f"({sum(len(r['input_ids']) for r in rows):,} tokens, {sum(sum(r['completion_mask']) for r in rows):,} "
        "in the loss)"
    )

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # fp32 master weights
    out = Path(args.out)
    trainer = sft_trainer(
        model,
        tokenizer,
        rows,
        output_dir=out,
        epochs=args.epochs,
        max_steps=args.max_steps,
        learning_rate=args.lr,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        save_steps=args.save_steps,
        seed=args.seed,
        report_to=args.report_to,
    )
    result = trainer.train()
    trained = time.monotonic()

    final = out / "final"
    trainer.save_model(str(final))  # the model and the tokenizer (processing_class), chat template included
    if not trainer.is_world_process_zero():
        return 0
    saved = AutoTokenizer.from_pretrained(final)
    if saved.chat_template != tokenizer.chat_template or trainer_chat_template(saved) != template:
        raise ConfigError(
            f"the tokenizer saved in {final} renders with another chat template than SFT trained "
            "with: GRPO starting from it would see other tokens"
        )
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    steps = trainer.state.global_step
    summary = {
        "args": asdict(args),
        "model_dir": str(path),
        "final": str(final),
        "rows": len(rows),
        "task_ids": [r["task_id"] for r in rows],
        "tokens": sum(len(r["input_ids"]) for r in rows),
        "loss_tokens": sum(sum(r["completion_mask"]) for r in rows),
        "template": "tokenizer's own" if template is None else "TRL's training variant of the tokenizer's",
        "bf16": bool(trainer.args.bf16),
        "steps": steps,
        "train_loss": result.training_loss,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "build_s": round(built - started, 1),
        "train_s": round(trained - built, 1),
        "s_per_step": round((trained - built) / max(steps, 1), 2),
    }
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.push_to_hub:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(args.push_to_hub, repo_type="model", exist_ok=True)
        api.upload_file(
            path_or_fileobj=str(out / "sft_summary.json"), path_in_repo="sft_summary.json", repo_id=args.push_to_hub
        )
        api.upload_folder(folder_path=str(final), repo_id=args.push_to_hub, commit_message="SFT warm start")
    print(
        f"{steps} steps in {trained - built:.1f}s ({summary['s_per_step']}s/step), loss "
        f"{summary['first_loss']} -> {summary['last_loss']}; final model: {final}"
    )
    return 0


if __name__ == "__main__":
    from dagent.jobargs import parse

    sys.exit(main(parse(SFTArgs, description=__doc__)))
