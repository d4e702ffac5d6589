"""White-box generation on a CPU in bfloat16 where the CPU computes it natively.

TRL 1.16 generates with transformers (no vLLM on a CPU) from the model it trains. On a CPU that
model holds float32 weights (the optimizer's master copy: a 5e-6 step is below bfloat16's
resolution for most weights), and `bf16=True` reaches only the loss's forward and backward
(accelerate's autocast): `generate` runs in float32. Measured (SmolLM2-135M warm start, 8 rows, a
393-token prompt, 100 new tokens, 2-core Sapphire Rapids with AMX): float32 45 tokens/s as TRL
generates, 80 with one `torch.autocast(bfloat16)` around the call, 89-96 from a bfloat16 copy of
the weights. Generation was 60% of a white-box GRPO step here (`benchmarks/train.py`).

`generate_in_bf16(trainer)` wraps the trainer's `_generate_single_turn` (every turn of the tool
loop) in one autocast context: the weights are cast once a call (autocast caches the casts of
leaf parameters for the context's lifetime), never copied or synced, so generation always sees
the weights the optimizer just wrote. The sampler then computes as the loss's forward does
(autocast bfloat16), where before it computed in float32. Where the CPU emulates bfloat16 (no
AVX512-BF16 or AMX) nothing changes: float32 is faster there (benchmarks/README.md).
"""

from __future__ import annotations

from typing import Any

from dagent.train.trl_seams import GENERATE_TURN, wrap_method

METHOD = GENERATE_TURN


def generate_in_bf16(trainer: Any) -> bool:
    """Wrap `trainer._generate_single_turn` in a CPU bfloat16 autocast (an instance attribute;
    TRL's class untouched). Returns whether it was wrapped (False: this TRL has no such method)."""
    import torch

    def wrap(method: Any) -> Any:
        def generate(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return method(*args, **kwargs)

        return generate

    return wrap_method(trainer, METHOD, "_dagent_bf16", wrap)
