"""Linear layers with weights pre-packed for oneDNN, for a served model whose weights never change.

A decode step multiplies one row per sequence by every weight matrix (a matrix-vector product),
so it is bound by how fast the weights stream from memory. The same matrices packed once into
oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's freezing does)
and multiplied by `_linear_pointwise` stream faster than PyTorch's plain `linear` in bfloat16
(figures: benchmarks/README.md, `benchmarks/engine.py`). float32 is not packed: its plain kernel
already streams at the memory's speed.

The packed copy is taken once, so it must only be used where the weights are frozen for the
process's life: the engine process (`dagent.engine.server.build_engine`), never the in-process
engine a trainer optimises (`dagent.engine.inprocess`), whose weights change every step.
The result equals the plain layer to bfloat16 rounding (same oneDNN arithmetic, another blocking);
`RaggedBackend.self_check` runs after packing and the engine falls back to one sequence at a time
if it fails.
"""

from __future__ import annotations

from typing import Any

from dagent.engine.models import native_half_precision


def packable(model: Any) -> bool:
    """Whether this model's linear layers would be packed: half precision on a CPU whose oneDNN
    computes it natively (AVX512-BF16/AMX or AVX512-FP16)."""
    import torch

    dtype = getattr(model, "dtype", None)
    return (
        dtype in (torch.bfloat16, torch.float16)
        and torch.backends.mkldnn.is_available()
        and native_half_precision(dtype)
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def pack_linears(model: Any) -> int:
    """Replace the forward of every `torch.nn.Linear` in `model` by a pre-packed oneDNN product;
    return how many were packed (0 where `packable` is False). Weights must not change afterwards."""
    import torch

    if not packable(model):
        return 0
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.device.type == "cpu":
            module.forward = _packed_forward(module.weight.detach(), module.bias)
            count += 1
    return count


def _packed_forward(weight: Any, bias: Any) -> Any:
    import torch

    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
    bias = None if bias is None else bias.detach()
    out_features, in_features = weight.shape

    def forward(x: Any) -> Any:
        if x.dtype != weight.dtype:
            return torch.nn.functional.linear(x, weight, bias)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, in_features), packed, bias, "none", [], "")
        return y.reshape(*x.shape[:-1], out_features)

    return forward
