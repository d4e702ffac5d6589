# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # None here on purpose: PyPI's `dagent` is another package. `dagent jobs run` adds this project
#   # pinned at a commit (--with "dagent[gpu] @ git+URL@SHA" on GPUs); locally run it from the venv.
# ]
# ///
"""White-box GRPO: TRL's GRPOTrainer(environment_factory=...) against the data-agent environment.

Locally (CPU):  .venv/bin/python jobs/train_whitebox.py --preset cpu --model tiny-qwen3 --max-steps 2
                (the same as `dagent train whitebox --preset cpu --max-steps 2`)
HF Jobs (GPU):  dagent jobs run --flavor a100-large --secret HF_TOKEN train-whitebox \\
                  --preset gpu --model OWNER/SFT-CHECKPOINT --push-to-hub OWNER/RUN --env-url https://OWNER-data-agent.hf.space
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from dagent.jobargs import parse
    from dagent.train.whitebox.grpo import WhiteboxArgs, train_whitebox

    train_whitebox(parse(WhiteboxArgs, argv, __doc__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
