# /// script
# requires-python = ">=3.11"
# dependencies = ["dagent[all]"]
# ///
"""Benchmark: one turn of white-box generation on a CPU, three ways over the same float32 module.

    python benchmarks/generation.py --model runs/sft/final

8 rows (two GRPO groups of 4: two prompts, each shared by its group), `--new-tokens` sampled
tokens each (end-of-sequence ignored, so every arm decodes the same number), side by side in one
process, one arm at a time:

    generate   transformers' `generate` on the left-padded batch, as TRL 1.16 generates without vLLM
    batch      transformers' continuous batching (`generate_batch`), TRL's
               `use_transformers_continuous_batching`
    engine     dagent's engine over the same module (`dagent.train.whitebox.engine_generation`: continuous
               batching, a group's shared prompt prefilled once)

Prints tokens per second per arm and each arm's ratio to `generate`. A whole training step, where
finished rows leave the engine's batch early and a row's second turn reuses its first, is
`benchmarks/train.py --generator transformers|engine`.
"""

from __future__ import annotations

import argparse
import time


def prompts(tokenizer) -> list[list[int]]:
    system = "You are a data analyst with a bash tool. Answer from the tables in the working directory. " * 12
    questions = [
        "What is the mean departure delay of the flights out of JFK in flights.csv?",
        "How many rows of orders.parquet have a status of 'shipped'?",
    ]
    rows = []
    for q in questions:
        ids = tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": q}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        rows += [list(ids)] * 4
    return rows


def by_generate(model, tokenizer, rows, new_tokens, config) -> int:
    import torch

    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return (out.shape[1] - width) * len(rows)


def by_batch(model, tokenizer, rows, new_tokens, config) -> int:
    outs = model.generate_batch(rows, generation_config=config, progress_bar=False)
    return sum(len(o.generated_tokens) for o in outs.values())


def by_engine(model, tokenizer, rows, new_tokens, config) -> int:
    from dagent.core.sampling import Sampling
    from dagent.engine.generation import GenerationRequest, LocalEngine

    engine = LocalEngine(model, tokenizer, eos_token_ids=(), max_model_len=8192, max_num_seqs=16)
    gens = engine.run_here(
        [
            GenerationRequest(
                prompt_ids=tuple(r),
                max_tokens=new_tokens,
                ignore_eos=True,
                seed=i,
                sampling=Sampling(temperature=config.temperature),
            )
            for i, r in enumerate(rows)
        ]
    )  # the model on this (main) thread, as the trainer runs it
    return sum(len(g.token_ids) for g in gens)


ARMS = {"generate": by_generate, "batch": by_batch, "engine": by_engine}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-qwen3")
    p.add_argument("--new-tokens", type=int, default=130)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from dagent.engine.models import model_dir
    from dagent.recipes import cpu_has_bf16

    path = model_dir(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = prompts(tokenizer)
    config = GenerationConfig(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        do_sample=True,
        temperature=0.8,
        top_p=1.0,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=None,
    )
    print(
        f"{args.model}: {len(rows)} rows of {len(rows[0])}-{len(rows[-1])} prompt tokens, {args.new_tokens} new "
        f"tokens each, float32, {torch.get_num_threads()} threads, native bfloat16: {cpu_has_bf16()}"
    )
    seconds = {}
    for name in args.arms:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        with torch.no_grad():
            tokens = ARMS[name](model, tokenizer, rows, args.new_tokens, config)
        seconds[name] = time.perf_counter() - t0
        print(
            f"{name:>9}: {tokens} tokens in {seconds[name]:6.1f} s, {tokens / seconds[name]:6.1f} tokens/s"
            + (f", {seconds['generate'] / seconds[name]:.2f}x generate" if "generate" in seconds else "")
        )


if __name__ == "__main__":
    main()
