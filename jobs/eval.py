# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # None here on purpose: PyPI's `dagent` is another package. `dagent jobs run` adds this project
#   # pinned at a commit (--with "dagent[gpu] @ git+URL@SHA" on GPUs); locally run it from the venv.
# ]
# ///
"""Evaluate agents: exactly `dagent eval`'s arguments (and its `compare` / `watch` subcommands).

Locally:   .venv/bin/python jobs/eval.py --agent tools --model smollm2-135m --split test:easy --samples 4 --limit 20
HF Jobs:   dagent jobs run --flavor l4x1 --secret HF_TOKEN eval --agent tools --engine vllm \\
             --model OWNER/CHECKPOINT --baseline OWNER/BASE --split test:easy --samples 4 --push-to OWNER/RESULTS
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from dagent.cli.app import main as cli

    sys.argv = ["dagent", "eval", *(sys.argv[1:] if argv is None else argv)]
    cli()
    return 0


if __name__ == "__main__":
    sys.exit(main())
