# /// script
# requires-python = ">=3.11"
# dependencies = [
#   # None here on purpose: PyPI's `dagent` is another package. `dagent jobs run` adds this project
#   # pinned at a commit (--with "dagent[gpu] @ git+URL@SHA" on GPUs); locally run it from the venv.
# ]
# ///
"""Black-box GRPO: the agent (opencode, pi) owns its loop; the trainer trains on captured tokens.

Locally (CPU, sync):  .venv/bin/python jobs/train_blackbox.py --mode sync --preset cpu --max-steps 2
                      (the same as `dagent train blackbox --mode sync --preset cpu --max-steps 2`)
HF Jobs (GPUs, async): dagent jobs run --flavor h200x2 --secret HF_TOKEN train-blackbox \\
                      --mode async --preset gpu --model OWNER/SFT-CHECKPOINT --push-to-hub OWNER/RUN
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from dagent.jobargs import parse
    from dagent.train.blackbox.args import BlackboxArgs
    from dagent.train.blackbox.trainer import train_blackbox

    train_blackbox(parse(BlackboxArgs, argv, __doc__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
