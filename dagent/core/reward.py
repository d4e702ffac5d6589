"""Reward from a grade and the episode's own tool-call count (pure).

    reward = correctness * (1 + W * B / (B + tool_calls))      W = 0.3, B = 15 by default

- Efficiency MULTIPLIES correctness (F33): a wrong answer earns 0 whatever it cost, so inaction
  can never beat a real attempt, and the reward is monotone non-decreasing in correctness and
  non-increasing in tool calls. The bonus is at most W (0.3 at zero calls, 0.15 at B calls).
- Ungraded stays `None` (F32): an infrastructure failure is not a wrong answer and must drop out
  of the group baseline, not count as 0.0.
- `tool_calls` is counted from the episode's own trace by the caller, never read from a file
  the agent might not write (F34).
- `mode="correctness"` gives pure correctness (the arm without shaping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dagent.errors import ConfigError

RewardMode = Literal["efficiency", "correctness"]


@dataclass(frozen=True)
class RewardConfig:
    mode: RewardMode = "efficiency"
    weight: float = 0.3  # W: the largest efficiency bonus, kept well under 1
    budget: float = 15.0  # B: tool calls at which the bonus is half of W

    def __post_init__(self) -> None:
        if self.mode not in ("efficiency", "correctness"):
            raise ConfigError(f"unknown reward mode {self.mode!r}; use 'efficiency' or 'correctness'")
        if not (0.0 <= self.weight < 1.0) or self.budget <= 0:
            raise ConfigError("reward weight must be in [0, 1) and budget > 0")


def reward(correct: bool | float | None, tool_calls: int, config: RewardConfig = RewardConfig()) -> float | None:
    """The episode reward; None when the episode was not graded."""
    if correct is None:
        return None
    correctness = float(correct)
    if config.mode == "correctness":
        return correctness
    if tool_calls < 0:
        raise ConfigError(f"tool_calls must be >= 0, got {tool_calls}")
    return correctness * (1.0 + config.weight * config.budget / (config.budget + tool_calls))
