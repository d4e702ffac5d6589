"""Benchmark: the in-process engine (black-box sync training) computing its steps on a scheduler
thread of its own vs on the thread that waits for the rollouts (`InProcessEngine.serve_until`,
the trainer's main thread), side by side in one process, alternating.

    python benchmarks/inprocess.py --model smollm2-135m --requests 4 --max-tokens 64
    python benchmarks/inprocess.py --model runs/sft/final --rounds 3

Each round sends `--requests` concurrent completions of one long prompt (a GRPO group's shape:
the prefix is reused) from a thread pool, as a rollout phase does, and prints wall time and
completion tokens/s per mode.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagent.engine.inprocess import InProcessEngine  # noqa: E402
from dagent.engine.models import load_model  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="a model name dagent builds, or a model directory")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rows", type=int, default=300, help="rows of text in the prompt (sets its length)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per mode, alternating")
    args = p.parse_args()
    import torch

    loaded = load_model(args.model)
    prompt = "Question: " + " ".join(f"row {i}: value {i * 7 % 13}" for i in range(args.rows)) + "\nSummarise:"
    n_prompt = len(loaded.tokenizer(prompt).input_ids)
    print(
        f"model {args.model} ({loaded.dtype}), torch threads {torch.get_num_threads()}, "
        f"{args.requests} requests x {args.max_tokens} tokens, {n_prompt}-token prompt"
    )
    with InProcessEngine(loaded.model, loaded.tokenizer, served_model_name="policy") as engine:

        def call(seed: int) -> int:
            body = {
                "model": "policy",
                "prompt": prompt,
                "max_tokens": args.max_tokens,
                "seed": seed,
                "ignore_eos": True,
            }
            reply = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=3600).json()
            return int(reply["usage"]["completion_tokens"])

        call(0)  # warm: the prefix is cached for both modes alike
        seconds: dict[str, list[float]] = {"thread": [], "main": []}
        for _ in range(args.rounds):
            for mode in seconds:
                with engine.generating(), ThreadPoolExecutor(args.requests) as pool:
                    start = time.perf_counter()
                    futures = [pool.submit(call, s) for s in range(1, args.requests + 1)]
                    if mode == "main":
                        engine.serve_until(futures)
                    else:
                        wait(futures)
                    tokens = sum(f.result() for f in futures)
                    dt = time.perf_counter() - start
                seconds[mode].append(dt)
                print(f"{mode:6s} {dt:6.1f} s  {tokens / dt:6.1f} tok/s", flush=True)
    best = {m: min(v) for m, v in seconds.items()}
    print(
        (
            f"serve_until (main thread) vs a scheduler thread: {best['thread'] / best['main']:.2f}x faster (best of "
            f"{args.rounds})"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
