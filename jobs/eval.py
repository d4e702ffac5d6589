# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # On HF Jobs point this at the repository or Space that holds dagent, e.g.
#   # "dagent[all] @ git+https://huggingface.co/spaces/<you>/data-agent"; locally run it from the venv.
#   "dagent[all]",
# ]
# ///
"""Evaluate agents: exactly `dagent eval`'s arguments (and its `compare` / `watch` subcommands).

Locally:   .venv/bin/python jobs/eval.py --agent tools --model smollm2-135m --split test:easy --samples 4 --limit 20
HF Jobs:   hf jobs uv run --flavor l4x1 --secrets HF_TOKEN jobs/eval.py --agent tools --engine vllm \\
             --model OWNER/CHECKPOINT --baseline OWNER/BASE --split test:easy --samples 4 --push-to OWNER/RESULTS
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from dagent.cli import main as cli

    sys.argv = ["dagent", "eval", *(sys.argv[1:] if argv is None else argv)]
    cli()
    return 0


if __name__ == "__main__":
    sys.exit(main())
