"""Sizing vLLM engines that share one accelerator (F49).

vLLM takes `--gpu-memory-utilization` (default 0.9) of the card's TOTAL memory for itself: its
weights, activations and a key/value cache filling the rest. Two engines left at the default on
one card (an evaluation's checkpoint and its baseline) ask for 180%: the second dies at start-up,
or starts with no room for its cache, and its arm reads as a bad checkpoint. So each engine gets
a share computed from the card and both models, and a pair that cannot fit is refused before
anything starts.

What one engine needs at least: its weights, an activation and runtime allowance
(`OVERHEAD_BYTES`, CUDA graphs and the sampler's buffers), and a key/value cache that holds one
whole sequence of `max_model_len` tokens. What is left of the card's usable share (`USABLE`) is
split in proportion to each engine's cache cost per token, so both hold about as many tokens;
`max_num_seqs` is then the sequences of `TYPICAL_TOKENS` (an agent turn's context) its cache
holds, capped at vLLM's default of 256.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dagent.errors import ConfigError

USABLE = 0.90  # of the card, for all engines together: what vLLM's default leaves to the driver
OVERHEAD_BYTES = 2 * 1024**3  # per engine: activations, CUDA graphs, sampler buffers
TYPICAL_TOKENS = 8_192  # an agent turn's context, to turn cache tokens into sequences
MAX_NUM_SEQS = 256  # vLLM's own default and our ceiling
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1}


class EngineSizingError(ConfigError):
    """Engines that cannot share the card as asked (F49); the message names the figures and the fix."""


@dataclass(frozen=True)
class ModelShape:
    """What sizing needs of a model: its weight bytes and its key/value bytes per token."""

    name: str
    weight_bytes: int
    kv_bytes_per_token: int

    @classmethod
    def of(cls, model_dir: str | Path, name: str | None = None, dtype: str | None = None) -> ModelShape:
        """From a model directory: safetensors sizes, and layers x key/value heads x head size."""
        path = Path(model_dir)
        config = json.loads((path / "config.json").read_text())
        text = config.get("text_config") or config
        layers = int(text["num_hidden_layers"])
        heads = int(text.get("num_key_value_heads") or text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"])
        dtype = dtype or str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
        weights = sum(p.stat().st_size for p in path.glob("*.safetensors"))
        return cls(name or path.name, weights, 2 * layers * heads * head_dim * _DTYPE_BYTES.get(dtype, 2))


@dataclass(frozen=True)
class EngineShare:
    """One engine's share of the card: what it is started with."""

    model: str
    gpu_memory_utilization: float
    max_num_seqs: int
    cache_tokens: int  # the key/value cache it will hold, in tokens


def size_engines(card_bytes: int, models: Sequence[ModelShape], *, max_model_len: int) -> list[EngineShare]:
    """Each engine's share of one card (module docstring); EngineSizingError when they cannot fit."""
    if not models:
        return []
    budget = USABLE * card_bytes
    floors = [m.weight_bytes + OVERHEAD_BYTES + m.kv_bytes_per_token * max_model_len for m in models]
    if sum(floors) > budget:
        need = ", ".join(f"{m.name} {f / 1024**3:.1f} GiB" for m, f in zip(models, floors, strict=True))
        raise EngineSizingError(
            f"engines_do_not_fit: {len(models)} engine(s) on one card of {card_bytes / 1024**3:.1f} GiB need at least "
            f"{sum(floors) / 1024**3:.1f} GiB ({need}: weights, {OVERHEAD_BYTES / 1024**3:.0f} GiB runtime each, a "
            "cache "
            f"for one {max_model_len}-token sequence) of the {budget / 1024**3:.1f} GiB usable: lower --max-model-len, "
            "evaluate the arms one after the other, or use a larger card (F49)"
        )
    spare = budget - sum(floors)
    per_token = sum(m.kv_bytes_per_token for m in models)
    shares = []
    for model, floor in zip(models, floors, strict=True):
        extra = spare * model.kv_bytes_per_token / per_token
        tokens = max_model_len + int(extra // model.kv_bytes_per_token)
        shares.append(
            EngineShare(
                model.name,
                round((floor + extra) / card_bytes, 4),
                max(1, min(MAX_NUM_SEQS, tokens // TYPICAL_TOKENS)),
                tokens,
            )
        )
    return shares


def card_bytes() -> int | None:
    """Total memory of the first visible CUDA device, or None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)
