"""The trainer's log-probs on CPU: TRL's every-position scoring against dagent.train.scoring's
completion-only scoring, side by side in one run, on a black-box-shaped row (a long harness prompt,
a short completion) and a white-box-shaped one. Prints seconds per forward+backward and the ratio.

    .venv/bin/python benchmarks/cpu_logprobs.py [--model tiny-qwen3|smollm2-135m] [--prompt 6000] [--completion 200]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-qwen3")
    ap.add_argument("--prompt", type=int, default=6000)
    ap.add_argument("--completion", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from dagent.engine.models import model_dir
    from dagent.train import scoring

    model = AutoModelForCausalLM.from_pretrained(model_dir(args.model), dtype=torch.float32)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    for prompt in (args.prompt, 400):
        ids = torch.randint(0, 1000, (1, prompt + args.completion), generator=torch.Generator().manual_seed(0))
        labels = ids.clone()
        labels[:, :prompt] = -100

        def step() -> float:
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
            out.log_probs.sum().backward()
            return time.perf_counter() - t0

        times = {}
        for name, on in (("every position (TRL on CPU)", False), ("completion only (dagent)", True)):
            scoring.score_completions_only() if on else scoring.restore()
            step()  # warm
            times[name] = min(step() for _ in range(args.repeats))
        scoring.restore()
        (a, ta), (b, tb) = times.items()
        print(
            f"{args.model}, prompt {prompt} + completion {args.completion} tokens: {a} {ta:.2f} s, {b} {tb:.2f} s, "
            f"ratio {ta / tb:.1f}x"
        )


if __name__ == "__main__":
    main()
