# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # On HF Jobs point this at the repository or Space that holds dagent, e.g.
#   # "dagent[all] @ git+https://huggingface.co/spaces/<you>/data-agent"; locally run it from the venv.
#   "dagent[all]",
# ]
# ///
"""White-box GRPO: TRL's GRPOTrainer(environment_factory=...) against the data-agent environment.

Locally (CPU):  .venv/bin/python jobs/train_whitebox.py --preset cpu --model tiny-qwen3 --max-steps 2
                (the same as `dagent train whitebox --preset cpu --max-steps 2`)
HF Jobs (GPU):  hf jobs uv run --flavor a100-large --secrets HF_TOKEN jobs/train_whitebox.py \\
                  --preset gpu --model OWNER/SFT-CHECKPOINT --push-to-hub OWNER/RUN --env-url https://OWNER-data-agent.hf.space
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from dagent.jobargs import parse
    from dagent.train.grpo import WhiteboxArgs, train_whitebox

    train_whitebox(parse(WhiteboxArgs, argv, __doc__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
