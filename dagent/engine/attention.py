"""Attention kernels of the local engine's packed steps (pure torch): one new token against a
sequence's keys and values (`decode_kernel` picks the faster of two on the machine it runs on), and
attention in two parts over disjoint keys, each with its log-sum-exp, merged exactly (`attention_lse`,
`merge`: a group's shared prompt read once for all its queries, then each row's own positions).
`dagent.engine.batching` calls them."""

from __future__ import annotations

import functools
import time
from typing import Any

__all__ = [
    "DECODE_KERNELS",
    "SharedFloat",
    "attention_lse",
    "decode_attention",
    "decode_kernel",
    "merge",
    "sdpa_decode",
]


def attention_lse(query: Any, keys: Any, values: Any, scale: float) -> tuple[Any, Any]:
    """Attention of `query` [B, heads, R, dim] (R queries, none masked) over `keys`/`values`
    [B, kv_heads, L, dim], in float32, with each output's log-sum-exp [B, heads, R, 1]: two parts of
    one attention (a shared prefix, a row's own positions) merge exactly (`merge`). The query heads
    that read one key/value head are folded into its query rows (transformers' `repeat_kv` order)."""
    import torch

    batch, heads, r, dim = query.shape
    kv_heads = keys.shape[1]
    grouped = query.float().reshape(batch, kv_heads, (heads // kv_heads) * r, dim)
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2))
    # in place on the fresh scores (no [.., L] temporaries a step); inference only: autograd refuses it
    peak = scores.mul_(scale).amax(dim=-1, keepdim=True)
    weights = scores.sub_(peak).exp_()
    total = weights.sum(dim=-1, keepdim=True)
    out = torch.matmul(weights, values.float()) / total
    return out.reshape(batch, heads, r, dim), (peak + torch.log(total)).reshape(batch, heads, r, 1)


def merge(a: tuple[Any, Any], b: tuple[Any, Any]) -> Any:
    """One attention from two (output, log-sum-exp) parts over disjoint keys."""
    import torch

    (oa, la), (ob, lb) = a, b
    lse = torch.logaddexp(la, lb)
    return oa * torch.exp(la - lse) + ob * torch.exp(lb - lse)


def decode_attention(query: Any, keys: Any, values: Any, scaling: float | None) -> Any:
    """One new token against a sequence's keys/values, query heads grouped onto their key/value
    head (transformers' `repeat_kv` order: query head h reads kv head h // group), computed in
    float32 whatever the model's dtype. On some CPUs `scaled_dot_product_attention` is slow for
    one query in bfloat16, on others it is the faster (figures: benchmarks/README.md), so
    `decode_kernel` times both on the machine it runs on."""
    import torch

    _, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    grouped = query.float().reshape(1, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2)) * (dim**-0.5 if scaling is None else scaling)
    out = torch.matmul(torch.softmax(scores, dim=-1), values.float())
    return out.to(query.dtype).reshape(1, heads, 1, dim)


def sdpa_decode(query: Any, keys: Any, values: Any, scaling: float | None) -> Any:
    """One new token against a sequence's keys/values with `scaled_dot_product_attention`."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(
        query, keys, values, scale=scaling, enable_gqa=query.shape[1] != keys.shape[1]
    )


DECODE_KERNELS = {"float32": decode_attention, "sdpa": sdpa_decode}


@functools.cache
def decode_kernel(dtype: Any, kv_heads: int, heads: int, head_dim: int) -> Any:
    """The faster decode-attention kernel for this shape on this CPU, timed once per process on a
    1,024-token context (the best of 3 runs of 8 calls each; either kernel gives the same
    attention to the dtype's rounding, so a noisy timing costs speed, never correctness)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    query = torch.randn(1, heads, 1, head_dim, generator=gen).to(dtype)
    keys, values = (torch.randn(1, kv_heads, 1024, head_dim, generator=gen).to(dtype) for _ in range(2))
    timings = {}
    with torch.inference_mode():
        for name, kernel in DECODE_KERNELS.items():
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(8):
                    kernel(query, keys, values, None)
                runs.append(time.perf_counter() - start)
            timings[name] = min(runs)
    return DECODE_KERNELS[min(timings, key=timings.__getitem__)]


class SharedFloat:
    """Float32 copies of the shared prefixes the decoding groups attend to, made once per prefix and
    layer and kept while a step still reads them. `attention_lse` computes in float32: without this,
    every step converted each group's whole prompt (keys and values, every layer) from the model's
    dtype again, the largest cost of a bfloat16 decode step after the projections (profiled at 16 rows
    over a 1.74k-token prompt). A shared prefix is never written again, and each entry holds its
    source tensor, so its storage (and address, the key) cannot be reused while the entry lives."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int, int], tuple[Any, Any, Any]] = {}
        self.used: set[tuple[int, int, int]] = set()

    def of(self, layer: int, base: tuple[Any, Any]) -> tuple[Any, Any]:
        import torch

        keys, values = base
        if keys.dtype == torch.float32:
            return base
        key = (layer, keys.data_ptr(), keys.shape[2])
        self.used.add(key)
        if key not in self.entries:
            self.entries[key] = (keys, keys.float(), values.float())
        return self.entries[key][1], self.entries[key][2]

    def end_step(self) -> None:
        """Drop what this step did not read (groups that finished or stopped sharing)."""
        for key in [k for k in self.entries if k not in self.used]:
            del self.entries[key]
        self.used.clear()
