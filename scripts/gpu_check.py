"""The prepared GPU check: dagent's trainers on one accelerator, in minutes, with receipts.

    scripts/gpu_check.sh                  # on the lent GPU machine (CUDA, bf16)
    scripts/gpu_check.sh --device cpu     # the same path on a CPU (CI runs it)

Built for the GPU machine as it is lent: torch, transformers, accelerate and peft installed, no vLLM,
nothing downloadable (TRL and the rest travel as wheels). Everything runs on the tiny Qwen3 made
here (random weights, the real Qwen3 tokenizer and template), so no model is fetched. Stages, each
ending in one receipt line (`RECEIPT {json}`):

1. `sft`: 2 SFT steps (TRL's SFTTrainer) on a tokenised tool-calling demonstration; the weights move.
2. `grpo`: 2 white-box GRPO steps (GRPOTrainer's transformers generation, bf16 on CUDA) through
   dagent's tool environment and sandbox, generation steered towards two submit_solution calls so
   groups carry reward variance; the checkpoint holds the optimizer and the weights moved.
3. `inprocess`: the black-box path's engine: the trainer's own module served in-process on the
   device (`InProcessEngine`), one two-turn conversation through the capture proxy, and the captured
   chain audited token by token against what the engine produced (every id and logprob its own).

4. `direction` (on request): the direction check of tests/train/test_direction.py on the device.
5. `learning` (on request): a short white-box GRPO run for `--minutes`, printing the reward per step
   and rollouts trained per hour (scripts/gpu_learning_check.sh runs 4 and 5).

Exit 0 when every receipt passes. It does not cover vLLM, AsyncGRPOTrainer or a harness binary
(none can be installed on that machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECEIPTS: list[dict[str, Any]] = []
CALL = '<tool_call>\n{{"name": "submit_solution", "arguments": {{"answer": {}}}}}\n</tool_call><|im_end|>'


def receipt(stage: str, ok: bool, seconds: float, **detail: Any) -> None:
    row = {"stage": stage, "ok": bool(ok), "seconds": round(seconds, 1), **detail}
    RECEIPTS.append(row)
    print("RECEIPT " + json.dumps(row, default=str), flush=True)


def timed(stage: str, fn: Callable[[], dict[str, Any]]) -> None:
    started = time.monotonic()
    try:
        detail = fn()
    except Exception as e:  # noqa: BLE001 - a receipt names the failure; the next stage still runs
        receipt(stage, False, time.monotonic() - started, error=f"{type(e).__name__}: {e}"[:500])
        return
    receipt(stage, detail.pop("ok"), time.monotonic() - started, **detail)


def moved(before: dict[str, Any], model: Any) -> int:
    import torch

    return sum(not torch.equal(p.detach().cpu(), before[k]) for k, p in model.named_parameters())


def steer(tokenizer: Any) -> list[list[Any]]:
    """Biases towards submitting the gold of train[0] (3) or 4 at about even odds: groups carry variance."""
    biased: dict[tuple[int, ...], float] = {}
    for answer in (3, 4):
        ids = tokenizer(CALL.format(answer), add_special_tokens=False)["input_ids"]
        for k in range(len(ids)):
            biased[tuple(ids[: k + 1])] = 25.0 * (k + 1)
    return [[list(seq), bias] for seq, bias in biased.items()]


def snapshot(model: Any) -> dict[str, Any]:
    return {k: p.detach().cpu().clone() for k, p in model.named_parameters()}


def sft(device: str, out: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.tools import select
    from dagent.train.sft import sft_trainer, tokenize_demonstration, trainer_chat_template

    path = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    call = {"type": "function", "function": {"name": "submit_solution", "arguments": {"answer": "3"}}}
    messages = [
        {"role": "user", "content": "How many data rows does /workdir/input/t.csv have?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "submit_solution", "content": "submitted"},
        {"role": "assistant", "content": "I submitted 3."},
    ]  # the shape of dagent.train.sft.demonstration
    row = tokenize_demonstration(messages, tokenizer, select("bash"), chat_template=trainer_chat_template(tokenizer))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    before = snapshot(model)
    cuda = device == "cuda"
    trainer = sft_trainer(
        model,
        tokenizer,
        [row] * 4,
        output_dir=out,
        max_steps=2,
        batch_size=2,
        learning_rate=1e-3,
        save_steps=2,
        use_cpu=not cuda,
        bf16=cuda,
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    changed = moved(before, trainer.model)
    return {
        "ok": trainer.state.global_step == 2 and changed > 0 and (out / "checkpoint-2" / "optimizer.pt").is_file(),
        "steps": trainer.state.global_step,
        "losses": losses,
        "tensors_changed": changed,
        "device": str(next(trainer.model.parameters()).device),
    }


def steered_run(device: str, out: Path, **recipe: Any) -> Any:
    """White-box GRPO on the tiny Qwen3 through dagent's tool environment, generation steered
    towards submitting the gold (3) or a wrong digit (4) at about even odds."""
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.sandbox.local import LocalBackend
    from dagent.suites.sources import load_tasks
    from dagent.train.whitebox.grpo import build_trainer
    from tests.factories import demo_tasks, write_suite

    path = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    root = write_suite(out / "suite")
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks = [t for t in demo_tasks(0) if t.gold == "3"]  # every train task's gold is 3: every group can split
    pq.write_table(pa.Table.from_pylist([t.to_row() for t in tasks]), root / "data" / "train-00000-of-00001.parquet")
    cuda = device == "cuda"
    settings = dict(
        split="train",
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        warmup_steps=0,
        use_cpu=not cuda,
        bf16=False,
    )
    return build_trainer(
        path,
        load_tasks(root),
        WhiteboxRecipe.cpu(**{**settings, **recipe}),
        out / "grpo",
        backend=LocalBackend(base_dir=out / "sandboxes"),
        generation_kwargs={"sequence_bias": steer(tokenizer)},
    )


def direction(device: str, out: Path) -> dict[str, Any]:
    """The direction check of tests/train/test_direction.py on the device, its truth from outside the
    trainer (F57): one batch of real steered rollouts through the preset's engine generator, the
    sampler's own output recorded as generated (`SamplerLog`) and each rollout's answer graded by
    the grader; the real batch passes, a flipped advantage sign fails."""
    from dagent.suites.sources import load_tasks
    from dagent.tools.episode import close_all
    from dagent.train.verify.batch import Record
    from dagent.train.verify.direction import DirectionError, Snapshot, replaying
    from dagent.train.verify.truth import SamplerLog, sampled_texts, sampler_audit, verdicts, verify_signal

    cpu = device == "cpu"  # dagent's engine generates for CPU modules; on a GPU, TRL's generate does
    run = steered_run(device, out, learning_rate=0.1, max_steps=1, seed=3, **({"generator": "engine"} if cpu else {}))
    trainer = replaying(run.trainer)
    inputs = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    try:
        with SamplerLog() as log:
            batch = trainer._generate_and_score_completions(inputs)
    finally:
        close_all()
    record, snap = Record.of(batch), Snapshot(trainer)
    suite = load_tasks(out / "suite")  # the suite steered_run wrote: the grader's golds
    tokenizer = trainer.processing_class
    if cpu:  # the engine's own output: the texts graded and the audit's reference (F57)
        texts = sampled_texts(batch, log, tokenizer)
        audit = sampler_audit(batch, log, max_completion_length=trainer.args.max_completion_length)
    else:  # TRL's generate is not logged: the batch's own completions graded, no sampler audit (said below)
        texts = [
            tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])
        ]
        audit = []
    truth = verdicts(suite, [row["task_id"] for row in inputs], texts)

    def judged(b: dict[str, Any]) -> Any:
        return verify_signal(trainer, b, record, truth, 4, audit=audit, snapshot=snap)

    real = judged(batch)
    try:
        judged(dict(batch, advantages=-batch["advantages"]))
        caught = False
    except DirectionError:
        caught = True
    return {
        "ok": real.follows() and caught and (bool(log.generations) or not cpu),
        "real": real.summary(),
        "verdicts": truth,
        "sampler_audit": "the engine's generations" if cpu else "none: TRL's generate on the device is not logged",
        "sign_fault_caught": caught,
        "device": str(next(trainer.model.parameters()).device),
    }


def learning(device: str, out: Path, minutes: float = 8.0) -> dict[str, Any]:
    """A short white-box GRPO run for `minutes`: rollouts trained per hour and the reward per step."""
    from dagent.tools.episode import close_all

    run = steered_run(device, out, max_steps=400, save_steps=1000, learning_rate=1e-4)
    from dagent.train.budget import TimeBudget

    budget = TimeBudget(minutes)
    run.trainer.add_callback(budget)
    started = time.monotonic()
    try:
        run.trainer.train()
    finally:
        close_all()
    seconds = time.monotonic() - started
    steps = run.trainer.state.global_step
    rewards = [round(h["reward"], 3) for h in run.trainer.state.log_history if "reward" in h]
    rollouts = steps * run.trainer.args.per_device_train_batch_size
    for k, r in enumerate(rewards, 1):
        print(f"  step {k:3d} reward {r:.3f} " + "#" * int(r * 20), flush=True)
    return {
        "ok": steps > 0 and bool(rewards),
        "steps": steps,
        "rollouts_per_hour": round(rollouts / seconds * 3600),
        "rewards": rewards,
        "seconds": round(seconds, 1),
    }


def grpo(device: str, out: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    from dagent.engine.models import tiny_qwen3
    from dagent.recipes import WhiteboxRecipe
    from dagent.sandbox.local import LocalBackend
    from dagent.suites.sources import load_tasks
    from dagent.tools.episode import close_all
    from dagent.train.whitebox.grpo import build_trainer
    from tests.factories import write_suite

    path = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    suite = load_tasks(write_suite(out / "suite"))
    cuda = device == "cuda"
    recipe = WhiteboxRecipe.cpu(
        split="train",
        max_steps=2,
        save_steps=2,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=192,
        output_chars=100,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        warmup_steps=0,
        use_cpu=not cuda,
        bf16=cuda,
    )
    run = build_trainer(
        path,
        suite,
        recipe,
        out / "grpo",
        backend=LocalBackend(base_dir=out / "sandboxes"),
        generation_kwargs={"sequence_bias": steer(tokenizer)},
    )
    before = snapshot(run.trainer.model)
    try:
        run.trainer.train()
    finally:
        close_all()
    changed = moved(before, run.trainer.model)
    rewards = [h.get("reward") for h in run.trainer.state.log_history if "reward" in h]
    ckpt = out / "grpo" / "checkpoint-2"
    return {
        "ok": changed > 0 and (ckpt / "optimizer.pt").is_file(),
        "tensors_changed": changed,
        "rewards": rewards,
        "device": str(next(run.trainer.model.parameters()).device),
        "bf16": bool(run.trainer.args.bf16),
        "cuda": torch.cuda.is_available(),
    }


def inprocess(device: str, out: Path) -> dict[str, Any]:
    import httpx
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dagent.capture.server import CaptureServer
    from dagent.core.sampling import RECIPE_SAMPLING
    from dagent.engine.inprocess import InProcessEngine
    from dagent.engine.models import tiny_qwen3
    from dagent.trajectory.analysis import logprobs_ok

    path = tiny_qwen3()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.to(device)
    engine = InProcessEngine(model, tokenizer, served_model_name="tiny", sampling=RECIPE_SAMPLING).start()
    try:
        with CaptureServer(engine.url + "/v1", model="tiny") as capture:
            session = capture.open_session(4)
            messages = [{"role": "user", "content": "Count the rows of /workdir/input/t.csv."}]
            with httpx.Client(timeout=300) as client:
                for _ in range(2):  # an appending agent: the second call extends the first
                    r = client.post(
                        f"{session.base_url}/chat/completions",
                        headers={"Authorization": f"Bearer {session.api_key}"},
                        json={"model": "tiny", "messages": messages, "max_tokens": 16},
                    )
                    r.raise_for_status()
                    messages += [
                        {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"] or ""},
                        {"role": "user", "content": "Go on."},
                    ]
            trajectory = capture.trajectory(session.session_id)
            capture.close_session(session.session_id)
    finally:
        engine.stop()
    chain = trajectory.chain_turns()
    first, second = (chain + [None, None])[:2]
    appended = bool(
        first
        and second
        and list(second.prompt_token_ids or [])[: len(first.prompt_token_ids or [])]
        == list(first.prompt_token_ids or [])
    )
    exact = all(t.prompt_token_ids is not None and logprobs_ok(t) for t in chain)
    return {
        "ok": len(chain) == 2 and appended and exact,
        "chain": len(chain),
        "one_root": len(trajectory.roots) == 1,
        "engine_ids_and_logprobs": exact,
        "second_extends_first": appended,
        "completion_tokens": [len(t.completion_token_ids) for t in chain],
        "findings": [f.code for f in trajectory.findings],
        "device": str(next(model.parameters()).device),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--stages", default="sft,grpo,inprocess", help="comma-separated: sft, grpo, inprocess, direction, learning"
    )
    parser.add_argument("--minutes", type=float, default=8.0, help="the learning stage's budget")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu", file=sys.stderr)
        return 2
    print(
        f"gpu_check on {args.device}: torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name(0)}" if args.device == "cuda" else ""),
        flush=True,
    )
    stages = {
        "sft": sft,
        "grpo": grpo,
        "inprocess": inprocess,
        "direction": direction,
        "learning": lambda device, out: learning(device, out, args.minutes),
    }
    with tempfile.TemporaryDirectory(prefix="dagent-gpu-check-") as tmp:
        for name in args.stages.split(","):
            timed(name, lambda name=name: stages[name](args.device, Path(tmp) / name))
    failed = [r["stage"] for r in RECEIPTS if not r["ok"]]
    print(
        f"gpu_check: {len(RECEIPTS) - len(failed)} of {len(RECEIPTS)} receipts pass"
        + (f"; failing: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
