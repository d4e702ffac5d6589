# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # On HF Jobs point this at the repository or Space that holds dagent, e.g.
#   # "dagent @ git+https://huggingface.co/spaces/<you>/data-agent"; locally run it from the venv.
#   "dagent",
# ]
# ///
"""Evaluate an agent on a split and write per-task records plus a summary.

Locally:   .venv/bin/python jobs/eval.py --split test --agent oracle
HF Jobs:   hf jobs uv run --flavor cpu-upgrade jobs/eval.py --split test --suite OWNER/NAME
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class EvalArgs:
    split: str = field(default="test", metadata={"help": "train, test or eval, optionally with one tier (test:hard)."})
    agent: str = field(default="oracle", metadata={"help": "The agent to evaluate: oracle, opencode."})
    model: str = field(default="tiny-qwen3", metadata={"help": "Local engine model when no --engine-url."})
    engine_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible engine URL (vLLM)."})
    suite: str | None = field(default=None, metadata={"help": "Local build, Hub repo id or hf://datasets/...; default: the bundled build."})
    workers: int = field(default=2, metadata={"help": "Episodes in parallel."})
    limit: int | None = field(default=None, metadata={"help": "Only the first N tasks."})
    out: str = field(default="runs/eval", metadata={"help": "Output directory for records.jsonl and summary.json."})


def parse(argv: list[str] | None = None) -> EvalArgs:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(EvalArgs):
        kind = int if f.type in ("int", "int | None") else str
        parser.add_argument(f"--{f.name}", type=kind, default=f.default, help=f.metadata["help"])
    return EvalArgs(**vars(parser.parse_args(argv)))


def main(args: EvalArgs) -> int:
    from dagent.cli import load_suite
    from dagent.harness.stack import agent_stack
    from dagent.runner import run_eval

    suite = load_suite(args.suite)
    with agent_stack(args.agent, suite, model=args.model, engine_url=args.engine_url) as stack:
        records, summary = run_eval(suite, args.split, stack.agent, stack.backend, workers=args.workers,
                                    limit=args.limit, out_dir=Path(args.out))
    print("\n".join(summary.lines()))
    return 0 if summary.ungraded == 0 and summary.wrong == 0 else 2


if __name__ == "__main__":
    sys.exit(main(parse()))
