"""What the recipes read of the machine they run on."""

from __future__ import annotations

from pathlib import Path


def cpu_has_bf16() -> bool:
    """bf16 matmuls are fast on CPUs with AMX or AVX512-BF16; elsewhere fp32 is faster and exact."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_bf16" in flags or " avx512_bf16" in flags
