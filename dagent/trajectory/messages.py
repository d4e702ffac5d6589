"""A chat message's content as text, wherever dagent reads messages (captured calls, pi's event
stream, MCP tool results, TRL's prompts): a string as it is; a list of content parts (OpenAI's,
MCP's, pi's blocks) joined from their `text` fields, optionally only the parts of one `type`."""

from __future__ import annotations

from typing import Any


def content_text(content: Any, *, part_type: str | None = None) -> str:
    """`content` (a string, a list of parts, or None) as one string; `part_type` keeps only the
    parts whose `type` is it (pi's assistant messages mix text with tool calls and thinking)."""
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and (part_type is None or p.get("type") == part_type)
        )
    return str(content or "")
