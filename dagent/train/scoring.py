"""The trainer's log-probs on CPU scored at the completion's positions only.

TRL 1.16's fused LM head (`trl.trainer.utils.add_fused_lm_head`) scores only the positions that
carry a label on Triton devices (CUDA, XPU) and EVERY position elsewhere: "the number of valid
positions would change the tile shapes on every batch and trigger a recompilation" (its comment,
about Neuron). A CPU compiles nothing, so there it pays the vocabulary projection for every prompt
token too: a black-box row with opencode's ~6,000-token prompt and a ~200-token completion costs
about 30 times the head work it needs (measured: tests/train/test_scoring.py checks the
log-probs are identical both ways; benchmarks/cpu_logprobs.py times them side by side).

`score_completions_only()` makes the compact choice for CPU devices too: TRL's own masked path
(`hidden_states[mask]`, then `masked_scatter` back), its own torch tiles; nothing else changes.
Idempotent; a no-op on a TRL without the private hook (the CPU then pays the full cost again).
"""

from __future__ import annotations

from typing import Any

from dagent.train.trl_seams import USE_TRITON


def score_completions_only() -> bool:
    """Patch TRL's fused LM head's position choice so a CPU scores only labelled positions; returns
    whether the hook was found (False: this TRL has no `_use_triton` in trl.trainer.utils)."""
    import trl.trainer.utils as utils

    original = getattr(utils, USE_TRITON, None)
    if original is None:
        return False
    if getattr(original, "_dagent_compact_cpu", False):
        return True

    def compact(device: Any) -> bool:
        return device.type == "cpu" or original(device)

    compact._dagent_compact_cpu = True  # type: ignore[attr-defined]
    compact.original = original  # type: ignore[attr-defined]
    setattr(utils, USE_TRITON, compact)
    return True


def restore() -> None:
    """Undo `score_completions_only` (for the side-by-side measurement)."""
    import trl.trainer.utils as utils

    current = getattr(utils, USE_TRITON, None)
    if current is not None and getattr(current, "_dagent_compact_cpu", False):
        setattr(utils, USE_TRITON, current.original)
