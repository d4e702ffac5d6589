"""The white-box tool surface: the registry (`surface`), its implementations over one sandbox
(`impl`) and the episode state machine that serves them with a step budget and grades the
submission (`episode`). `impl` imports `surface`, never the other way round."""

from dagent.tools.impl import execute
from dagent.tools.surface import (
    ALL_TOOLS,
    DEFAULT_TOOLSETS,
    OUTPUT_CHARS,
    READ_LIMIT,
    TERMINATOR,
    TOOLSETS,
    Refused,
    Signatures,
    ToolResult,
    ToolSettings,
    WireResult,
    clip,
    coerce_answer,
    confine,
    select,
    signature,
    tool_function,
    usage,
    validate,
)

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_TOOLSETS",
    "OUTPUT_CHARS",
    "READ_LIMIT",
    "TERMINATOR",
    "TOOLSETS",
    "Refused",
    "Signatures",
    "ToolResult",
    "ToolSettings",
    "WireResult",
    "clip",
    "coerce_answer",
    "confine",
    "execute",
    "select",
    "signature",
    "tool_function",
    "usage",
    "validate",
]
