"""What a run keeps of its checkpoints: every checkpoint's weights, the optimizer state of the newest.

Held-out curves (`dagent eval watch`) evaluate EVERY checkpoint's weights, and a run resumes from
its NEWEST checkpoint (`--resume-from`, scripts/learning_run.sh), which needs that checkpoint's
optimizer state. The optimizer state is twice the weights in float32 (Adam's two moments): for
SmolLM2-135M 1.08 GB of a 1.6 GB checkpoint, so the learning protocol's 30 checkpoints (3 seeds x
2 arms x 5) would take 48 GB, more than this machine's disk has free. `LatestOptimizerOnly` removes
`optimizer.pt` from every checkpoint but the newest after each save, so the run takes 30 x 0.54 GB
plus one optimizer state an arm. A checkpoint pruned this way says so in `pruned.txt`; resuming
from it would restart the optimizer's moments, so resume from the newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

STATE = "optimizer.pt"
NOTE = "pruned.txt"


def checkpoint_step(path: Path) -> int:
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def prune_optimizer_states(output_dir: str | Path) -> list[Path]:
    """Delete `optimizer.pt` from every `checkpoint-N` under `output_dir` but the newest; returns
    the checkpoints pruned now."""
    found = sorted(
        (p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and checkpoint_step(p) >= 0),
        key=checkpoint_step,
    )
    pruned = []
    for ckpt in found[:-1]:
        state = ckpt / STATE
        if state.is_file():
            newest = found[-1].name
            state.unlink()
            (ckpt / NOTE).write_text(
                f"{STATE} removed after {newest} was saved (dagent.train.retention): these "
                f"weights evaluate as saved; resume from {newest}, whose optimizer state is kept\n"
            )
            pruned.append(ckpt)
    return pruned


@dataclass
class LatestOptimizerOnly(TrainerCallback):
    """After every save, the optimizer state of all but the newest checkpoint is removed."""

    pruned: list[Path] = field(default_factory=list)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.is_world_process_zero:
            self.pruned += prune_optimizer_states(args.output_dir)
        return control
