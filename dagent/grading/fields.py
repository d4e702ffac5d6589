"""Record answers: several named values graded field by field (`answer_type` "record").

The gold is a JSON object (`{"mean_fare": 34.65, "median_age": 28}`); each field's type comes
from its gold value (a JSON number or a numeric string: number; true/false: bool; a JSON list:
list; other text: string) and is graded by `dagent.grading.value.grade_value` with that type, so every
rule of the single-value grader (placeholders, shell commands, hedges, units, percent) applies per
field. A field's tolerance is the task's (atol, rtol) unless `field_tolerances` names its own.
Correct only when every gold field is present and correct; the note names each field that failed.

The answer is read as a JSON object (a ``` fence allowed), else as `key: value` / `key = value`
pairs, one per line or separated by `;` or `,`. Keys match ignoring case, spaces, hyphens and
underscores; keys the gold does not have are ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dagent.grading.value import Grade, grade_value, parse_number

_FENCE = re.compile(r"^```[\w+-]*\n?(.*?)\n?```$", re.S)
_PAIR = re.compile(r"^\s*[\"'`]?(?P<key>[\w .-]{1,60}?)[\"'`]?\s*[:=]\s*(?P<value>.+?)\s*$")


def field_key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", str(name)).casefold()


def parse_gold(gold: str) -> dict[str, Any] | None:
    """The gold's fields, or None when the gold is not a non-empty JSON object (a task bug)."""
    try:
        value = json.loads(gold)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) and value else None


def parse_answer(text: str) -> dict[str, str] | None:
    """An answer's fields as text, or None when it is not a record."""
    text = text.strip()
    if m := _FENCE.match(text):
        text = m.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return {field_key(k): _as_text(v) for k, v in value.items()}
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    parts = re.split(r"\n|;", text) if ("\n" in text or ";" in text) else text.split(",")
    out: dict[str, str] = {}
    last: str | None = None
    for part in parts:
        if not part.strip():
            continue
        m = _PAIR.match(part)
        if m is None:
            if last is None:
                return None
            out[last] += "," + part  # `total: 1,234, mean: 2`: a thousands group, not a new field
            continue
        last = field_key(m.group("key"))
        out[last] = m.group("value").strip().rstrip(",").strip()
    return out or None


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(_as_text(v) for v in value)
    return "" if value is None else str(value)


def field_type(value: Any) -> str:
    """The single-value answer type a gold field is graded as."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "list"
    return "number" if parse_number(str(value).strip()) is not None else "string"


def grade_record(
    text: str, gold: str, atol: float, rtol: float, field_tolerances: Mapping[str, tuple[float, float]] | None = None
) -> Grade:
    """The record's Grade (text already decoded and non-empty)."""
    fields = parse_gold(gold)
    if fields is None:
        return Grade(None, None, "ungraded", "record gold is not a non-empty JSON object")
    answer = parse_answer(text)
    if answer is None:
        return Grade(0.0, False, "record", "not a record: expected a JSON object with the keys " + ", ".join(fields))
    tolerances = {field_key(k): v for k, v in (field_tolerances or {}).items()}
    failed: list[str] = []
    for name, gold_value in fields.items():
        key = field_key(name)
        if key not in answer:
            failed.append(f"{name}: missing")
            continue
        f_atol, f_rtol = tolerances.get(key, (atol, rtol))
        g = grade_value(answer[key], _as_text(gold_value), field_type(gold_value), f_atol, f_rtol)
        if g.correct is None:
            return Grade(None, None, "ungraded", f"record field {name!r}: {g.note}")
        if not g.correct:
            failed.append(f"{name}: {g.note}")
    if failed:
        return Grade(0.0, False, "record", f"{len(failed)} of {len(fields)} fields wrong: " + "; ".join(failed))
    return Grade(1.0, True, "record", f"all {len(fields)} fields correct")
