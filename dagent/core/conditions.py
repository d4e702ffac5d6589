"""The conditions an agent's episode runs under, defined once per recipe and recorded with every
result (F47): a checkpoint measured under other conditions than it trained under (another
temperature, a tighter token budget per call, a lower step cap) is measured on another task.

Training reads them from its recipe; evaluation runs each arm under the conditions of the recipe
it names (`--preset`) and writes them into the arm's summary.json; `dagent eval compare` refuses to
compare arms measured under different conditions unless told (`conditions_differ`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dagent.core.sampling import Sampling


@dataclass(frozen=True)
class Conditions:
    loop: str  # "white-box" (the trainer's tool loop) or "black-box" (a harness owns the loop)
    temperature: float
    top_p: float
    top_k: int
    tokens_per_call: int | None  # one generation's max_tokens
    tokens_per_episode: int | None  # generated + tool-result tokens after the prompt (TRL's completion budget)
    step_cap: int | None  # tool calls (white-box) or model turns (black-box) an episode may take
    output_chars: int | None  # a tool result's clip, where dagent clips it
    timeout_s: float | None  # an episode's wall clock, where one is enforced

    @classmethod
    def of(cls, loop: str, sampling: Sampling, **limits: Any) -> Conditions:
        return cls(loop=loop, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k, **limits)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def conditions_differ(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """The fields two recorded conditions differ in (`name: a != b`); none when either is unrecorded."""
    if not a or not b:
        return []
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
